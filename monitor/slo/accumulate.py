"""Counter-reset handling: raw cumulative values in, monotone ("adjusted") values out.

SGLang starts a fresh prometheus multiprocess directory on every restart, so every counter and
histogram drops to zero (its exposition carries no `_created` or process start time to say so). A drop
to less than half the previous value (`is_restart`: toward 0, as a restart's first scrape holds only
the seconds since) is read as a reset, as Prometheus's `increase()` reads any decrease: the value
before it is kept as an offset, so window deltas never go negative and nothing is lost. So is any drop
in a scrape where another series of the target restarted or fell too (the engine's `restart_instead`:
one process restarts all its counters). A lone smaller decrease is no restart (a counter that loses 1 now and then, a merge that lost a worker for a
scrape): read as a reset it would add the whole previous value to the windows each time, so it is
held instead (the adjusted value does not move until the raw one passes its previous value again),
counted in `decreases` and said by the engine. A series that stops being scraped keeps its last
adjusted value (it contributes no delta until it returns).

Where a series starts counting: one seen on a target's first scrape held history from before the
sidecar looked, so it starts at 0 there (`born=False`); one that appears on a target already scraped
was created since (SGLang creates a counter at its first event), so it counts from 0, its whole value
being new (`born=True`).

Series come and go (a worker leaves a gateway's merge, a label value is never seen again). One absent
longer than `conventions.SERIES_EXPIRY_SECONDS` is retired: its last adjusted value moves into its
family's retired total, so every merged value, and every window, stays exactly as it was, while the
book holds one number per family instead of one accumulator per series ever seen.
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from dataclasses import dataclass, field

from monitor.slo.histogram import Hist, merge, project


def is_restart(new: float, old: float) -> bool:
    """A counter that fell to less than half its previous value restarted (see the module's doc)."""
    return new < old / 2


def hist_restarted(new: Hist, old: Hist) -> bool:
    if new.edges != old.edges:
        return True  # relaunched with other buckets: a new process, treat as reset
    return is_restart(new.count, old.count) or is_restart(new.total, old.total)


def hist_decreased(new: Hist, old: Hist) -> bool:
    """Any part of the histogram went down (a restart, or a decrease that is none)."""
    if new.count < old.count or new.total < old.total or new.sum < old.sum:
        return True
    if new.edges != old.edges:
        return True
    return any(map(operator.lt, new.cumulative, old.cumulative))


def add(a: Hist, b: Hist) -> Hist:
    """a + b on a's edges: a is a series' raw value, b its offset. An offset on other edges (recorded by an
    older sidecar across a relaunch with other buckets) is projected onto a's, never cut down to the edges
    both share: that would lose the new edges for as long as the series lives."""
    if a.edges != b.edges:
        b = project(b, a.edges)
    cum = tuple(map(operator.add, a.cumulative, b.cumulative))
    return Hist(a.edges, cum, a.sum + b.sum, a.count + b.count)


def negate(h: Hist) -> Hist:
    return Hist(h.edges, tuple(map(operator.neg, h.cumulative)), -h.sum, -h.count)


@dataclass(slots=True)
class HistAccumulator:
    last_raw: Hist | None = None
    offset: Hist | None = None
    resets: int = 0
    seen: float = 0.0  # when the series was last scraped
    decreases: int = 0  # decreases that were no restart (held), since start
    decreased: float = 0.0  # how much the count fell at the latest update when that was such a decrease, else 0
    held_from: Hist | None = None  # the raw value before the latest update, when that update held a decrease

    def update(self, raw: Hist, *, born: bool = True) -> bool:
        """Feed one scraped value; returns True when a reset was detected."""
        if self.last_raw is None and not born:
            self.offset = negate(raw)
        self.decreased, self.held_from = 0.0, None
        old = self.last_raw
        reset = old is not None and hist_decreased(raw, old) and hist_restarted(raw, old)
        if reset:
            prev = self.adjusted()
            # A relaunch with other buckets starts a new accumulation on the new edges; what the old process
            # counted is carried as a constant projected onto them, so it cancels out of every later window.
            self.offset = prev if prev is None or prev.edges == raw.edges else project(prev, raw.edges)
            self.resets += 1
        elif old is not None and hist_decreased(raw, old):
            # Held: each part's adjusted value stays at its previous one where the raw one fell (the max of two
            # cumulative histograms is one), and grows again once the raw value passes where it was.
            fell = Hist(raw.edges, tuple(max(a - b, 0.0) for a, b in zip(old.cumulative, raw.cumulative)),
                        max(old.sum - raw.sum, 0.0), max(old.count - raw.count, 0.0))
            self.offset = fell if self.offset is None else add(fell, self.offset)
            self.decreases += 1
            self.decreased = max(old.count - raw.count, old.total - raw.total, 1e-12)
            self.held_from = old
        self.last_raw = raw
        return reset

    def restart_instead(self) -> None:
        """The latest update held a decrease, but another series of the same scrape restarted (one process, one
        restart): read this one as a restart too, as `update` would have."""
        old, raw = self.held_from, self.last_raw
        if old is None or raw is None or self.offset is None:
            return
        # Held, the offset gained old - raw where raw fell; restarted, it gains old: so add min(old, raw).
        kept = Hist(raw.edges, tuple(map(min, old.cumulative, raw.cumulative)), min(old.sum, raw.sum),
                    min(old.count, raw.count))
        self.offset = add(kept, self.offset)
        self.decreases -= 1
        self.resets += 1
        self.decreased, self.held_from = 0.0, None

    def adjusted(self) -> Hist | None:
        if self.last_raw is None:
            return None
        if self.offset is None:
            return self.last_raw
        return add(self.last_raw, self.offset)


@dataclass(slots=True)
class ScalarAccumulator:
    last_raw: float | None = None
    offset: float = 0.0
    resets: int = 0
    seen: float = 0.0
    decreases: int = 0  # decreases that were no restart (held), since start
    decreased: float = 0.0  # how much it fell at the latest update when that was such a decrease, else 0

    def update(self, raw: float, *, born: bool = True) -> bool:
        if self.last_raw is None and not born:
            self.offset = -raw
        self.decreased = 0.0
        reset = self.last_raw is not None and raw < self.last_raw and is_restart(raw, self.last_raw)
        if reset:
            self.offset += self.last_raw  # type: ignore[operator]
            self.resets += 1
        elif self.last_raw is not None and raw < self.last_raw:
            self.decreased = self.last_raw - raw
            self.offset += self.decreased  # held at its previous adjusted value
            self.decreases += 1
        self.last_raw = raw
        return reset

    def adjusted(self) -> float | None:
        return None if self.last_raw is None else self.last_raw + self.offset

    def restart_instead(self) -> None:
        """As HistAccumulator.restart_instead: held, the offset gained old - raw; restarted, it gains old."""
        if not self.decreased or self.last_raw is None:
            return
        self.offset += self.last_raw
        self.decreases -= 1
        self.resets += 1
        self.decreased = 0.0

    def restart(self, raw: float) -> None:
        """A reset seen on the series this one is read with (a histogram's _count beside its _sum)."""
        if self.last_raw is not None:
            self.offset += self.last_raw
            self.resets += 1
        self.last_raw = raw


def update_pair(total: ScalarAccumulator, count: ScalarAccumulator, raw_total: float, raw_count: float, *,
                born: bool) -> bool:
    """A histogram read as its _sum and _count only: one reset for both when either dropped (a relaunched
    process), so the mean never pairs one process's sum with another's count. Returns True on a reset."""
    if count.last_raw is not None and total.last_raw is not None and (
            is_restart(raw_count, count.last_raw) or is_restart(raw_total, total.last_raw)):
        total.restart(raw_total)
        count.restart(raw_count)
        return True
    a = total.update(raw_total, born=born)
    b = count.update(raw_count, born=born)
    return a or b


@dataclass
class SeriesBook:
    """Accumulators keyed by (target, family, labels), and per family what retired series added up to."""

    hists: dict[tuple, HistAccumulator] = field(default_factory=dict)
    scalars: dict[tuple, ScalarAccumulator] = field(default_factory=dict)
    retired_hists: dict[str, Hist] = field(default_factory=dict)
    retired_scalars: dict[str, float] = field(default_factory=dict)

    def expire(self, before: float, also: Collection[tuple] = ()) -> list[tuple]:
        """Retire every series last scraped before `before`, and those keyed in `also` (see the module doc);
        returns their keys."""
        gone = []
        for key, acc in list(self.hists.items()):
            if acc.seen < before or key in also:
                del self.hists[key]
                adjusted = acc.adjusted()
                if adjusted is not None:
                    old = self.retired_hists.get(key[1])
                    # On the newer series' edges: retired totals on another layout must not narrow them.
                    self.retired_hists[key[1]] = adjusted if old is None else merge(
                        [project(old, adjusted.edges), adjusted])
                gone.append(key)
        for key, sacc in list(self.scalars.items()):
            if sacc.seen < before or key in also:
                del self.scalars[key]
                value = sacc.adjusted()
                if value is not None:
                    self.retired_scalars[key[1]] = self.retired_scalars.get(key[1], 0.0) + value
                gone.append(key)
        return gone

    def hist(self, key: tuple) -> HistAccumulator:
        acc = self.hists.get(key)
        if acc is None:
            acc = self.hists[key] = HistAccumulator()
        return acc

    def scalar(self, key: tuple) -> ScalarAccumulator:
        acc = self.scalars.get(key)
        if acc is None:
            acc = self.scalars[key] = ScalarAccumulator()
        return acc
