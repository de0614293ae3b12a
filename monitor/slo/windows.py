"""Per-deployment history of merged, reset-adjusted snapshots, thinned as it ages.

Window deltas need the snapshot at `now - window`. A 5 m window needs scrape resolution; a 6 h
window is fine with 1-minute resolution (<0.3 % error). So: every snapshot for the last
`fine_horizon` seconds, then one per `coarse_step` up to the longest sidecar window, then only
(good, total) pairs per SLI every `long_step` up to the SLO period, for the error budget. That
bounds memory per deployment whatever the scrape interval.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

from monitor.slo.histogram import Hist, compact


class Snapshot(NamedTuple):
    ts: float
    hists: dict[str, Hist]  # sli -> merged adjusted cumulative histogram
    counters: dict[str, float]  # counter name -> merged adjusted cumulative value


class BudgetPoint(NamedTuple):
    ts: float
    good: dict[str, tuple[float, float]]  # sli -> (cumulative good, cumulative total)


class LayoutChange(NamedTuple):
    """An SLI's merged histogram changed bucket edges at `ts` (a server relaunched with other `--bucket-*`
    flags); `before` is its value in the snapshot just before, on the old edges. A window reaching back over
    the change is counted in parts, each on its own edges (`slo.state.window_state`)."""

    ts: float
    sli: str
    before: Hist


class SnapshotStore:
    def __init__(
        self,
        *,
        fine_horizon: float = 420.0,
        coarse_step: float = 60.0,
        coarse_horizon: float = 6 * 3600 + 120.0,
        long_step: float = 300.0,
        long_horizon: float = 30 * 86400.0,
    ) -> None:
        self.fine_horizon = fine_horizon
        self.coarse_step = coarse_step
        self.coarse_horizon = coarse_horizon
        self.long_step = long_step
        self.long_horizon = long_horizon
        self.fine: deque[Snapshot] = deque()
        self.coarse: deque[Snapshot] = deque()
        self.long: deque[BudgetPoint] = deque()
        self.layout_changes: deque[LayoutChange] = deque()

    def __len__(self) -> int:
        return len(self.fine) + len(self.coarse)

    def append(self, snap: Snapshot, budget: BudgetPoint | None = None) -> float:
        """Add the newest snapshot; returns how far the history was moved (0.0, or negative when `snap`
        is dated before the latest one: the wall clock stepped back, see `_rebase`)."""
        shift = 0.0
        latest = self.latest()
        if latest is not None and snap.ts < latest.ts:
            shift = snap.ts - latest.ts - self._last_gap()
            self._rebase(shift)
        snap = Snapshot(snap.ts, {k: compact(h) for k, h in snap.hists.items()}, snap.counters)
        latest = self.latest()
        if latest is not None:
            for sli, h in snap.hists.items():
                before = latest.hists.get(sli)
                if before is not None and before.edges != h.edges:
                    self.layout_changes.append(LayoutChange(snap.ts, sli, before))
        while self.layout_changes and self.layout_changes[0].ts < snap.ts - self.coarse_horizon:
            self.layout_changes.popleft()
        self.fine.append(snap)
        while self.fine and self.fine[0].ts < snap.ts - self.fine_horizon:
            old = self.fine.popleft()
            if not self.coarse or old.ts - self.coarse[-1].ts >= self.coarse_step:
                self.coarse.append(old)
        # Keep one coarse snapshot older than the horizon: the start of the longest window.
        while len(self.coarse) > 1 and self.coarse[1].ts <= snap.ts - self.coarse_horizon:
            self.coarse.popleft()
        if budget is not None and (not self.long or budget.ts - self.long[-1].ts >= self.long_step):
            self.long.append(budget)
        while len(self.long) > 1 and self.long[1].ts <= snap.ts - self.long_horizon:
            self.long.popleft()
        return shift

    def step_forward(self, step: float) -> float:
        """The wall clock stepped forward by `step` seconds more than the time that passed (NTP step, a clock
        set by hand), as the caller measured on a clock that does not step: the history moves forward with it,
        as `_rebase` moves it back, so windows keep their length and their events instead of stretching over
        a gap in which nothing was scraped. Returns the shift (0.0 with no history)."""
        if self.latest() is None or not step > 0:
            return 0.0
        self._rebase(step)
        return step

    def _last_gap(self) -> float:
        """Time between the two newest snapshots (the scrape interval), 0 with fewer than two."""
        newest = [*list(self.coarse)[-2:], *list(self.fine)[-2:]][-2:]
        return newest[1].ts - newest[0].ts if len(newest) == 2 else 0.0

    def _rebase(self, shift: float) -> None:
        """Move the whole history by `shift` seconds. A snapshot dated before the latest one means the
        wall clock stepped back (NTP step, VM resume): what was recorded happened before it all the
        same, so the history moves back with the clock, its newest snapshot one interval before the
        new one, and every window keeps its length and its events."""
        self.fine = deque(s._replace(ts=s.ts + shift) for s in self.fine)
        self.coarse = deque(s._replace(ts=s.ts + shift) for s in self.coarse)
        self.long = deque(p._replace(ts=p.ts + shift) for p in self.long)
        self.layout_changes = deque(c._replace(ts=c.ts + shift) for c in self.layout_changes)

    def layout_changes_between(self, sli: str, after: float, until: float) -> list[Hist]:
        """The SLI's values just before each change of its bucket edges in (after, until], oldest first."""
        return [c.before for c in self.layout_changes if c.sli == sli and after < c.ts <= until]

    def snapshots(self) -> Iterator[Snapshot]:
        yield from self.coarse
        yield from self.fine

    def latest(self) -> Snapshot | None:
        return self.fine[-1] if self.fine else (self.coarse[-1] if self.coarse else None)

    def oldest(self) -> Snapshot | None:
        return self.coarse[0] if self.coarse else (self.fine[0] if self.fine else None)

    def at_or_before(self, ts: float) -> Snapshot | None:
        """The newest snapshot taken at or before `ts` (None if history starts later)."""
        for part in (self.fine, self.coarse):
            if part and part[0].ts <= ts:
                keys = [s.ts for s in part]
                return part[bisect.bisect_right(keys, ts) - 1]
        return None

    def window_start(self, now: float, seconds: float) -> Snapshot | None:
        """Start snapshot of a window; the oldest one when history is shorter than the window."""
        return self.at_or_before(now - seconds) or self.oldest()

    def budget_start(self, now: float, seconds: float) -> BudgetPoint | None:
        if not self.long:
            return None
        for p in self.long:
            if p.ts >= now - seconds:
                return p
        return self.long[-1]
