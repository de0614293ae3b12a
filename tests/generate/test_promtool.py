"""The generated files pass the real tools: promtool check/test (Prometheus 2.42 and 3.x) and amtool (Debian's
Alertmanager and 0.35)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from monitor.conventions import names
from tests.components import Build
from tests.generate.conftest import run_tool


@pytest.mark.parametrize("which", ["small_dir", "scaled_dir"])
def test_promtool_checks_config_rules_and_runs_the_generated_rule_tests(which, request, prometheus_build: Build):
    promtool = prometheus_build.tool
    alerts = request.getfixturevalue(which) / "alerts"
    rules = sorted(str(p) for p in (alerts / "rules").glob("*.rules.yml"))
    res = run_tool(promtool, "check", "rules", *rules)
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_tool(promtool, "check", "config", "prometheus.yml", cwd=alerts)
    assert res.returncode == 0, res.stdout + res.stderr
    tests = sorted(str(p.relative_to(alerts)) for p in (alerts / "tests").glob("*.test.yml"))
    assert tests
    if which == "scaled_dir":
        tests = ["tests/kimi-pd.test.yml"]  # same cases at 1/60 time; one file keeps the suite quick
    # One promtool per file, side by side: the files are independent and the simulation is CPU-bound.
    procs = [subprocess.Popen([promtool, "test", "rules", t], cwd=alerts, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for t in tests]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out


def test_generated_tests_cover_breach_healthy_and_idle_for_each_sli(small_files):
    import yaml

    doc = yaml.safe_load(small_files["alerts/tests/kimi-pd.test.yml"])
    names = [t["name"] for t in doc["tests"]]
    for sli in ("tpot", "ttft", "goodput"):
        for case in ("fast burn pages", "medium burn pages via 6h/30m only", "healthy stays quiet",
                     "no traffic stays quiet", "slow burn tickets, does not page"):
            assert f"kimi-pd {sli}: {case}" in names
    fast = next(t for t in doc["tests"] if t["name"] == "kimi-pd tpot: fast burn pages")
    assert len(fast["alert_rule_test"][0]["exp_alerts"]) == 2  # both page pairs
    quiet = next(t for t in doc["tests"] if t["name"] == "kimi-pd tpot: no traffic stays quiet")
    assert all(a["exp_alerts"] == [] for a in quiet["alert_rule_test"])


def test_the_self_rules_have_a_promtool_test_of_each_alert_firing_and_staying_quiet(small_files, small_dir,
                                                                                     prometheus_build: Build):
    import yaml

    doc = yaml.safe_load(small_files["alerts/tests/self.test.yml"])
    assert doc["rule_files"] == ["../rules/self.rules.yml"]
    tested = {t["alertname"] for case in doc["tests"] for t in case["alert_rule_test"]}
    assert tested == {names.ALERT_SIDECAR_DOWN, names.ALERT_LOOP_STUCK, names.ALERT_LOOP_RESTARTING,
                      names.ALERT_RECORDING_FAILING, names.ALERT_CONFIG_RELOAD_FAILED}
    for case in doc["tests"]:  # each case expects nothing first, then its alert
        checks = case["alert_rule_test"]
        assert checks[0]["exp_alerts"] == [] and checks[-1]["exp_alerts"], case["name"]
    stuck = next(c for c in doc["tests"] if c["alert_rule_test"][0]["alertname"] == names.ALERT_LOOP_STUCK)
    fired = {a["exp_labels"].get("deployment") for a in stuck["alert_rule_test"][-1]["exp_alerts"]}
    assert fired == {"stuck-deployment", None}  # a deployment's loop and the sidecar's own; the healthy one stays quiet
    res = run_tool(prometheus_build.tool, "test", "rules", "tests/self.test.yml", cwd=small_dir / "alerts")
    assert res.returncode == 0, res.stdout + res.stderr


def test_amtool_accepts_the_alertmanager_config(small_dir, alertmanager_build: Build):
    res = run_tool(alertmanager_build.tool, "check-config", str(small_dir / "alerts/alertmanager.yml"))
    assert res.returncode == 0, res.stdout + res.stderr


def test_alertmanager_routes_pages_and_inhibits_tickets(small_files):
    import yaml

    am = yaml.safe_load(small_files["alerts/alertmanager.yml"])
    assert am["route"]["group_by"] == ["deployment", "alertname"]
    assert am["route"]["routes"][0] == {"receiver": "page", "matchers": ['severity="page"'], "repeat_interval": "1h"}
    assert am["inhibit_rules"][0]["equal"] == ["deployment", "sli"]
    assert all(w["send_resolved"] for r in am["receivers"] for w in r["webhook_configs"])


def _generate_one(tmp_path: Path, promtool: str, **deployment) -> Path:
    """Generate the files of one deployment `p` (one server, TPOT 40 ms, plus `deployment`) and check them
    with promtool: its rules, and its generated rule tests. Returns the alerts directory."""
    from monitor.config import parse_config
    from monitor.generate.build import generate
    from monitor.generate.options import Options
    from monitor.generate.writer import write

    cfg = parse_config({"deployments": [{"name": "p", "tpot_target_seconds": 0.04, **deployment,
                                         "targets": [{"role": "server", "url": "http://10.0.0.1:30000/metrics"}]}]})
    write(generate(cfg, Options()), tmp_path)
    alerts = tmp_path / "alerts"
    res = run_tool(promtool, "check", "rules", str(alerts / "rules" / "p.rules.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_tool(promtool, "test", "rules", "tests/p.test.yml", cwd=alerts)
    assert res.returncode == 0, res.stdout + res.stderr
    return alerts


@pytest.mark.parametrize("period", ["1h", "365d"])
def test_the_shortest_and_longest_periods_give_rules_promtool_checks_and_tests(period, tmp_path,
                                                                             prometheus_build: Build):
    _generate_one(tmp_path, prometheus_build.tool, period=period)


def test_deployment_label_values_are_literal_text_in_the_generated_alerts(tmp_path, prometheus_build: Build):
    """`team: "{{"` broke `promtool check rules`; `{{ $value }}` was executed. Both are shown as written:
    the generated tests expect each alert with the labels exactly as configured, and promtool agrees."""
    import yaml

    labels = {"team": "{{", "owner": "{{ $value }}", "quoted": 'a "b" {{ $labels.job }}'}
    alerts = _generate_one(tmp_path, prometheus_build.tool, labels=labels)
    doc = yaml.safe_load((alerts / "tests" / "p.test.yml").read_text())
    fired = [a for case in doc["tests"] for t in case["alert_rule_test"] for a in t["exp_alerts"]]
    assert fired and all(labels.items() <= a["exp_labels"].items() for a in fired)
