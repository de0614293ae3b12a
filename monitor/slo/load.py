"""Aggregate SGLang scheduler gauges per deployment without double counting.

Scheduler gauges are written once per scheduler (per `dp_rank`); with
`--enable-metrics-for-all-schedulers` every TP rank repeats the same value, and each PP stage
reports too. So per target and `dp_rank` keep one series (lowest pp_rank, tp_rank), then sum counts
over ranks and targets. Ratios (token_usage, cache_hit_rate, spec_accept_length) take the max:
the fullest rank is the one that throttles. With priority scheduling, only `priority=""` is the total.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from monitor.conventions.names import RATIO_GAUGES
from monitor.parse.exposition import Labels, Sample


def _rank(labels: dict[str, str], key: str) -> int:
    try:
        return int(labels.get(key, "0"))
    except ValueError:
        return 0


# A gauge's label set -> (dp_rank, (pp_rank, tp_rank)), or None for a per-priority breakdown. Label sets
# are the same tuple objects scrape after scrape (the parser's cache): each is read once. Bounded.
_RANKS: dict[Labels, tuple[str, tuple[int, int]] | None] = {}
_RANKS_MAX = 50_000


def _ranks(labels: Labels) -> tuple[str, tuple[int, int]] | None:
    try:
        return _RANKS[labels]
    except KeyError:
        pass
    d = dict(labels)
    got = None if d.get("priority", "") != "" else (d.get("dp_rank", ""), (_rank(d, "pp_rank"), _rank(d, "tp_rank")))
    if len(_RANKS) >= _RANKS_MAX:
        _RANKS.clear()
    _RANKS[labels] = got
    return got


def per_dp_rank(samples: Iterable[Sample]) -> dict[str, float]:
    """dp_rank -> value, one representative series per DP rank."""
    best: dict[str, tuple[tuple[int, int], float]] = {}
    for s in samples:
        ranks = _ranks(s.labels)
        if ranks is None:
            continue
        dp, order = ranks
        cur = best.get(dp)
        if cur is None or order < cur[0]:
            best[dp] = (order, s.value)
    return {dp: v for dp, (_, v) in best.items()}


def combine(metric: str, values: Iterable[float]) -> float | None:
    vals = [v for v in values if v == v]  # drop NaN
    if not vals:
        return None
    return max(vals) if metric in RATIO_GAUGES else sum(vals)


def aggregate(per_target: Mapping[str, tuple[str, Mapping[str, list[float]]]]) -> dict[str, dict[str, float]]:
    """per_target: target id -> (role, metric -> its value per DP rank, `per_dp_rank`). Returns role ->
    metric -> value, plus "all"."""
    by_role: dict[str, dict[str, list[float]]] = {}
    for role, metrics in per_target.values():
        for metric, vals in metrics.items():
            by_role.setdefault(role, {}).setdefault(metric, []).extend(vals)
            by_role.setdefault("all", {}).setdefault(metric, []).extend(vals)
    out: dict[str, dict[str, float]] = {}
    for role, metrics in by_role.items():
        for metric, vals in metrics.items():
            v = combine(metric, vals)
            if v is not None:
                out.setdefault(role, {})[metric] = v
    return out
