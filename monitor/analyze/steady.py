"""Whether a breach is the deployment's steady state rather than an incident.

With nothing in demand or capacity moved, an SLO can still breach: the target does not hold at this load.
Three shapes, read from the baseline the verdict compares with:

- as before: every breached SLI's bad share over the range is no worse than in the baseline (within
  STEADY_WORSE), or under STEADY_MARGIN times its error budget (noise at the objective's edge);
- already: every breached SLI's baseline already spent more than its budget and the SLI's mean level held
  (the objective did not hold before the range either; a baseline of a minute or two holds few of a busy
  server's bursts, so how much worse the range's tail is says little while its level holds);
- no headroom: requests were already queueing through the baseline (median queue >= STEADY_QUEUE): the
  server runs at its capacity, where arrivals' own bursts build queues that breach TTFT and TPOT with no
  change at all (a queue near saturation is a random walk);
- bursts: the requests in the system grew (queued or running, the KV and chip work they hold, a PD request's waits
  for a slot, clients leaving the wait: diagnose.WAITING) while no demand or capacity signal left its noise band,
  not even by part of its threshold (diagnose.traces): a busy server's queue swings with the arrivals' own bursts
  (Poisson arrivals at 60 % utilisation queue now and then), and a breach made only of such a swing is not an
  incident;
- quiet: nothing at all left its noise band, no demand or capacity signal (not even by part of its
  threshold), no consequence, no event: nothing the deployment exposes changed, so what breached is the
  spread of its own latencies at this load.

Each is a capacity-planning finding (add capacity, or revisit the target), not something to page on. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from monitor.analyze.sli import SliTrack

STEADY_WORSE: Final = 1.5  # bad share over the range / in the baseline: up to this is "as before"
STEADY_MARGIN: Final = 2.0  # bad share under this many error budgets is the objective's edge, not an incident
STEADY_QUEUE: Final = 0.5  # median requests waiting in the baseline: the server was already at its capacity


@dataclass(frozen=True)
class BadShare:
    """One SLI's share of bad events in the baseline and over the range analysed."""

    sli: str
    label: str
    baseline: float | None  # None: no events in the baseline
    incident: float | None
    budget: float  # 1 - objective

    @property
    def as_before(self) -> bool:
        if self.incident is None:
            return True
        if self.incident <= STEADY_MARGIN * self.budget:
            return True
        return self.baseline is not None and self.incident <= STEADY_WORSE * self.baseline

    def describe(self) -> str:
        def pct(v: float | None) -> str:
            return "n/a" if v is None else f"{v * 100:.1f} %"
        return f"{self.label} bad {pct(self.incident)} (baseline {pct(self.baseline)}, budget {pct(self.budget)})"


def _share(tr: SliTrack, idx: Sequence[int] | range) -> float | None:
    n = bad = 0.0
    for i in idx:
        e, b = tr.events_step[i], tr.bad_step[i]
        if e and b is not None:
            n += e
            bad += e * b
    return bad / n if n > 0 else None


def bad_shares(tracks: dict[str, SliTrack], slis: Sequence[str], base_idx: Sequence[int],
               focus: range) -> list[BadShare]:
    return [BadShare(s, tracks[s].spec.sli.upper(), _share(tracks[s], base_idx), _share(tracks[s], focus),
                     1.0 - tracks[s].spec.objective) for s in slis if s in tracks]


@dataclass(frozen=True)
class Steady:
    """Why a breach with nothing moved is the steady state (`kind`), and what says so."""

    kind: str  # "as_before" | "no_headroom" | "already" | "bursts" | "quiet"
    shares: tuple[BadShare, ...]
    queued: float | None  # median requests waiting in the baseline

    def describe(self) -> str:
        shares = "; ".join(s.describe() for s in self.shares)
        if self.kind == "no_headroom":
            return (f"requests were already queueing through the baseline (median {self.queued:.1f} waiting): the "
                    f"deployment runs at its capacity, where the arrivals' own bursts build queues that breach "
                    f"({shares})")
        if self.kind == "already":
            return f"the objective did not hold in the baseline either, and the SLIs' mean level held ({shares})"
        if self.kind == "quiet":
            return (f"nothing in demand, capacity or their consequences left the baseline's noise: the breach is "
                    f"the spread of this load's own latencies ({shares})")
        if self.kind == "bursts":
            return (f"only the requests in the system grew (queued or running, the KV and chip work they hold), "
                    f"while demand and capacity stayed within their noise: the arrivals' own bursts queue a busy "
                    f"server now and then ({shares})")
        return f"the SLIs were as bad before, or only at the objective's edge ({shares})"


def steady(shares: list[BadShare], queued_baseline: float | None, bursts: bool = False,
           quiet: bool = False, level_held: bool = False) -> Steady | None:
    """The steady-state reading of a breach with nothing moved, or None (then it is unexplained). `bursts`:
    requests in the system grew and nothing else left its noise band; `quiet`: nothing at all did; `level_held`: the
    breached SLIs' mean level stayed within its noise (only their tail breached)."""
    if not shares:
        return None
    if all(s.as_before for s in shares):
        return Steady("as_before", tuple(shares), queued_baseline)
    if queued_baseline is not None and queued_baseline >= STEADY_QUEUE:
        return Steady("no_headroom", tuple(shares), queued_baseline)
    if level_held and all(s.baseline is not None and s.baseline > s.budget for s in shares):
        return Steady("already", tuple(shares), queued_baseline)
    if bursts:
        return Steady("bursts", tuple(shares), queued_baseline)
    if quiet:
        return Steady("quiet", tuple(shares), queued_baseline)
    return None
