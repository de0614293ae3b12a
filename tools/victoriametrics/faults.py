"""Faults on the VictoriaMetrics fleet, each during a TPOT incident (issue #35 item 4): does the page still come,
and what gap does the fault leave in the series?

- `vm_restart`: VictoriaMetrics is stopped (SIGTERM) or killed (SIGKILL, a crash) a few seconds into the incident
  and started again `down` seconds later. The vmagents queue what they scrape (-remoteWrite.tmpDataPath) and send
  it once it is back; vmalert's evaluations in between fail, so its recordings have a hole.
- `vmagent_takeover`: one vmagent is killed; the other is restarted as the only member of the cluster
  (`-promscrape.cluster.membersCount=1`), as a StatefulSet scaled down would be, and scrapes its share too.
- `sidecar_restart`: the sidecar shard that owns the deployment is restarted; the page comes from the rules,
  which read SGLang's own series, so it does not depend on the sidecar; the shard's series pause, and its windows
  start from empty.

A gap is measured afterwards from the stored samples (`/api/v1/export`): the longest stretch between two samples of
the series minus the scrape interval, so 0 means nothing was lost. Each fault takes its own deployment; `quiet`
waits for it to be quiet again after its incident (the document's run), which the tests skip (they check pages per
deployment).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from monitor.scrape.shard import shard_of  # the sidecar's own assignment
from tools.victoriametrics.fleet import EVAL_SECONDS, SCRAPE_SECONDS, SHARDS, Fleet, wait_until

INCIDENT_FACTOR = 4
PAGE_TIMEOUT = 120.0


@dataclass
class FaultResult:
    fault: str
    deployment: str
    down_seconds: float  # how long the part was away (stopped to answering again)
    page_after: float | None  # seconds from the incident to the first TPOT page at the webhook
    gaps: dict[str, float]  # series -> seconds lost (longest gap between samples minus the interval)


def samples(fleet: Fleet, selector: str, start: float, end: float) -> list[tuple[dict[str, str], list[float]]]:
    """Every stored sample's timestamp (seconds) of the series matching `selector` on VictoriaMetrics."""
    params = urllib.parse.urlencode({"match[]": selector, "start": f"{start:.3f}", "end": f"{end:.3f}"})
    with urllib.request.urlopen(f"{fleet.urls['vm']}/api/v1/export?{params}", timeout=30) as resp:
        lines = resp.read().decode().splitlines()
    out = []
    for line in lines:
        row: dict[str, Any] = json.loads(line)
        out.append((row["metric"], sorted(t / 1000 for t in row["timestamps"])))
    return out


def gap(fleet: Fleet, selector: str, start: float, end: float, interval: float) -> float:
    """Seconds lost in the worst of the matching series over [start, end]: its longest stretch between samples (the
    window's edges count as samples) minus `interval`."""
    worst = 0.0
    for _, ts in samples(fleet, selector, start, end):
        points = [start, *[t for t in ts if start <= t <= end], end]
        worst = max(worst, max(b - a for a, b in zip(points, points[1:])) - interval)
    return round(max(0.0, worst), 1)


def _await_page(fleet: Fleet, deployment: str, since: float) -> float | None:
    try:
        got = wait_until(lambda: [p for p in fleet.pages(since, alertname="SLOErrorBudgetBurnFast",
                                                         deployment=deployment, sli="tpot")],
                         PAGE_TIMEOUT, what=f"TPOT page for {deployment}")
    except AssertionError:
        return None
    return round(got[0][0] - since, 1)


def settle(fleet: Fleet, deployment: str, timeout: float = 180.0) -> None:
    """After `clear()`: wait until no SLO page of the deployment fires on VictoriaMetrics and its short windows are
    back under the page thresholds, so the next fault starts from a quiet deployment."""
    def quiet() -> bool:
        firing = fleet.query("vm", f'ALERTS{{deployment="{deployment}",alertname=~"SLO.*",severity="page"}}')
        burn = fleet.query("vm", f'slo_monitor:burn_rate:ratio_rate5m{{deployment="{deployment}"}} > 6')
        return not firing and not burn
    wait_until(quiet, timeout, interval=1.0, what=f"{deployment} quiet after its incident")


