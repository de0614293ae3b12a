"""The leading TPOT signal: how fast the requests running now decode, before any of them finishes.

TPOT moves only when a request finishes; SGLang's ITL histogram moves per output chunk while requests
run (docs/leading-tpot.md has what 0.5.23 observes), and its schedulers report their decode throughput
and running requests at every log interval. Two estimates of the current seconds per output token:

- itl: the token-weighted mean inter-token latency over the last `window` seconds, from the sidecar's
  own snapshots (the change of the ITL histogram's sum over the change of its count);
- gen_throughput: running requests / generated tokens per second, summed over the ranks that answer
  requests (`load`, already one value per DP rank and never summed over TP ranks).

The signal is the larger of the two (whichever sees a slowdown first); None when neither has data.
Pure: snapshots and gauges in, numbers out (`conventions.TPOT_LEADING_*` names the exported series).

Over the target is an instant reading; the warning is the same hold as SLOTPOTLeadingWarning's `for:
TPOT_LEADING_FOR`: over the target at every evaluation (the engine's, once per scrape cycle) since
`over_since`, for at least the hold. One evaluation not over (or without data) starts it again, as
Prometheus resets a pending alert. A single slow refresh (a request joining a small batch, the first
decode log after an idle spell) is over the target for a scrape or two and never warns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from monitor.conventions.names import TPOT_LEADING_FOR
from monitor.conventions.slis import REQUEST_ROLES
from monitor.conventions.units import parse_duration
from monitor.slo.windows import SnapshotStore

HOLD_SECONDS = float(parse_duration(TPOT_LEADING_FOR))  # SLOTPOTLeadingWarning's `for`


class LeadingTPOT(NamedTuple):
    seconds: float | None  # the larger estimate
    itl_seconds: float | None
    throughput_seconds: float | None
    target_seconds: float
    over_since: float | None = None  # over the target at every evaluation since then; None: not over now
    warning: bool = False  # over for the hold: what SLOTPOTLeadingWarning fires on (`with_hold`)

    @property
    def over_target(self) -> bool:
        """Over the target at this instant (one refresh): not yet a warning."""
        return self.seconds is not None and self.seconds > self.target_seconds


def itl_mean(store: SnapshotStore, now: float, window: float) -> float | None:
    """Mean ITL over the tokens observed in the last `window` seconds (None without tokens in it)."""
    latest = store.latest()
    start = store.window_start(now, window)
    if latest is None or start is None or latest.ts <= start.ts:
        return None
    new, old = latest.hists.get("itl"), start.hists.get("itl")
    if new is None:
        return None
    tokens = new.count - (old.count if old is not None else 0.0)
    spent = new.sum - (old.sum if old is not None else 0.0)
    if not tokens > 0 or not math.isfinite(spent) or spent < 0:
        return None
    return spent / tokens


def throughput_tpot(load: Mapping[str, Mapping[str, float]]) -> float | None:
    """Seconds per token of a running request now: running requests / tokens generated per second."""
    running = sum(load.get(role, {}).get("num_running_reqs", 0.0) for role in REQUEST_ROLES)
    generated = sum(load.get(role, {}).get("gen_throughput", 0.0) for role in REQUEST_ROLES)
    if not (running > 0 and generated > 0):
        return None
    return running / generated


def leading_tpot(store: SnapshotStore, load: Mapping[str, Mapping[str, float]], now: float, window: float,
                 target: float) -> LeadingTPOT:
    itl = itl_mean(store, now, window)
    thr = throughput_tpot(load)
    known = [v for v in (itl, thr) if v is not None]
    return LeadingTPOT(max(known) if known else None, itl, thr, target)


def held_since(since: float | None, over: bool, now: float) -> float | None:
    """One evaluation of the hold: when the signal went over the target and stayed over (`since`, kept), `now`
    at its first evaluation over it, None when it is not over (a pending alert is dropped)."""
    if not over:
        return None
    return since if since is not None and since <= now else now


def with_hold(lead: LeadingTPOT, since: float | None, now: float, hold: float) -> LeadingTPOT:
    """`lead` read at `now` with the engine's tracked `since` (`held_since` at each evaluation): the warning once
    it has been over the target for `hold` seconds. Over now without a tracked start: over since now."""
    if not lead.over_target:
        return lead._replace(over_since=None, warning=False)
    start = since if since is not None and since <= now else now
    return lead._replace(over_since=start, warning=now - start >= hold)


def carried_since(since: float | None, old_target: float | None, new_target: float | None) -> float | None:
    """What a config reload keeps of the hold: the start while the TPOT target it was measured against is the
    same (Prometheus keeps a pending alert across a reload of the same rule), else nothing."""
    return since if old_target is not None and old_target == new_target else None
