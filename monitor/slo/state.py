"""SLO state of one deployment: pure functions from window history to numbers.

Semantics follow Sloth/Pyrra and the SRE workbook:
  SLI (good ratio)   = good events / all events in the window, good = latency <= target
  burn rate          = (1 - SLI) / (1 - objective)        (1.0 spends the budget exactly over the period)
  budget remaining   = 1 - bad / (total * (1 - objective)) over the period (or the history we have)
An empty window has no SLI (None: nothing is exported, nothing pages) and a burn rate of 0. A window
in which nothing was measured (no snapshot before the latest one in it: before the second scrape, or
when scraping stopped for longer than the window) has no numbers at all: NaN, shown as "no data" and
exported as nothing, never as an idle window's 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from monitor.config import Deployment
from monitor.conventions import BUCKET_FLAGS, DEFAULT_BUCKETS, QUANTILES, SIDECAR_WINDOWS
from monitor.slo.histogram import Hist, delta, good_ratio, is_edge, mean, quantile, suggest_edges
from monitor.slo.windows import SnapshotStore


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


class DeploymentState(NamedTuple):
    deployment: str
    ts: float
    slis: dict[str, SliState]
    load: dict[str, dict[str, float]]  # role -> metric -> value ("all" = deployment total)
    rates: dict[str, float]  # counter name -> per-second rate over 5m


def burn_rate(ratio: float | None, objective: float) -> float:
    if ratio is None:
        return 0.0
    return max(0.0, 1.0 - ratio) / (1.0 - objective)


def fix_flag_for(sli: str, target: float, edges: tuple[float, ...]) -> str | None:
    finite = [e for e in edges if e != float("inf")] or list(DEFAULT_BUCKETS[sli])
    if is_edge(finite, target):
        return None
    values = " ".join(f"{e:g}" for e in suggest_edges(finite, target))
    return f"{BUCKET_FLAGS[sli]} {values}"


def window_state(name: str, seconds: float, current: Hist, start: Hist | None, covered: float,
                 target: float, objective: float) -> WindowState:
    d = delta(current, start)
    gr = good_ratio(d, target)
    quants = {q: quantile(q, d) for q in QUANTILES}
    return WindowState(
        window=name,
        seconds=seconds,
        covered_seconds=covered,
        events=d.total,
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
            edges = (*(dep.buckets.get(sli) or DEFAULT_BUCKETS[sli]), math.inf)
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
            wins[wname] = window_state(wname, secs, current, start, min(covered, secs), target,
                                       dep.objective)
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
