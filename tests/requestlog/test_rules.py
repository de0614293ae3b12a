from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from monitor.requestlog.rules import goodput_burn_rate, goodput_rule_groups
from tests.requestlog.conftest import config_for

PROMTOOL = Path("/usr/bin/promtool")


def test_no_rules_without_request_log_target(log_dir: Path):
    dep = config_for(log_dir).deployments[0].model_copy(update={"targets": []})
    assert goodput_rule_groups(dep) == []


def test_goodput_rules_check_and_page_in_promtool(log_dir: Path, tmp_path: Path):
    if not PROMTOOL.exists():
        pytest.skip("promtool not installed")
    dep = config_for(log_dir).deployments[0]
    groups = goodput_rule_groups(dep)
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert {(a["labels"]["long_window"], a["labels"]["short_window"]) for a in alerts} == {("1h", "5m"), ("6h", "30m")}
    rules = tmp_path / "goodput.rules.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    res = subprocess.run([str(PROMTOOL), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    # The sidecar reports 80% goodput in every window: burn (0.2 / 0.01 = 20) > 14.4 and > 6: both pages.
    series = [{"series": f'slo_monitor_goodput_ratio{{deployment="dep",window="{w}",instance="s",job="slo-monitor"}}',
               "values": "0.8x20"} for w in ("5m", "30m", "1h", "6h")]
    series += [{"series": f'slo_monitor_request_log_requests{{deployment="dep",window="{w}",instance="s",job="slo-monitor"}}',
                "values": "100x20"} for w in ("5m", "30m", "1h", "6h")]
    page = {"severity": "page", "deployment": "dep", "sli": "goodput"}
    test = {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": f"round({goodput_burn_rate('1h')} * 1000) / 1000", "eval_time": "5m",
                              "exp_samples": [{"labels": '{deployment="dep",sli="goodput"}', "value": 20}]}],
        "alert_rule_test": [{"eval_time": "5m", "alertname": alerts[0]["alert"], "exp_alerts": [
            {"exp_labels": {**page, "long_window": lw, "short_window": sw,
                            "burn_rate_threshold": a["labels"]["burn_rate_threshold"]},
             "exp_annotations": {**a["annotations"], "summary": a["annotations"]["summary"].replace(
                 '{{ $value | printf "%.1f" }}', "20.0"), "description": a["annotations"]["description"].replace(
                 '{{ $value | printf "%.2f" }}', "20.00")}}
            for a in alerts for lw, sw in [(a["labels"]["long_window"], a["labels"]["short_window"])]]}],
    }]}
    tf = tmp_path / "goodput.test.yml"
    tf.write_text(yaml.safe_dump(test, sort_keys=False))
    res = subprocess.run([str(PROMTOOL), "test", "rules", tf.name], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
