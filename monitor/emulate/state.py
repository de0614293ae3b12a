"""Counters and histograms of one emulated process, kept the way prometheus_client keeps them.

A fresh `MetricStore` is what a restarted SGLang server has: its multiprocess directory is new, so
every counter starts from zero and a labelled child exists only once something touched it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

LabelKey = tuple[tuple[str, str], ...]


def label_key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


@dataclass
class Histogram:
    edges: tuple[float, ...]  # finite upper bounds, ascending; +Inf is implicit
    counts: list[float] = field(default_factory=list)  # per bucket, not cumulative; last is +Inf
    sum: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.edges) + 1)

    def observe(self, value: float, weight: float = 1.0, sum_add: float | None = None) -> None:
        """Add `weight` to the bucket of `value` and `sum_add` (default value*weight) to the sum.

        SGLang's token-weighted ITL uses both: the bucket of interval/n gets n, the sum gets interval."""
        self.counts[bisect.bisect_left(self.edges, value)] += weight
        self.sum += value * weight if sum_add is None else sum_add

    @property
    def count(self) -> float:
        return sum(self.counts)

    def cumulative(self) -> list[float]:
        out, acc = [], 0.0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out


@dataclass
class MetricStore:
    """Counters and histograms by (family, label set); families use SGLang's names without `_total`."""

    counters: dict[tuple[str, LabelKey], float] = field(default_factory=dict)
    histograms: dict[tuple[str, LabelKey], Histogram] = field(default_factory=dict)

    def inc(self, name: str, labels: dict[str, str], amount: float = 1.0) -> None:
        key = (name, label_key(labels))
        self.counters[key] = self.counters.get(key, 0.0) + amount

    def touch(self, name: str, labels: dict[str, str]) -> None:
        """Create a child at zero, as `Counter.labels(...)` does."""
        self.counters.setdefault((name, label_key(labels)), 0.0)

    def histogram(self, name: str, labels: dict[str, str], edges: tuple[float, ...]) -> Histogram:
        key = (name, label_key(labels))
        hist = self.histograms.get(key)
        if hist is None:
            hist = self.histograms[key] = Histogram(tuple(edges))
        return hist

    def observe(self, name: str, labels: dict[str, str], edges: tuple[float, ...], value: float,
                weight: float = 1.0, sum_add: float | None = None) -> None:
        self.histogram(name, labels, edges).observe(value, weight, sum_add)

    def counter_value(self, name: str, **labels: str) -> float:
        """Sum over every child whose labels include `labels` (for tests and the control state)."""
        want = set(labels.items())
        return sum(v for (n, key), v in self.counters.items() if n == name and want <= set(key))

    def histogram_totals(self, name: str, **labels: str) -> tuple[float, float]:
        """(sum, count) over every child whose labels include `labels`."""
        want = set(labels.items())
        s = c = 0.0
        for (n, key), h in self.histograms.items():
            if n == name and want <= set(key):
                s += h.sum
                c += h.count
        return s, c
