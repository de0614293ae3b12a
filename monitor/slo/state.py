"""SLO state of one deployment: pure functions from window history to numbers.

Semantics follow Sloth/Pyrra and the SRE workbook:
  SLI (good ratio)   = good events / all events in the window, good = latency <= target
  burn rate          = (1 - SLI) / (1 - objective)        (1.0 spends the budget exactly over the period)
  budget remaining   = 1 - bad / (total * (1 - objective)) over the period (or the history we have)
An empty window has no SLI (None: nothing is exported, nothing pages) and a burn rate of 0. A window
in which nothing was measured (no snapshot before the latest one in it: before the second scrape, or
when scraping stopped for longer than the window) has no numbers at all: NaN, shown as "no data" and
exported as nothing, never as an idle window's 0.
The availability SLI is the same arithmetic over two counters instead of a histogram: good = requests -
failed requests in the window (never below 0), as the generated rules compute it.
Requests whose client left before the end (`client_gone`) are counted per window the same way, from the
gateway's 499s and SGLang's aborts; they are no SLI (conventions, CLIENT_CLOSED_SERIES).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from monitor.config import Deployment
from monitor.conventions.names import (
    AVAILABILITY_SLI,
    GATEWAY_ANSWERED,
    GATEWAY_CLIENT_CLOSED,
    GATEWAY_FAILED,
    GATEWAY_REQUESTS,
)
from monitor.conventions.policy import QUANTILES, SIDECAR_WINDOWS
from monitor.conventions.slis import SLI_BY_KEY
from monitor.slo.histogram import GoodRatio, Hist, delta, good_ratio, is_edge, mean, quantile, suggest_edges
from monitor.slo.leading import LeadingTPOT
from monitor.slo.windows import SnapshotStore

ABORTED, REQUESTS = "aborted_requests_total", "requests_total"  # conventions.COUNTERS keys


class WindowState(NamedTuple):
    window: str
    seconds: float  # nominal length
    covered_seconds: float  # history actually spanned (< seconds while warming up)
    events: float
    good_ratio: float | None
    good_ratio_lower: float | None
    good_ratio_upper: float | None
    burn_rate: float
    quantiles: dict[float, float | None]
    mean: float | None


class SliState(NamedTuple):
    sli: str
    target_seconds: float
    objective: float
    exact: bool  # target is an edge of the scraped buckets
    edges: tuple[float, ...]
    fix_flag: str | None  # the SGLang flag that would make the target exact
    windows: dict[str, WindowState]
    budget_remaining: float | None
    budget_covered_seconds: float


class RatioWindow(NamedTuple):
    """One window of a counter-pair SLI (availability): events and failed events counted in it."""

    window: str
    seconds: float
    covered_seconds: float
    events: float
    failed: float
    good_ratio: float | None
    burn_rate: float


class AvailabilityState(NamedTuple):
    sli: str  # conventions.AVAILABILITY_SLI: the `sli` label of its series
    gateway: str
    objective: float
    windows: dict[str, RatioWindow]
    budget_remaining: float | None
    budget_covered_seconds: float


class ClientGoneWindow(NamedTuple):
    """One window of the requests whose client left before the end of its answer. None: not measured (no
    smg 1.13 listener scraped, no SGLang server answering requests); NaN: nothing measured in the window."""

    window: str
    seconds: float
    covered_seconds: float
    answered: float | None  # the gateway's answers on serving paths
    client_closed: float | None  # of those, status 499 client_closed_request
    closed_ratio: float | None  # client_closed / answered; None without answers
    aborted: float | None  # SGLang's aborted requests on the servers that answer requests


class DeploymentState(NamedTuple):
    deployment: str
    ts: float
    slis: dict[str, SliState]
    load: dict[str, dict[str, float]]  # role -> metric -> value ("all" = deployment total)
    rates: dict[str, float]  # counter name -> per-second rate over 5m
    leading_tpot: LeadingTPOT | None = None  # with a TPOT target: how fast running requests decode now
    availability: AvailabilityState | None = None
    client_gone: dict[str, ClientGoneWindow] | None = None  # None: neither source is scraped


def burn_rate(ratio: float | None, objective: float) -> float:
    if ratio is None:
        return 0.0
    return max(0.0, 1.0 - ratio) / (1.0 - objective)


def fix_flag_for(sli: str, target: float, edges: tuple[float, ...]) -> str | None:
    record = SLI_BY_KEY[sli]
    finite = [e for e in edges if e != float("inf")] or list(record.buckets)
    if is_edge(finite, target):
        return None
    if record.bucket_flag is None:  # SGLang 0.5.23 fixes these edges: only the target can move
        return f"no flag (SGLang fixes {record.family}'s edges: put the target on one of them)"
    values = " ".join(f"{e:g}" for e in suggest_edges(finite, target))
    return f"{record.bucket_flag} {values}"


def parted_good_ratio(parts: Sequence[Hist], target: float) -> GoodRatio | None:
    """The good ratio of a window counted in parts (one per bucket layout): good events add up, each part's
    read on its own edges, with its own bounds. One part: `good_ratio` itself."""
    if len(parts) == 1:
        return good_ratio(parts[0], target)
    ratios = [(good_ratio(p, target), p.total) for p in parts]
    total = sum(n for _, n in ratios)
    if not total > 0:
        return None
    known = [(gr, n) for gr, n in ratios if gr is not None]
    return GoodRatio(sum(gr.value * n for gr, n in known) / total, sum(gr.lower * n for gr, n in known) / total,
                     sum(gr.upper * n for gr, n in known) / total, all(gr.exact for gr, _ in known), total)


def window_state(name: str, seconds: float, current: Hist, start: Hist | None, covered: float,
                 target: float, objective: float, changes: Sequence[Hist] = ()) -> WindowState:
    """One window from the cumulative histograms at its ends. `changes`: the values just before each change of
    bucket edges inside the window (`SnapshotStore.layout_changes_between`): the window is then counted in
    parts, each exact on its own edges, so the part after a relaunch with a target edge is exact and only the
    part before it is interpolated (with bounds)."""
    d = delta(current, start)
    ends = [start, *changes, current]
    parts = [delta(b, a) for a, b in zip(ends, ends[1:])] if changes else [d]
    gr = parted_good_ratio(parts, target)
    quants = {q: quantile(q, d) for q in QUANTILES}
    return WindowState(
        window=name,
        seconds=seconds,
        covered_seconds=covered,
        events=gr.events if gr else d.total,
        good_ratio=gr.value if gr else None,
        good_ratio_lower=gr.lower if gr else None,
        good_ratio_upper=gr.upper if gr else None,
        # NaN counts (never scraped: refused) are unknown, not an empty window: no burn rate either.
        burn_rate=math.nan if math.isnan(d.total) else burn_rate(gr.value if gr else None, objective),
        quantiles=quants,
        mean=mean(d),
    )


def no_data_window(name: str, seconds: float) -> WindowState:
    return WindowState(window=name, seconds=seconds, covered_seconds=0.0, events=math.nan, good_ratio=None,
                       good_ratio_lower=None, good_ratio_upper=None, burn_rate=math.nan,
                       quantiles={q: None for q in QUANTILES}, mean=None)


def budget_remaining(good_now: tuple[float, float], good_then: tuple[float, float] | None,
                     objective: float) -> float | None:
    if good_then is None:
        good_then = (0.0, 0.0)
    good = good_now[0] - good_then[0]
    total = good_now[1] - good_then[1]
    if not total > 0:  # nothing, or NaN: no budget figure
        return None
    bad = max(total - good, 0.0)
    return 1.0 - bad / (total * (1.0 - objective))


def availability_good_total(counters: Mapping[str, float]) -> tuple[float, float] | None:
    """(good, total) requests so far from the sidecar's two gateway counters; None before the first request."""
    total = counters.get(GATEWAY_REQUESTS)
    if total is None:
        return None
    return max(total - counters.get(GATEWAY_FAILED, 0.0), 0.0), total


