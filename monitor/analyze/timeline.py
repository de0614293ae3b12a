"""Breach timeline: when an SLI left its objective over the short window and when it came back.

An episode starts at the first grid point whose windowed good ratio is under the objective and
ends at the first point back at or above it; gaps of at most `MERGE_GAP_STEPS` points are merged
(a window that flickers across the line is one incident, not several). `onset` is where the
per-step bad ratio first exceeded the allowance (1 - objective) without interruption before the
start: when the bad events began rather than when they outweighed the window.

Error budget spent = integral of the per-step burn rate over the episode / the SLO period,
i.e. the share of a whole period's budget that the episode consumed at the traffic it had.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.analyze.sli import SliTrack

MERGE_GAP_STEPS = 2


@dataclass(frozen=True)
class Episode:
    start: float
    end: float | None  # None: still out of its objective at the end of the range
    onset: float
    started_before: bool  # already breaching at the start of the range
    peak_burn: float
    peak_burn_at: float
    budget_spent: float  # share of the SLO period's error budget
    bad_events: float
    events: float

    @property
    def duration(self) -> float | None:
        return None if self.end is None else self.end - self.start


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """[i, j) index runs of True, gaps of <= MERGE_GAP_STEPS False merged."""
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(flags):
        if not flags[i]:
            i += 1
            continue
        j = i
        while j < len(flags) and flags[j]:
            j += 1
        if runs and i - runs[-1][1] <= MERGE_GAP_STEPS:
            runs[-1] = (runs[-1][0], j)
        else:
            runs.append((i, j))
        i = j
    return runs


def episodes(tr: SliTrack, t1: float, t2: float, period_seconds: float) -> list[Episode]:
    idx = [i for i, t in enumerate(tr.times) if t1 - 1e-6 <= t <= t2 + 1e-6]
    if not idx:
        return []
    step = tr.times[1] - tr.times[0] if len(tr.times) > 1 else 1.0
    allowance = 1.0 - tr.spec.objective
    flags = [tr.good_ratio[i] is not None and tr.good_ratio[i] < tr.spec.objective for i in idx]  # type: ignore[operator]
    out = []
    for a, b in _runs(flags):
        ia, ib = idx[a], idx[b - 1]
        onset = ia
        while onset - 1 >= 0 and (tr.bad_step[onset - 1] or 0.0) > allowance and ia - onset < tr.window / step:
            onset -= 1
        burns = [(tr.burn[i] or 0.0, tr.times[i]) for i in range(ia, ib + 1)]
        peak, peak_at = max(burns)
        bad = sum((tr.bad_step[i] or 0.0) * (tr.events_step[i] or 0.0) for i in range(ia, ib + 1))
        events = sum(tr.events_step[i] or 0.0 for i in range(ia, ib + 1))
        spent = sum((tr.bad_step[i] or 0.0) / allowance * step for i in range(ia, ib + 1)) / period_seconds
        end = tr.times[idx[b]] if b < len(idx) else None
        out.append(Episode(tr.times[ia], end, tr.times[onset], a == 0, peak, peak_at, spent, bad, events))
    return out


def budget_spent(tr: SliTrack, t1: float, t2: float, period_seconds: float) -> float:
    """Share of the period's error budget that (t1, t2] consumed."""
    step = tr.times[1] - tr.times[0] if len(tr.times) > 1 else 1.0
    allowance = 1.0 - tr.spec.objective
    return sum((b or 0.0) / allowance * step for t, b in zip(tr.times, tr.bad_step) if t1 < t <= t2) / period_seconds
