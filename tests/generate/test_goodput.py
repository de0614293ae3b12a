"""The optional goodput SLO: recorded and alerted like the histogram SLIs, from the sidecar's counters."""

from __future__ import annotations

import pytest
import yaml

from monitor.config import ConfigError, parse_config
from monitor.conventions import names
from monitor.conventions.policy import RULE_WINDOWS
from monitor.generate.options import Options
from monitor.generate.rules import slo_groups
from monitor.interop.sloth import render_sloth
from monitor.slo_plan import GoodputPlan, plan_slis


def _rules(small_files: dict[str, str], deployment: str) -> list[dict]:
    doc = yaml.safe_load(small_files[f"alerts/{names.rules_file(deployment)}"])
    return [r for g in doc["groups"] for r in g["rules"]]


def test_goodput_is_recorded_for_every_window_from_the_two_request_log_counters(small_files):
    rules = [r for r in _rules(small_files, "kimi-pd") if r.get("labels", {}).get("sli") == "goodput"]
    by_record = {r["record"]: r["expr"] for r in rules if "record" in r}
    for w in RULE_WINDOWS:
        assert by_record[names.sli_good(w)] == (
            f'sum by (deployment) (rate(slo_monitor_goodput_requests_total{{deployment="kimi-pd"}}[{w}]))')
        assert by_record[names.sli_total(w)] == (
            f'sum by (deployment) (rate(slo_monitor_request_log_finished_requests_total{{deployment="kimi-pd"}}[{w}]))')
        assert names.sli_error(w) in by_record and names.burn_rate(w) in by_record
    assert names.BUDGET_REMAINING in by_record
    assert names.TARGET not in by_record  # no single latency target
    objective = next(r for r in rules if r.get("record") == names.OBJECTIVE)
    assert objective["expr"] == "vector(0.95)"  # goodput_objective, not the SLIs' 0.99


def test_goodput_pages_and_tickets_on_the_workbook_pairs(small_files):
    alerts = [r for r in _rules(small_files, "kimi-pd") if "alert" in r and r["labels"].get("sli") == "goodput"]
    pairs = {(a["labels"]["severity"], a["labels"]["long_window"], a["labels"]["short_window"]) for a in alerts}
    assert pairs == {("page", "1h", "5m"), ("page", "6h", "30m"), ("ticket", "1d", "2h"), ("ticket", "3d", "6h")}
    page = next(a for a in alerts if a["labels"]["long_window"] == "1h")
    assert "TTFT <= 2s and TPOT <= 0.04s" in page["annotations"]["description"]
    assert "slo_monitor_requests_missed" in page["annotations"]["runbook"]
    assert "target_seconds" not in page["annotations"]


def test_a_request_log_alone_records_no_goodput_slo():
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
        {"role": "server", "url": "http://127.0.0.1:30000/metrics"},
        {"role": "request-log", "path": "/var/log/sglang"}]}]})
    dep = cfg.deployments[0]
    plans = plan_slis(dep)
    assert not any(isinstance(p, GoodputPlan) for p in plans)
    text = yaml.safe_dump([g.data() for g in slo_groups(dep, plans, Options())])
    assert "goodput" not in text


def test_goodput_objective_without_a_request_log_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"deployments\[0\] \(d\).*goodput_objective needs a target with role: "
                                          r"request-log"):
        parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "goodput_objective": 0.9}]})


def test_sloth_spec_has_the_goodput_slo_with_the_same_queries(small_config):
    spec = yaml.safe_load(render_sloth(small_config)["sloth/kimi-pd.yaml"])
    slo = next(s for s in spec["slos"] if s["name"] == "goodput")
    assert slo["objective"] == 95.0
    assert "slo_monitor_goodput_requests_total" in slo["sli"]["events"]["error_query"]
    assert "slo_monitor_request_log_finished_requests_total" in slo["sli"]["events"]["total_query"]
