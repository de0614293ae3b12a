"""The aligned time-series model every source produces and every analysis step reads.

One grid of timestamps (`times`, `step` apart). Histograms are cumulative and reset-adjusted
(monotone), merged over the deployment's servers, one per grid point: any window's histogram is the
difference of two points. Other series are plain values per grid point, `None` where the source had
nothing (target down, family not exported).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from monitor.conventions.names import AVAILABILITY_SLI
from monitor.conventions.slis import GOODPUT_SLI
from monitor.slo.accumulate import ScalarAccumulator
from monitor.slo.histogram import Hist

Values = tuple[float | None, ...]


@dataclass(frozen=True)
class Series:
    key: str  # stable id, e.g. "load.server.num_queue_reqs"
    label: str  # what a reader sees, e.g. "queued requests (server)"
    group: str  # queue | running | kv | cache | spec | pd | router | accelerator | restarts | traffic
    unit: str
    values: Values


@dataclass(frozen=True)
class SliSpec:
    sli: str
    target: float
    objective: float
    latency: bool = True  # False for goodput: good/total events, no latency distribution


GOODPUT_EDGE = 1.0  # goodput rides the histogram code as a two-bucket histogram: good events at le=1


def count_hist(good: float, total: float) -> Hist:
    """Good and total events as a cumulative two-bucket histogram (good <= GOODPUT_EDGE, all <= +Inf)."""
    return Hist((GOODPUT_EDGE, float("inf")), (min(good, total), total), 0.0, total)


def goodput_spec(objective: float) -> SliSpec:
    return SliSpec(GOODPUT_SLI, GOODPUT_EDGE, objective, latency=False)


def summed_counter(columns: Sequence[Values]) -> Values:
    """Per-target counter columns made monotone (the sidecar's reset rule) and summed; a gap carries its last value."""
    accs = [ScalarAccumulator() for _ in columns]
    out: list[float | None] = []
    for i in range(len(columns[0]) if columns else 0):
        for acc, col in zip(accs, columns):
            if col[i] is not None:
                acc.update(col[i])
        adjusted = [v for v in (a.adjusted() for a in accs) if v is not None]
        out.append(sum(adjusted) if adjusted else None)
    return tuple(out)


def goodput_hists(good: Sequence[Values], finished: Sequence[Values]) -> tuple[Hist | None, ...] | None:
    """Per-target (good, finished) request counters -> the goodput SLI's histograms; None without any count."""
    g, t = summed_counter(good), summed_counter(finished)
    if not any(x is not None for x in t):
        return None
    return tuple(None if a is None or b is None else count_hist(a, b) for a, b in zip(g, t))


def availability_spec(objective: float) -> SliSpec:
    return SliSpec(AVAILABILITY_SLI, GOODPUT_EDGE, objective, latency=False)


def availability_hists(total: Sequence[Values], bad: Sequence[Sequence[Values]]
                       ) -> tuple[Hist | None, ...] | None:
    """Per-instance request counters and, per failure series, per-instance failure counters (each made monotone,
    summed; a failure series not created yet counts 0) -> the availability SLI's histograms (good = requests -
    failures, never below 0); None without any request count."""
    t = summed_counter(total)
    if not any(x is not None for x in t):
        return None
    b = [summed_counter(cols) for cols in bad if cols]
    out: list[Hist | None] = []
    for i, tot in enumerate(t):
        failed = sum(col[i] or 0.0 for col in b)
        out.append(None if tot is None else count_hist(max(tot - failed, 0.0), tot))
    return tuple(out)


@dataclass
class Dataset:
    deployment: str
    source: str  # "recording /path" or "prometheus http://..."
    times: tuple[float, ...]
    step: float
    hists: dict[str, tuple[Hist | None, ...]]
    series: dict[str, Series]
    slis: dict[str, SliSpec]
    period_seconds: float = 30 * 86400.0
    recipe_means: dict[str, float] = field(default_factory=dict)  # sli -> mean seconds (deployment.baseline)
    scrape_interval: float | None = None
    notes: list[str] = field(default_factory=list)

    def index_at(self, ts: float) -> int:
        """Index of the last grid point at or before `ts` (0 when `ts` precedes the grid)."""
        return max(bisect.bisect_right(self.times, ts + 1e-6) - 1, 0)

    def hist_at(self, sli: str, ts: float) -> Hist | None:
        """The newest histogram at or before `ts` (earlier points fill gaps)."""
        hs = self.hists.get(sli)
        if not hs:
            return None
        for i in range(self.index_at(ts), -1, -1):
            if hs[i] is not None:
                return hs[i]
        return None


def grid(start: float, end: float, step: float) -> tuple[float, ...]:
    """`start, start+step, ...` up to and including `end` (within float noise)."""
    n = int((end - start) / step + 1e-9)
    return tuple(start + i * step for i in range(n + 1))


def sample(points: Sequence[tuple[float, float]], times: Sequence[float], max_age: float) -> Values:
    """Step-align (ts, value) points: each grid time takes the newest point at or before it, if it is no
    older than `max_age` (Prometheus's lookback, in small)."""
    ts = [p[0] for p in points]
    out: list[float | None] = []
    for t in times:
        i = bisect.bisect_right(ts, t + 1e-6) - 1
        out.append(points[i][1] if i >= 0 and t - ts[i] <= max_age else None)
    return tuple(out)


NICE_STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


def choose_step(span: float, scrape_interval: float, points: int = 300) -> float:
    """span/points rounded up to a nice value, never finer than the scrape interval."""
    want = max(span / points, scrape_interval)
    for s in NICE_STEPS:
        if s >= want - 1e-9:
            return float(s)
    return float(want)
