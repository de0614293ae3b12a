from __future__ import annotations

import re

import yaml

from monitor.conventions import names
from monitor.conventions.policy import RULE_WINDOWS
from monitor.generate.rules import burn_factor


def rules_of(files: dict[str, str], deployment: str) -> list[dict]:
    doc = yaml.safe_load(files[f"alerts/rules/{deployment}.rules.yml"])
    return [r for g in doc["groups"] for r in g["rules"]]


def test_every_sli_with_a_target_gets_good_total_error_and_burn_for_every_window(small_files):
    rules = rules_of(small_files, "kimi-pd")
    for sli in ("tpot", "ttft"):
        recorded = {r["record"] for r in rules if r.get("labels", {}).get("sli") == sli and "record" in r}
        for w in RULE_WINDOWS:
            assert {names.sli_good(w), names.sli_total(w), names.sli_error(w), names.burn_rate(w)} <= recorded
        assert {names.BUDGET_REMAINING, names.SLI_ERROR_PERIOD, names.OBJECTIVE, names.TARGET} <= recorded
    assert not any(r.get("labels", {}).get("sli") == "itl" for r in rules if "record" in r
                   and r["record"].startswith("slo_monitor:sli_"))


def test_good_events_use_the_bucket_at_the_target_and_total_the_count(small_files):
    rules = {r["record"]: r for r in rules_of(small_files, "kimi-pd") if "record" in r and r["labels"].get("sli") == "ttft"}
    # PD: only the decode server answers the request; the prefill server's series would count it twice.
    assert ('sglang:time_to_first_token_seconds_bucket{deployment="kimi-pd",le="2.0",role=~"decode",'
            'engine_type!="prefill"}[5m]') in rules[names.sli_good("5m")]["expr"]
    assert "sglang:time_to_first_token_seconds_count" in rules[names.sli_total("1d")]["expr"]


def test_no_request_number_of_a_pd_deployment_reads_the_prefill_server(small_files):
    for r in rules_of(small_files, "kimi-pd"):
        if r.get("record", "").startswith(("slo_monitor:sli_", "slo_monitor:latency_mean")):
            roles = set(re.findall(r'role=~"([^"]*)"', r["expr"]))
            if not roles:  # ratios of the records above
                continue
            if r["labels"].get("sli") == "queue_time":  # the client's queue is the prefill server's
                assert roles == {"prefill"} and 'engine_type!="decode"' in r["expr"], r
            else:
                assert roles == {"decode"} and 'engine_type!="prefill"' in r["expr"], r


def test_error_ratio_is_guarded_against_no_traffic(small_files):
    for r in rules_of(small_files, "kimi-pd"):
        if r.get("record", "").startswith("slo_monitor:sli_error"):
            assert "> 0)" in r["expr"]


def test_page_and_ticket_alerts_follow_the_workbook_pairs(small_files):
    alerts = [r for r in rules_of(small_files, "kimi-pd") if r.get("alert") in (names.ALERT_PAGE, names.ALERT_TICKET)
              and r["labels"]["sli"] == "tpot"]
    got = {(a["alert"], a["labels"]["severity"], a["labels"]["long_window"], a["labels"]["short_window"],
            a["labels"]["burn_rate_threshold"]) for a in alerts}
    assert got == {(names.ALERT_PAGE, "page", "1h", "5m", "14.4"), (names.ALERT_PAGE, "page", "6h", "30m", "6"),
                   (names.ALERT_TICKET, "ticket", "1d", "2h", "3"), (names.ALERT_TICKET, "ticket", "3d", "6h", "1")}
    for a in alerts:
        assert "for" not in a  # the short window provides the reset
        assert {"summary", "description", "runbook", "target_seconds", "burn_rate"} <= set(a["annotations"])
        assert "kimi-pd" in a["annotations"]["summary"] and "$value" in a["annotations"]["summary"]


def test_burn_factors_keep_the_budget_share_for_other_periods():
    assert burn_factor(14.4, 28 * 86400) == 13.44
    assert burn_factor(6.0, 30 * 86400) == 6.0


def test_approximated_sli_says_so_and_carries_deployment_labels(small_files):
    alerts = [r for r in rules_of(small_files, "llama-unified") if r.get("alert") == names.ALERT_PAGE]
    tpot = [a for a in alerts if a["labels"]["sli"] == "tpot"]
    assert tpot and all("interpolated" in a["annotations"]["approximation"] for a in tpot)
    assert all(a["labels"]["team"] == 'inference "core" ü' for a in alerts)
    # The model name contains `{{ test }}`: it must be printed, not executed.
    assert '{{ "{{" }} test }}' in tpot[0]["annotations"]["description"]


def test_symptom_alerts_exist_for_pd_deployments(small_files):
    alerts = {r["alert"] for r in rules_of(small_files, "kimi-pd") if "alert" in r}
    assert {names.ALERT_TARGET_DOWN, names.ALERT_METRICS_ABSENT, names.ALERT_QUEUE_GROWING, names.ALERT_KV_FULL,
            names.ALERT_PD_TRANSFER, names.ALERT_PD_BOOTSTRAP, names.ALERT_REGRESSION,
            names.ALERT_ROUTER_WORKER} <= alerts
    unified = {r["alert"] for r in rules_of(small_files, "llama-unified") if "alert" in r}
    assert names.ALERT_PD_TRANSFER not in unified and names.ALERT_REGRESSION not in unified


def test_regression_alert_compares_mean_tpot_with_one_and_a_half_times_the_baseline(small_files):
    reg = [r for r in rules_of(small_files, "kimi-pd") if r.get("alert") == names.ALERT_REGRESSION]
    assert {r["labels"]["sli"]: r["expr"].split(" > ")[1] for r in reg} == {"tpot": "0.0375", "ttft": "1.35"}


def test_queue_totals_sum_over_dp_rank_never_tp_rank(small_files):
    rec = next(r for r in rules_of(small_files, "kimi-pd") if r.get("record") == names.QUEUE)
    assert "max by (deployment, role, instance, dp_rank)" in rec["expr"] and 'priority=""' in rec["expr"]
    assert "tp_rank" not in rec["expr"]


def test_time_scale_shrinks_windows_but_keeps_names(scaled_dir):
    doc = yaml.safe_load((scaled_dir / "alerts/rules/kimi-pd.rules.yml").read_text())
    rules = {(r.get("record") or r.get("alert")): r for g in doc["groups"] for r in g["rules"]}
    assert "[5s]" in rules[names.sli_good("5m")]["expr"] and "[72m]" in rules[names.sli_good("3d")]["expr"]
    assert rules[names.ALERT_TARGET_DOWN]["for"] == "2s"
    assert "--time-scale 60" in (scaled_dir / "alerts/rules/kimi-pd.rules.yml").read_text().splitlines()[2]


def test_every_rule_reads_recordings_of_its_own_group_made_before_it(small_files):
    """Prometheus evaluates a group's rules in order at one timestamp; another group's recordings can be an
    evaluation interval old. So an alert never sees a burn rate older than the error ratio it comes from."""
    from monitor.promql import metric_names

    groups = [g for rel, text in small_files.items() if rel.startswith("alerts/rules/")
              for g in yaml.safe_load(text)["groups"]]
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    for g in groups:
        seen: set[str] = set()
        for r in g["rules"]:
            for name in metric_names(r["expr"]) & recorded:
                assert name in seen, (g["name"], r.get("record") or r["alert"], name)
            if "record" in r:
                seen.add(r["record"])
