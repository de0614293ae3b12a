"""Latency percentiles over the incident against the preceding baseline and the recipe's baseline."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.analyze.model import Dataset
from monitor.slo.histogram import Hist, delta, mean, quantile


@dataclass(frozen=True)
class Stats:
    start: float
    end: float
    events: float
    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None


@dataclass(frozen=True)
class Comparison:
    sli: str
    incident: Stats | None
    baseline: Stats | None  # the chosen baseline (monitor.analyze.baseline)
    recipe_mean: float | None  # deployment.baseline (what the recipe measured), when given

    def ratio(self, field: str) -> float | None:
        a = getattr(self.incident, field, None) if self.incident else None
        b = getattr(self.baseline, field, None) if self.baseline else None
        return a / b if a is not None and b else None

    @property
    def recipe_ratio(self) -> float | None:
        m = self.incident.mean if self.incident else None
        return m / self.recipe_mean if m is not None and self.recipe_mean else None


def stats_between(ds: Dataset, sli: str, start: float, end: float) -> Stats | None:
    """Histogram of the events that finished in (start, end], summarised."""
    hi = ds.hist_at(sli, end)
    if hi is None:
        return None
    lo = ds.hist_at(sli, start)
    first = next((t for t, h in zip(ds.times, ds.hists.get(sli, ())) if h is not None), start)
    d: Hist = delta(hi, lo)
    if d.total <= 0:
        return None
    spec = ds.slis.get(sli)
    if spec is not None and not spec.latency:  # goodput: a count of events, no distribution
        return Stats(max(start, first), end, d.total, None, None, None, None)
    return Stats(max(start, first), end, d.total, quantile(0.5, d), quantile(0.9, d), quantile(0.99, d), mean(d))


def compare(ds: Dataset, sli: str, t1: float, t2: float, b1: float | None = None, b2: float | None = None
            ) -> Comparison:
    """The incident (t1, t2] against the baseline (b1, b2] (default: as long, right before t1)."""
    b1 = t1 - (t2 - t1) if b1 is None else b1
    b2 = t1 if b2 is None else b2
    return Comparison(sli, stats_between(ds, sli, t1, t2), stats_between(ds, sli, b1, b2), ds.recipe_means.get(sli))
