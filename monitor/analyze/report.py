"""The analysis of one deployment over [t1, t2]: pure, from a Dataset to a Report (rendered elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.analyze.baseline import IN_RANGE, Baseline, choose_baseline
from monitor.analyze.causes import FAULT_SIGNALS
from monitor.analyze.correlate import Candidate, rank
from monitor.analyze.diagnose import RULE_OF_THREE, Verdict, verdict
from monitor.analyze.giveup import GIVE_UP_MIN
from monitor.analyze.model import Dataset
from monitor.analyze.percentiles import Comparison, compare
from monitor.analyze.signals import Signal, derive
from monitor.analyze.sli import SliTrack, track
from monitor.analyze.timeline import Episode, budget_spent, episodes
from monitor.analyze.timeparse import iso


@dataclass
class SliReport:
    track: SliTrack
    episodes: list[Episode]
    budget_spent: float  # share of the period's budget spent in (t1, t2]
    comparison: Comparison
    ranking: list[Candidate]
    correlated_with: str  # "bad ratio" | "mean latency"

    @property
    def sli(self) -> str:
        return self.track.spec.sli

    @property
    def main_episode(self) -> Episode | None:
        """The episode that spent the most budget: the one the ranking is timed against."""
        return max(self.episodes, key=lambda e: e.budget_spent) if self.episodes else None

    @property
    def first_mover(self) -> Candidate | None:
        """The top co-moving series that moved before the breach: a correlate, not the verdict."""
        return next((c for c in self.ranking if c.moved_first), None)


@dataclass
class Report:
    deployment: str
    source: str
    t1: float
    t2: float
    baseline_start: float
    window: float
    step: float
    slis: dict[str, SliReport]
    dataset: Dataset
    baseline: Baseline
    verdict: Verdict
    notes: list[str] = field(default_factory=list)

    @property
    def primary(self) -> SliReport | None:
        """The SLI that hurt most: most budget spent in the range, breached ones first."""
        if not self.slis:
            return None
        return max(self.slis.values(), key=lambda s: (bool(s.episodes), s.budget_spent))

    @property
    def ordered(self) -> list[SliReport]:
        """SLIs as reports list them: the one that hurt most first."""
        primary = self.primary
        return sorted(self.slis.values(), key=lambda s: s is not primary)

    def to_dict(self) -> dict[str, Any]:
        def cand(c: Candidate) -> dict[str, Any]:
            return {"key": c.key, "label": c.label, "group": c.group, "score": c.score, "spearman": c.spearman,
                    "pearson": c.pearson, "lag_seconds": c.lag_seconds, "r_at_lag": c.r_at_lag, "z": c.z,
                    "ratio": c.ratio, "baseline_mean": c.baseline_mean, "incident_mean": c.incident_mean,
                    "changed_at": c.changed_at, "lead_seconds": c.lead_seconds, "moved_first": c.moved_first}

        def stats(s: Any) -> dict[str, Any] | None:
            return None if s is None else {k: getattr(s, k) for k in ("start", "end", "events", "p50", "p90",
                                                                     "p99", "mean")}

        slis = {}
        for name, s in self.slis.items():
            slis[name] = {
                "target_seconds": s.track.spec.target, "objective": s.track.spec.objective,
                "budget_spent": s.budget_spent, "correlated_with": s.correlated_with,
                "episodes": [{"start": e.start, "end": e.end, "onset": e.onset, "started_before": e.started_before,
                              "start_iso": iso(e.start), "end_iso": iso(e.end) if e.end is not None else None,
                              "peak_burn": e.peak_burn, "peak_burn_at": e.peak_burn_at,
                              "budget_spent": e.budget_spent, "bad_events": e.bad_events, "events": e.events}
                             for e in s.episodes],
                "percentiles": {"incident": stats(s.comparison.incident), "baseline": stats(s.comparison.baseline),
                                "recipe_mean": s.comparison.recipe_mean},
                "first_mover": s.first_mover.key if s.first_mover else None,
                "ranking": [cand(c) for c in s.ranking],
            }
        primary = self.primary
        return {"deployment": self.deployment, "source": self.source, "from": self.t1, "to": self.t2,
                "from_iso": iso(self.t1), "to_iso": iso(self.t2), "baseline_from": self.baseline_start,
                "baseline": self.baseline.to_dict(), "verdict": self.verdict.to_dict(),
                "window_seconds": self.window, "step_seconds": self.step,
                "primary_sli": primary.sli if primary else None, "slis": slis, "notes": self.notes}


def _idx(times: tuple[float, ...], lo: float, hi: float) -> range:
    """Indices of grid points in (lo, hi]."""
    a = next((i for i, t in enumerate(times) if t > lo + 1e-6), len(times))
    b = next((i for i, t in enumerate(times) if t > hi + 1e-6), len(times))
    return range(a, max(a, b))


def first_fault(ds: Dataset, signals: dict[str, Signal], t1: float, t2: float, window: float) -> float | None:
    """The time of the first fault event (causes.FAULT_SIGNALS) in (t1, t2], or of the first pile of abandoned
    requests (`first_pile`), or None."""
    faults = [t for key in FAULT_SIGNALS if key in signals
              for t, v in zip(ds.times, signals[key].values) if t1 < t <= t2 and v is not None and v > 0]
    pile = first_pile(ds.times, signals["gave_up"].values, t1, t2, window) if "gave_up" in signals else None
    return min([*faults, *([pile] if pile is not None else [])], default=None)


def first_pile(times: Sequence[float], abandoned: Sequence[float | None], t1: float, t2: float,
               window: float) -> float | None:
    """Where abandoned requests first piled up in (t1, t2]: GIVE_UP_MIN or more within one window, more than three
    times what the range before that window held at its own rate (a rate no lower than the rule of three over its
    span: clients cancel now and then). A client timeout breaches no latency SLI, so no breach ends the healthy
    start before it; this does. The time of the window's first step over three times that rate, or None."""
    idx = [i for i, t in enumerate(times) if t1 < t <= t2]
    if len(idx) < 2:
        return None
    step = times[idx[1]] - times[idx[0]]
    counts = [(times[i], (abandoned[i] or 0.0) * step) for i in idx]
    for k, (t, _) in enumerate(counts):
        inside = [(u, c) for u, c in counts[:k + 1] if u > t - window]
        before = sum(c for u, c in counts[:k + 1] if u <= t - window)
        span = max(t - window - t1, step)
        expected = max(before, RULE_OF_THREE) / span * window
        piled = sum(c for _, c in inside)
        if piled >= GIVE_UP_MIN and piled > 3 * expected:
            return next(u for u, c in inside if c > 3 * expected * step / window)
    return None


