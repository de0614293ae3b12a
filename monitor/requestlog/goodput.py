"""Goodput windows: pure functions from (finish timestamp, verdict) pairs to per-window numbers.

A request belongs to a window `(now - length, now]` by its finish timestamp. Each verdict is packed
into a small int so a window is a count per distinct mask (a handful of keys, whatever the traffic):
storing and summing millions of requests stays cheap.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from monitor.conventions.policy import SIDECAR_WINDOWS
from monitor.conventions.slis import REQUEST_SLIS
from monitor.requestlog.records import FAILED, Verdict

# What a request can miss: each SLI the request log judges (the records with request_log=True), or `failed`.
MISSED = (*REQUEST_SLIS, FAILED)
_GOOD = 1
_MISSED_BIT = {m: 1 << (1 + i) for i, m in enumerate(MISSED)}
_FIRST_SLI_BIT = 1 + len(MISSED)
_SLI_SEEN = {s: 1 << (_FIRST_SLI_BIT + 2 * i) for i, s in enumerate(REQUEST_SLIS)}
_SLI_MET = {s: 1 << (_FIRST_SLI_BIT + 1 + 2 * i) for i, s in enumerate(REQUEST_SLIS)}


def pack(v: Verdict) -> int:
    mask = _GOOD if v.good else 0
    for m in v.missed:
        mask |= _MISSED_BIT[m]
    for sli, met in v.sli_good.items():
        if met is not None:
            mask |= _SLI_SEEN[sli] | (_SLI_MET[sli] if met else 0)
    return mask


@dataclass(frozen=True)
class WindowGoodput:
    window: str
    seconds: float
    requests: int
    good: int
    missed: dict[str, int] = field(default_factory=dict)  # every MISSED key, 0 included
    sli_events: dict[str, int] = field(default_factory=dict)  # histogram-comparable population
    sli_good: dict[str, int] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """Share of requests that succeeded and met every SLO; None for an empty window."""
        return self.good / self.requests if self.requests else None

    @property
    def rate(self) -> float:
        """Good requests per second over the nominal window (bench_serving's goodput, in req/s)."""
        return self.good / self.seconds

    def sli_good_ratio(self, sli: str) -> float | None:
        n = self.sli_events.get(sli, 0)
        return self.sli_good.get(sli, 0) / n if n else None


def from_masks(window: str, seconds: float, counts: Mapping[int, int], slis: Sequence[str]) -> WindowGoodput:
    requests = sum(counts.values())
    good = sum(n for m, n in counts.items() if m & _GOOD)
    missed = {k: sum(n for m, n in counts.items() if m & bit) for k, bit in _MISSED_BIT.items()}
    events = {s: sum(n for m, n in counts.items() if m & _SLI_SEEN[s]) for s in slis}
    met = {s: sum(n for m, n in counts.items() if m & _SLI_MET[s]) for s in slis}
    return WindowGoodput(window, float(seconds), requests, good, missed, events, met)


def summarize(ts: Sequence[float], masks: Sequence[int], now: float, slis: Sequence[str] = REQUEST_SLIS,
              windows: Mapping[str, int] = SIDECAR_WINDOWS) -> dict[str, WindowGoodput]:
    """Per-window goodput of requests sorted by finish time (`ts` ascending, `masks` aligned).

    Windows nest, so the requests are counted once per band between two window starts and the
    bands are added up: one pass over the longest window, whatever the number of windows.
    """
    hi = bisect_right(ts, now)
    order = sorted(windows.items(), key=lambda kv: kv[1])
    out: dict[str, WindowGoodput] = {}
    acc: Counter[int] = Counter()
    end = hi
    for name, secs in order:
        start = bisect_right(ts, now - secs, 0, end)
        acc.update(masks[start:end])
        end = start
        out[name] = from_masks(name, secs, acc, slis)
    return {name: out[name] for name in windows}


def disagreement(summary: Mapping[str, WindowGoodput], histogram: Mapping[tuple[str, str], float | None]
                 ) -> dict[tuple[str, str], float]:
    """(sli, window) -> request-log good ratio minus histogram good ratio, where both exist."""
    out: dict[tuple[str, str], float] = {}
    for (sli, window), hist_ratio in histogram.items():
        w = summary.get(window)
        mine = w.sli_good_ratio(sli) if w is not None else None
        if mine is not None and hist_ratio is not None:
            out[(sli, window)] = mine - hist_ratio
    return out