def ratio_window(name: str, seconds: float, covered: float, now: Mapping[str, float], start: Mapping[str, float],
                 objective: float) -> RatioWindow:
    """A window's events and failures from cumulative counters; one missing at the start was born since."""
    events = max(now.get(GATEWAY_REQUESTS, 0.0) - start.get(GATEWAY_REQUESTS, 0.0), 0.0)
    failed = max(now.get(GATEWAY_FAILED, 0.0) - start.get(GATEWAY_FAILED, 0.0), 0.0)
    ratio = max(events - failed, 0.0) / events if events > 0 else None
    return RatioWindow(name, seconds, covered, events, failed, ratio, burn_rate(ratio, objective))


def compute_availability(dep: Deployment, store: SnapshotStore, now: float,
                         windows: Mapping[str, int] = SIDECAR_WINDOWS) -> AvailabilityState | None:
    """The availability SLI over the sidecar windows and the SLO period, when the deployment has one (listed
    before the first scrape too, its windows without data)."""
    if dep.availability_objective is None:
        return None
    objective = dep.availability_objective
    latest, oldest = store.latest(), store.oldest()
    wins: dict[str, RatioWindow] = {}
    for wname, secs in windows.items():
        start = store.window_start(now, secs)
        if latest is None or start is None or start.ts >= latest.ts:  # nothing to take a difference from
            wins[wname] = RatioWindow(wname, secs, 0.0, math.nan, math.nan, None, math.nan)
            continue
        covered = now - start.ts
        if start is oldest and oldest is not None and oldest.ts > now - secs:
            covered = now - oldest.ts
        wins[wname] = ratio_window(wname, secs, min(covered, secs), latest.counters, start.counters, objective)
    bp = store.budget_start(now, dep.period_seconds)
    now_gt = availability_good_total(latest.counters) if latest is not None else None
    remaining = None if now_gt is None else budget_remaining(
        now_gt, bp.good.get(AVAILABILITY_SLI) if bp else None, objective)
    return AvailabilityState(AVAILABILITY_SLI, dep.gateway, objective, wins, remaining, (now - bp.ts) if bp else 0.0)


