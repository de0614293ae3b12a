"""The generated rules, dashboards and paging on VictoriaMetrics, fed by a sharded fleet (issue #35).

One fleet (tools/victoriametrics/fleet.py) for the module, its tests in file order: 30 emulated deployments, 3
sidecar shards, 2 vmagents sharing the scrape, VictoriaMetrics single node, vmalert -> Alertmanager 0.35, and
Prometheus 3 evaluating the same rules on the same remote-written samples. All built by `make go-tools`: a build
that is missing or a process that does not start fails the test.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tools.victoriametrics import faults
from tools.victoriametrics.fleet import (
    EVAL_SECONDS,
    GO_BIN,
    SCRAPE_SECONDS,
    SHARDS,
    TIME_SCALE,
    Fleet,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.alone]  # `make test` runs it after the rest, on its own
ROOT = Path(__file__).resolve().parents[2]
N = 30
INCIDENT = "mixed-004"  # the deployment the TPOT incident is injected into
SERVER_ROLES = ("server", "prefill", "decode")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Fleet:
    tmp = tmp_path_factory.mktemp("vmfleet")
    try:
        f = Fleet(tmp, N).start()
    except RuntimeError as err:
        pytest.fail(f"the VictoriaMetrics fleet did not start: {err}")
    try:
        yield f
    finally:
        f.close()
        f.keep_logs(ROOT / "var" / "vmfleet-logs")


def _tpot_pages(fleet: Fleet, since: float, deployment: str | None = None, status: str = "firing") -> list:
    return [(t, a) for t, a in fleet.pages(since, status=status)
            if a["labels"].get("sli") == "tpot" and a["labels"]["alertname"].startswith("SLO")
            and (deployment is None or a["labels"].get("deployment") == deployment)]


def _alert_key(alert: dict) -> tuple:
    return tuple(sorted(alert["labels"].items()))


def test_vmalert_accepts_every_generated_rule_file(tmp_path):
    """vmalert's own parser (-dryRun) reads every committed rule file; a planted error is refused, so the check
    can fail."""
    vmalert = GO_BIN / "vmalert"
    assert vmalert.exists(), f"{vmalert} is missing (make go-tools)"
    files = sorted((ROOT / "alerts" / "rules").glob("*.rules.yml"))
    assert len(files) > 5
    res = subprocess.run([str(vmalert), "-dryRun", f"-rule={ROOT / 'alerts' / 'rules'}/*.rules.yml"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"found {len(files)} files" in res.stdout + res.stderr
    bad = tmp_path / "bad.rules.yml"
    bad.write_text(files[0].read_text().replace("sum by (deployment) (rate(", "sum by (deployment) (rate((", 1))
    res = subprocess.run([str(vmalert), "-dryRun", f"-rule={bad}"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0


def test_every_target_is_scraped_once_and_the_fleet_stays_quiet(fleet):
    cfg = fleet.config
    servers = sum(1 for d in cfg.deployments for t in d.targets if t.role in SERVER_ROLES)
    assert len(cfg.deployments) == N and servers >= 45
    for engine in ("vm", "prom"):
        wait_until(lambda e=engine: len(fleet.query(e, 'up{role=~"server|prefill|decode|sidecar"} == 1'))
                   == servers + SHARDS, 90, what=f"every target up in {engine}")
        # One series per target, and one sample per scrape interval in it: two vmagents scraping the same target
        # write into the same series (they add no label of their own), so double scraping shows as twice the
        # samples.
        dup = fleet.query(engine, 'count by (instance) (up) > 1')
        assert not dup, (engine, dup)
        window = 10 * SCRAPE_SECONDS
        most = fleet.query(engine, f'max(count_over_time(up{{role=~"server|prefill|decode"}}[{window}s]))')
        assert float(most[0]["value"][1]) <= 1.3 * window / SCRAPE_SECONDS, (engine, most)
    wait_until(lambda: len(fleet.query("vm", 'slo_monitor:sli_total:rate5m{sli="tpot"} > 0')) == N, 120,
               what="TPOT SLI recorded by vmalert for every deployment")
    # Each deployment is exported by exactly one sidecar shard.
    shards = 'count by (deployment) (count by (deployment, instance) (slo_monitor_sli_good_ratio{sli="tpot"}))'
    # Every deployment's series present first (a shard's first export can trail vmalert's first SLI record by a
    # scrape on a loaded machine); then no deployment from two shards.
    wait_until(lambda: len(fleet.query("vm", shards)) == N, 60, what="every deployment exported by a shard")
    per = fleet.query("vm", shards)
    assert len(per) == N and all(r["value"][1] == "1" for r in per), per
    t0 = time.time()
    time.sleep(10)
    assert not fleet.query("vm", 'ALERTS{alertstate="firing",severity="page"}')
    assert not fleet.pages(t0 - 30)


def test_every_dashboard_query_returns_each_deployment_once(fleet):
    from monitor.generate.dashboards.common import panel_queries

    seen: set[str] = set()
    dups, errors, total = [], [], 0
    for path in sorted((fleet.gen / "dashboards").glob("*.json")):
        for q in panel_queries(json.loads(path.read_text())):
            expr = (q.replace("$__rate_interval", "10s").replace("$__interval", "5s").replace("$__range", "1m")
                    .replace('"$deployment"', '".*"').replace("$deployment", ".*"))
            expr = re.sub(r"\$\{?[A-Za-z_]\w*\}?", ".*", expr)
            total += 1
            try:
                result = fleet.query("vm", expr)
            except OSError as err:
                errors.append((path.name, expr, str(err)))
                continue
            keys: dict[tuple, int] = {}
            for r in result:
                labels = r["metric"]
                if "deployment" not in labels:
                    continue
                seen.add(labels["deployment"])
                # Without the scraping instance: the same deployment's series from two shards or two vmagents.
                key = tuple(sorted((k, v) for k, v in labels.items() if k not in ("instance", "__name__")))
                keys[key] = keys.get(key, 0) + 1
            dups += [(path.name, expr, k) for k, n in keys.items() if n > 1]
    assert total > 100 and not errors, errors[:5]
    assert not dups, dups[:5]
    assert seen >= {d.name for d in fleet.config.deployments}


def test_a_tpot_incident_pages_once_with_no_duplicate_from_shards_or_vmagents(fleet):
    t0 = fleet.incident(INCIDENT, "tpot_regression", factor=4)
    try:
        got = wait_until(lambda: [p for p in _tpot_pages(fleet, t0, INCIDENT)
                                  if p[1]["labels"]["severity"] == "page"], 120, what="TPOT page")
        t_page = got[0][0]
        time.sleep(15)  # Alertmanager's group interval at this scale is well under this: any duplicate is in
        firing = _tpot_pages(fleet, t0, INCIDENT)
    finally:
        fleet.clear()
    pages = [a for _, a in firing if a["labels"]["severity"] == "page"]
    distinct = {_alert_key(a) for a in pages}
    # One alert per page pair that fired (1h/5m, 6h/30m), whatever the number of notifications repeating it.
    assert 1 <= len(distinct) <= 2, distinct
    for key in distinct:
        labels = dict(key)
        assert labels["deployment"] == INCIDENT and labels["sli"] == "tpot"
        assert not {"instance", "shard", "vmagent"} & labels.keys(), labels
    # No other deployment paged on TPOT.
    assert not [a for _, a in _tpot_pages(fleet, t0) if a["labels"]["deployment"] != INCIDENT]
    assert t_page - t0 < 3600 / TIME_SCALE  # well within the 1h window's compressed length


def test_a_graceful_victoriametrics_restart_during_an_incident_still_pages_and_loses_no_scrape(fleet):
    t0 = time.time()
    res = faults.vm_restart(fleet, "mixed-006", down=10.0, kill=False, quiet=False)
    assert res.page_after is not None, res
    # The vmagents queue what they scrape while VictoriaMetrics is away and send it when it is back; a graceful
    # stop flushes what it held in memory. vmalert cannot evaluate while it is away: its recordings have a hole.
    assert res.gaps["SGLang's series (vmagent's queue)"] <= 2 * SCRAPE_SECONDS, res
    assert res.gaps["vmalert's recordings"] <= res.down_seconds + 6 * EVAL_SECONDS, res
    assert not _other_pages(fleet, t0, {"mixed-006", INCIDENT})


def test_a_vmagent_dying_and_a_sidecar_shard_restarting_during_incidents_still_page(fleet):
    t0 = time.time()
    moved = next(d for d in faults.scraped_by(fleet, 1) if d.startswith("mixed") and d not in (INCIDENT, "mixed-006"))
    took = faults.vmagent_takeover(fleet, moved, quiet=False)
    assert took.page_after is not None, took
    assert took.gaps["the dead vmagent's targets"] <= took.down_seconds + 2 * SCRAPE_SECONDS, took
    # Every target is scraped again, once, by the remaining vmagent.
    wait_until(lambda: len(fleet.query("vm", 'up{role=~"server|prefill|decode|sidecar"} == 1')) ==
               sum(1 for d in fleet.config.deployments for t in d.targets) + SHARDS, 60, what="every target up")
    owned = next(d.name for d in fleet.config.deployments
                 if d.name.startswith("mixed") and d.name not in (INCIDENT, "mixed-006", moved))
    side = faults.sidecar_restart(fleet, owned, quiet=False)
    assert side.page_after is not None, side  # the page comes from the rules, not from the sidecar
    assert side.gaps["the shard's series"] <= side.down_seconds + 3 * SCRAPE_SECONDS, side
    assert not _other_pages(fleet, t0, {moved, owned, "mixed-006", INCIDENT})


def _other_pages(fleet: Fleet, since: float, expected: set[str]) -> list:
    """Pages of deployments the test did not touch, less the target-down pages that the stored `up` justifies: at
    time scale 30 the rule's `for: 2m` is 4 s, two scrapes that an emulator of 30 deployments answered late on a
    loaded 2-core machine. Such a page is true (the scrape failed and VictoriaMetrics has the 0), not a fault of
    the fleet; any other page, or a target-down page with no failed scrape stored, is returned."""
    out = []
    for _, a in fleet.pages(since):
        labels = a["labels"]
        if labels.get("deployment") in expected:
            continue
        if labels.get("alertname") == "SGLangTargetDown" and labels.get("instance"):
            span = int(time.time() - since) + 30
            if fleet.query("vm", f'min_over_time(up{{instance="{labels["instance"]}"}}[{span}s]) == 0'):
                continue
        out.append(labels)
    return out


def test_the_measured_document_is_newer_than_the_code_it_measures():
    """docs/victoriametrics.md names the commit it was measured at; a later commit changing the fleet, the
    comparison or the generated rules makes it stale (rerun `make victoriametrics`)."""
    from bench.provenance import changes_since
    from tools.victoriametrics.report import DOC, MEASURES, STAMP

    found = STAMP.search(DOC.read_text())
    assert found, f"{DOC} has no 'Measured at commit ...' line: run make victoriametrics"
    commit, _, paths = found.groups()
    assert not commit.endswith("-dirty"), f"{DOC} was measured on uncommitted code: commit, then rerun it"
    assert tuple(p.strip() for p in paths.split(",")) == MEASURES
    later = changes_since(commit, MEASURES)
    assert not later, f"{DOC} was measured at {commit}; later commits changed what it measures: {later[:3]}"
