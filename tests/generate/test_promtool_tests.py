"""The generated promtool tests: the series they feed, the alerts they expect, and template rendering."""

from __future__ import annotations

from monitor.config import Deployment
from monitor.conventions import names
from monitor.generate.options import Options
from monitor.generate.promtool_tests import promtool_test, render
from monitor.slo_plan import plan_slis

DEP = Deployment(name="d", tpot_target_seconds=0.04, objective=0.99,
                 targets=[{"role": "server", "url": "http://s:1/metrics"}])


def test_render_fills_the_value_and_labels_and_prints_escaped_braces():
    text = 'x {{ $value | printf "%.2f" }} on {{ $labels.instance }} {{ "{{" }}'
    assert render(text, 14.4, {"instance": "i:1"}) == "x 14.40 on i:1 {{"


def test_render_prints_a_with_block_only_when_its_label_is_set():
    text = "its {{ $labels.loop }} loop{{ with $labels.deployment }} of deployment {{ . }}{{ end }} is stuck"
    assert render(text, 0, {"loop": "scrape", "deployment": "d"}) == "its scrape loop of deployment d is stuck"
    assert render(text, 0, {"loop": "sidecar"}) == "its sidecar loop is stuck"


def test_one_case_per_burn_scenario_plus_the_target_down_case_and_the_leading_tpot_cases():
    plans = plan_slis(DEP)
    doc = promtool_test(DEP, plans, Options())
    names_ = [t["name"] for t in doc["tests"]]
    assert names_ == ["d tpot: fast burn pages", "d tpot: medium burn pages via 6h/30m only",
                      "d tpot: slow burn tickets, does not page", "d tpot: healthy stays quiet",
                      "d tpot: no traffic stays quiet", "d: server target down",
                      "d tpot: running requests decode slower than the target: warns",
                      "d tpot: decode throughput alone says slower than the target (no tokens streamed yet): warns",
                      "d tpot: healthy stays quiet", "d tpot: idle stays quiet"]
    assert doc["rule_files"] == [f"../{names.rules_file('d')}"]


def test_fast_burn_expects_both_page_pairs_and_healthy_expects_none():
    doc = promtool_test(DEP, plan_slis(DEP), Options())
    fast, healthy = doc["tests"][0], doc["tests"][3]
    pages = {(a["exp_labels"]["long_window"], a["exp_labels"]["short_window"])
             for t in fast["alert_rule_test"] if t["alertname"] == names.ALERT_PAGE for a in t["exp_alerts"]}
    assert pages == {("1h", "5m"), ("6h", "30m")}
    assert all(not t["exp_alerts"] for t in healthy["alert_rule_test"])


def test_input_series_are_the_sli_families_with_the_scrape_labels():
    doc = promtool_test(DEP, plan_slis(DEP), Options())
    series = [s["series"] for s in doc["tests"][0]["input_series"]]
    assert series == ['sglang:request_time_per_output_token_seconds_count{deployment="d",role="server"}',
                      'sglang:request_time_per_output_token_seconds_bucket{deployment="d",role="server",le="0.04"}']


def test_a_burn_above_100_percent_errors_is_not_tested():
    strict = DEP.model_copy(update={"objective": 0.5})  # 20x the budget would be 1000 % errors
    doc = promtool_test(strict, plan_slis(strict), Options())
    assert "d tpot: fast burn pages" not in [t["name"] for t in doc["tests"]]


def test_the_leading_tpot_warning_is_expected_only_where_the_running_requests_are_slow():
    doc = promtool_test(DEP, plan_slis(DEP), Options())
    cases = [t for t in doc["tests"] if any(a["alertname"] == names.ALERT_TPOT_LEADING for a in t["alert_rule_test"])]
    fired = [bool(t["alert_rule_test"][0]["exp_alerts"]) for t in cases]
    assert fired == [True, True, False, False]
    warn = cases[0]["alert_rule_test"][0]["exp_alerts"][0]["exp_labels"]
    assert warn["severity"] == "warning" and warn["sli"] == "tpot" and warn["source"] == "max"
    assert [e["exp_samples"][0]["value"] for e in cases[0]["promql_expr_test"]] == [0.06, 0.02, 0.06]
