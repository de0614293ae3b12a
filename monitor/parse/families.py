"""Turn selected samples into the shapes the SLO engine uses: histograms, counters, gauges."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import NamedTuple

from monitor.conventions.names import COUNTERS, GAUGES, KV_TRANSFER_LATENCY
from monitor.conventions.slis import LEGACY_TPOT_FAMILY, SLI_FAMILIES
from monitor.parse.exposition import Dated, Labels, Sample, spell_value


class HistogramSeries(NamedTuple):
    """One cumulative histogram series: `edges` ascending and ending with +Inf."""

    family: str
    labels: Labels  # without `le`
    edges: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float  # NaN when the exposition has no _sum
    count: float  # the +Inf bucket when the exposition has no _count
    has_sum: bool = True


# The layout of a histogram read as a mean only (its _sum and _count): one +Inf bucket holding the count.
MEAN_ONLY_EDGES: tuple[float, ...] = (math.inf,)


class HistogramError(ValueError):
    pass


class Finding(str):
    """A warning's text (with the live numbers it quotes) that knows what it is about: `key`, its text without
    those numbers. The same problem on the next scrape has the same key, so it is logged once while it lasts
    and not once a scrape (issue #34 item 12: 12 lines a minute per target as the counts grew)."""

    key: str

    def __new__(cls, text: str, key: str | None = None) -> Finding:  # key optional: copy and pickle call cls(text)
        self = super().__new__(cls, text)
        self.key = text if key is None else key
        return self


def warning_key(warning: str) -> str:
    """What a warning is about, the same from scrape to scrape: a Finding's key, else the text itself."""
    return warning.key if isinstance(warning, Finding) else warning


def histogram_sample_names(families: Iterable[str]) -> set[str]:
    return {f"{f}{s}" for f in families for s in ("_bucket", "_sum", "_count")}


def engine_wanted() -> frozenset[str]:
    """Every sample name any reader could want from an SGLang server (`slo-monitor inspect`, tests); a scrape
    reads only its deployment's share of it (`monitor.feeds.target_wanted`)."""
    hists = [*SLI_FAMILIES.values(), LEGACY_TPOT_FAMILY, KV_TRANSFER_LATENCY]
    return frozenset(histogram_sample_names(hists) | set(COUNTERS.values()) | set(GAUGES.values()))


# A bucket's label set -> (the series' labels without `le`, the edge): label sets are the same tuple
# objects scrape after scrape (the parser's cache), so each is split once. Bounded like that cache.
_SPLIT_LE: dict[Labels, tuple[Labels, str | None]] = {}
_SPLIT_LE_MAX = 50_000


def _split_le(labels: Labels) -> tuple[Labels, str | None]:
    got = _SPLIT_LE.get(labels)
    if got is None:
        le = None
        rest = []
        for k, v in labels:
            if k == "le":
                le = v
            else:
                rest.append((k, v))
        if len(_SPLIT_LE) >= _SPLIT_LE_MAX:
            _SPLIT_LE.clear()
        got = _SPLIT_LE[labels] = (tuple(rest), le)
    return got


def group_histograms(samples: Iterable[Sample], family: str, *, strict: bool = True) -> list[HistogramSeries]:
    """Assemble the series of one histogram family; order of lines does not matter.

    strict: a series whose buckets are not monotone, or that lacks +Inf, raises HistogramError
    (a scrape with such a histogram is rejected rather than silently corrupting windows).
    """
    buckets: dict[Labels, dict[float, float]] = {}
    sums: dict[Labels, float] = {}
    counts: dict[Labels, float] = {}
    b_name, s_name, c_name = family + "_bucket", family + "_sum", family + "_count"
    for s in samples:
        if s.name == b_name:
            rest, le = _split_le(s.labels)
            if le is None:
                raise HistogramError(f"{b_name} sample without an `le` label")
            try:
                edge = float(le)
            except ValueError:
                raise HistogramError(f"{b_name}: le={le!r} is not a number") from None
            if edge != edge:
                # NaN != NaN: kept, such an edge would make every scrape look like a counter reset.
                raise HistogramError(f'{b_name}{dict(rest)}: le="{le}" is not a bucket edge')
            series = buckets.setdefault(rest, {})
            if edge in series:
                raise HistogramError(f"{b_name}{dict(rest)}: duplicate bucket le={le!r}")
            series[edge] = s.value
        elif s.name == s_name:
            sums[s.labels] = s.value
        elif s.name == c_name:
            counts[s.labels] = s.value
    out: list[HistogramSeries] = []
    for labels, series in buckets.items():
        edges = tuple(sorted(series))
        cum = tuple(map(series.__getitem__, edges))
        if not edges or edges[-1] != math.inf:
            if strict:
                raise HistogramError(f"{family}{dict(labels)}: no +Inf bucket")
            continue
        count = counts.get(labels, cum[-1])
        if strict:
            # A count that is not a finite, non-negative number would poison every window (NaN
            # events, a burn rate of NaN): the scrape is rejected, as Prometheus rejects it.
            if not (all(map(math.isfinite, cum)) and min(cum) >= 0):
                bad = next(v for v in cum if not _is_count(v))
                raise HistogramError(f"{family}{dict(labels)}: bucket count {spell_value(bad)} is not a finite, non-negative number")
            if not all(map(operator.le, cum, cum[1:])):
                raise HistogramError(f"{family}{dict(labels)}: bucket counts are not monotone")
            if not _is_count(count):
                raise HistogramError(f"{family}{dict(labels)}: _count {spell_value(count)} is not a finite, non-negative number")
        out.append(HistogramSeries(family, labels, edges, cum, sums.get(labels, math.nan), count,
                                   labels in sums))
    out.sort(key=lambda h: h.labels)
    return out


def _is_count(v: float) -> bool:
    return math.isfinite(v) and v >= 0


def histogram_warnings(h: HistogramSeries) -> list[str]:
    """What is wrong but not fatal in an accepted series: the scrape is used, the target flagged."""
    where = f"{h.family}{dict(h.labels)}"
    out = []
    if h.count != h.cumulative[-1]:
        # The counts grow from scrape to scrape while the disagreement lasts: the key leaves them out.
        out.append(Finding(f"{where}: _count {h.count:g} disagrees with the +Inf bucket {h.cumulative[-1]:g}",
                           f"{where}: _count disagrees with the +Inf bucket"))
    if not h.has_sum:
        out.append(f"{where}: no _sum: no mean reported")
    elif not math.isfinite(h.sum):
        out.append(f"{where}: _sum is {spell_value(h.sum)}: no mean reported")
    return out


def _seconds(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


def _samples_carry(n: int) -> str:
    return "1 sample carries" if n == 1 else f"{n} samples carry"


def dated_warnings(dated: Dated | None) -> list[str]:
    """The target's warnings for samples a parse left out for their timestamps (`monitor.parse.lines.only_current`).
    Their numbers change from scrape to scrape: the key leaves them out, so each is logged once while it lasts."""
    if dated is None:
        return []
    out: list[str] = []
    every = f"one scrape interval ({_seconds(dated.interval)} s)"
    along = (f"; {dated.along} current sample{'s' if dated.along != 1 else ''} of the same histogram series left out "
             "with them (a histogram series is read whole)") if dated.along else ""
    if dated.old:
        out.append(Finding(
            f"{_samples_carry(dated.old)} timestamps up to {_seconds(dated.oldest)} s "
            f"before the scrape ({dated.old_name} among them), more than {every}: not current, skipped (Prometheus "
            f"stores none older than its series' last sample or than its head, ~1 h){along}",
            "samples carry timestamps more than one scrape interval before the scrape: skipped"))
    if dated.ahead:
        out.append(Finding(
            f"{_samples_carry(dated.ahead)} timestamps up to {_seconds(dated.furthest)} s "
            f"after the scrape ({dated.ahead_name} among them), more than {every} ahead (a clock ahead, or milliseconds "
            "where OpenMetrics wants seconds?): not this scrape's values, skipped (Prometheus stores them at that time, "
            f"where a query now does not see them){'' if dated.old else along}",
            "samples carry timestamps more than one scrape interval after the scrape: skipped"))
    return out


def scalar_series(samples: Iterable[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s.name == name]