def vm_restart(fleet: Fleet, deployment: str, down: float = 10.0, kill: bool = False, quiet: bool = True
               ) -> FaultResult:
    """`kill`: SIGKILL (a crash: VictoriaMetrics loses what it had not flushed from memory yet); else SIGTERM, a
    graceful restart."""
    t0 = fleet.incident(deployment, "tpot_regression", factor=INCIDENT_FACTOR)
    time.sleep(2 * EVAL_SECONDS)
    t_down, t_up = fleet.restart("vm", kill=kill, down_seconds=down)
    page = _await_page(fleet, deployment, t0)
    fleet.clear()
    time.sleep(10)  # the vmagents' queues drain into VictoriaMetrics
    end = time.time() - 4 * EVAL_SECONDS
    start = t_down - 10
    gaps = {
        "SGLang's series (vmagent's queue)": gap(fleet, f'up{{deployment="{deployment}"}}', start, end, SCRAPE_SECONDS),
        "vmalert's recordings": gap(fleet, f'slo_monitor:sli_total:rate5m{{deployment="{deployment}",sli="tpot"}}',
                                    start, end, EVAL_SECONDS),
    }
    if quiet:
        settle(fleet, deployment)
    how = "killed (SIGKILL)" if kill else "stopped (SIGTERM)"
    return FaultResult(f"VictoriaMetrics {how} and started again", deployment, round(t_up - t_down, 1), page, gaps)


def vmagent_takeover(fleet: Fleet, deployment: str, quiet: bool = True) -> FaultResult:
    """Kill vmagent 1, restart vmagent 0 as the cluster's only member. `deployment` should be one vmagent 1
    scraped (`scraped_by`)."""
    t0 = fleet.incident(deployment, "tpot_regression", factor=INCIDENT_FACTOR)
    time.sleep(2 * EVAL_SECONDS)
    fleet.procs["vmagent-1"].stop(kill=True)
    t_down = time.time()
    fleet.procs["vmagent-0"].stop()
    fleet.procs["vmagent-0"] = fleet.vmagent(0, members=1).start()
    fleet.procs["vmagent-0"].wait_ready()
    del fleet.procs["vmagent-1"]
    t_up = time.time()
    page = _await_page(fleet, deployment, t0)
    fleet.clear()
    time.sleep(10)
    end = time.time() - 4 * EVAL_SECONDS
    gaps = {"the dead vmagent's targets": gap(fleet, f'up{{deployment="{deployment}"}}', t_down - 10, end,
                                              SCRAPE_SECONDS)}
    if quiet:
        settle(fleet, deployment)
    return FaultResult("one vmagent killed, the other takes its share", deployment, round(t_up - t_down, 1), page,
                       gaps)


def sidecar_restart(fleet: Fleet, deployment: str, quiet: bool = True) -> FaultResult:
    shard = shard_of(deployment, SHARDS)
    t0 = fleet.incident(deployment, "tpot_regression", factor=INCIDENT_FACTOR)
    time.sleep(2 * EVAL_SECONDS)
    t_down, t_up = fleet.restart(f"sidecar-{shard}", kill=True)
    page = _await_page(fleet, deployment, t0)
    fleet.clear()
    time.sleep(10)
    end = time.time() - 4 * EVAL_SECONDS
    gaps = {"the shard's series": gap(fleet, f'slo_monitor_sli_burn_rate{{deployment="{deployment}",window="5m",'
                                             f'sli="tpot"}}', t_down - 10, end, SCRAPE_SECONDS)}
    if quiet:
        settle(fleet, deployment)
    return FaultResult(f"sidecar shard {shard}/{SHARDS} killed and restarted", deployment, round(t_up - t_down, 1), page,
                       gaps)


def scraped_by(fleet: Fleet, member: int) -> list[str]:
    """The deployments whose servers the vmagent cluster member scrapes (its /api/v1/targets)."""
    with urllib.request.urlopen(f"{fleet.urls[f'vmagent-{member}']}/api/v1/targets", timeout=10) as resp:
        data = json.loads(resp.read())["data"]["activeTargets"]
    return sorted({t["labels"].get("deployment") for t in data if t["labels"].get("role") != "sidecar"} - {None})