def client_gone_window(name: str, seconds: float, covered: float, now: Mapping[str, float],
                       start: Mapping[str, float]) -> ClientGoneWindow:
    """A window of client give-ups from cumulative counters; one missing at the start was born since. SGLang
    creates its aborted-requests series at the first abort: a server answering requests without one has 0."""
    def inc(key: str) -> float:
        return max(now.get(key, 0.0) - start.get(key, 0.0), 0.0)

    answered = inc(GATEWAY_ANSWERED) if GATEWAY_ANSWERED in now else None
    closed = inc(GATEWAY_CLIENT_CLOSED) if answered is not None else None
    ratio = closed / answered if answered and closed is not None else None
    aborted = inc(ABORTED) if ABORTED in now or REQUESTS in now else None
    return ClientGoneWindow(name, seconds, covered, answered, closed, ratio, aborted)


def compute_client_gone(store: SnapshotStore, now: float,
                        windows: Mapping[str, int] = SIDECAR_WINDOWS) -> dict[str, ClientGoneWindow] | None:
    """Client give-ups over the sidecar windows; None when no source of them is scraped (yet)."""
    latest = store.latest()
    if latest is None or not {GATEWAY_ANSWERED, ABORTED, REQUESTS} & latest.counters.keys():
        return None
    oldest = store.oldest()
    wins: dict[str, ClientGoneWindow] = {}
    for wname, secs in windows.items():
        start = store.window_start(now, secs)
        if start is None or start.ts >= latest.ts:  # nothing to take a difference from
            wins[wname] = ClientGoneWindow(wname, secs, 0.0, math.nan, math.nan, None, math.nan)
            continue
        covered = now - start.ts
        if start is oldest and oldest is not None and oldest.ts > now - secs:
            covered = now - oldest.ts
        wins[wname] = client_gone_window(wname, secs, min(covered, secs), latest.counters, start.counters)
    return wins


def good_total(h: Hist, target: float) -> tuple[float, float]:
    gr = good_ratio(h, target)
    return (gr.value * h.total, h.total) if gr else (0.0, 0.0)


def compute_sli_states(dep: Deployment, store: SnapshotStore, now: float,
                       windows: Mapping[str, int] = SIDECAR_WINDOWS) -> dict[str, SliState]:
    latest = store.latest()
    out: dict[str, SliState] = {}
    oldest = store.oldest()
    for sli in dep.slis:
        target = dep.target_seconds(sli)
        assert target is not None
        current = latest.hists.get(sli) if latest is not None else None
        if current is None:
            # No request has finished yet (SGLang exports a family only once observed): report
            # the SLI with empty windows rather than leave it out of the status.
            edges = (*(dep.buckets.get(sli) or SLI_BY_KEY[sli].buckets), math.inf)
            current = Hist(tuple(edges), (0.0,) * len(edges), 0.0, 0.0)
        edges = current.edges
        wins: dict[str, WindowState] = {}
        for wname, secs in windows.items():
            start_snap = store.window_start(now, secs)
            if latest is None or start_snap is None or start_snap.ts >= latest.ts:
                wins[wname] = no_data_window(wname, secs)  # nothing to take a difference from
                continue
            start = start_snap.hists.get(sli)
            covered = now - start_snap.ts if start_snap else 0.0
            if start_snap is oldest and oldest is not None and oldest.ts > now - secs:
                covered = now - oldest.ts
            changes = store.layout_changes_between(sli, start_snap.ts, latest.ts)
            wins[wname] = window_state(wname, secs, current, start, min(covered, secs), target,
                                       dep.objective, changes)
        bp = store.budget_start(now, dep.period_seconds)
        then = bp.good.get(sli) if bp else None
        now_gt = good_total(current, target)
        out[sli] = SliState(
            sli=sli,
            target_seconds=target,
            objective=dep.objective,
            exact=is_edge(edges, target),
            edges=edges,
            fix_flag=fix_flag_for(sli, target, edges),
            windows=wins,
            budget_remaining=budget_remaining(now_gt, then, dep.objective),
            budget_covered_seconds=(now - bp.ts) if bp else 0.0,
        )
    return out