def analyze(ds: Dataset, t1: float, t2: float, window: float, slis: list[str] | None = None,
            baseline: tuple[float, float] | None = None) -> Report:
    """`baseline`: (start, end) to compare with instead of the span before --from (`--baseline T1..T2`)."""
    if t2 <= t1:
        raise ValueError("--to must be after --from")
    notes = list(ds.notes)
    tracks: dict[str, SliTrack] = {}
    eps: dict[str, list[Episode]] = {}
    for name, spec in ds.slis.items():
        if slis and name not in slis:
            continue
        if not any(h is not None for h in ds.hists.get(name, ())):
            notes.append(f"{name}: no histogram data in the range")
            continue
        tracks[name] = track(ds, spec, window)
        eps[name] = episodes(tracks[name], t1, t2, ds.period_seconds)
    # Where the range's healthy start ends, should no baseline before it be usable: a breach's onset, and the first
    # fault event (a server down that breached nothing yet is no healthy state to compare with).
    breaches = [(e.onset, e.end, e is max(es, key=lambda x: x.budget_spent)) for es in eps.values() for e in es]
    signals = derive(ds, tracks)  # read here for the faults and by the verdict
    base = choose_baseline(ds, t1, t2, window, breaches, baseline, first_fault(ds, signals, t1, t2, window))
    notes += base.notes
    base_idx, inc_idx = base.indices, _idx(ds.times, t1, t2)
    corr_idx = range(min(base_idx, default=inc_idx.start), inc_idx.stop)
    out: dict[str, SliReport] = {}
    for name, tr in tracks.items():
        spec = tr.spec
        y, what = tr.bad_step, "bad ratio"
        if spec.latency and len({round(v, 9) for v in y[corr_idx.start:corr_idx.stop] if v is not None}) < 2:
            y, what = tr.mean_step, "mean latency"
        main = max(eps[name], key=lambda e: e.budget_spent) if eps[name] else None
        onset = main.onset if main else None
        focus = inc_idx
        if main:
            focus = _idx(ds.times, main.onset - tr.window, main.end if main.end is not None else t2)
        ranking = rank(list(ds.series.values()), y, ds.times, base_idx, focus, corr_idx, onset, ds.step)
        out[name] = SliReport(tr, eps[name], budget_spent(tr, t1, t2, ds.period_seconds),
                              compare(ds, name, t1, t2, base.start, base.end), ranking, what)
    breached = [n for n, s in out.items() if s.episodes]
    # The verdict reads the whole range: a cause can precede a breach by more than a window (a server down
    # before the stragglers it left breach), and a failure can hurt no latency SLI at all.
    v = verdict(ds, tracks, signals, base_idx, range(_idx(ds.times, base.end, t2).start, inc_idx.stop), breached,
                base.trusted, window, independent=base.source != IN_RANGE)
    return Report(ds.deployment, ds.source, t1, t2, base.start, window, ds.step, out, ds, base, v, notes)
