"""Symptom alerts per deployment: which exist for which targets, their roles, thresholds and groups."""

from __future__ import annotations

from monitor.config import Deployment
from monitor.conventions import names, policy
from monitor.generate.options import Options
from monitor.generate.rule_model import RecordingRule
from monitor.generate.symptoms import global_groups, symptom_groups


def rules(dep: Deployment, opts: Options | None = None) -> dict[str, list[dict]]:
    (group,) = symptom_groups(dep, opts or Options())
    out: dict[str, list[dict]] = {}
    for r in (rule.data() for rule in group.rules):
        out.setdefault(r.get("alert") or r["record"], []).append(r)
    return out


PD = Deployment(name="pd", mode="pd-disaggregated", targets=[
    {"role": "prefill", "url": "http://p:1/metrics"}, {"role": "decode", "url": "http://d:1/metrics"},
    {"role": "router", "url": "http://r:1/metrics"}, {"role": "npu", "node": "n"}],
    baseline={"tpot_mean_seconds": 0.02})


def test_target_down_per_scraped_role_pages_for_servers_and_router():
    down = {r["labels"]["role"]: r["labels"]["severity"] for r in rules(PD)[names.ALERT_TARGET_DOWN]}
    assert down == {"prefill": "page", "decode": "page", "router": "page"}  # npu-smi is not scraped by Prometheus


def test_pd_failure_alerts_only_for_pd_deployments_and_read_every_engine_role():
    pd = rules(PD)
    for alert in (names.ALERT_PD_TRANSFER, names.ALERT_PD_BOOTSTRAP):
        (r,) = pd[alert]
        assert r["labels"]["severity"] == "page" and 'role=~"decode|prefill"' in r["expr"]
    mixed = rules(Deployment(name="m", targets=[{"role": "server", "url": "http://s:1/metrics"}]))
    assert names.ALERT_PD_TRANSFER not in mixed and names.ALERT_ROUTER_WORKER not in mixed


def test_thresholds_come_from_conventions():
    pd = rules(PD)
    assert pd[names.ALERT_KV_FULL][0]["expr"].endswith(f"> {policy.KV_FULL_RATIO}")
    (regression,) = pd[names.ALERT_REGRESSION]
    assert regression["labels"]["sli"] == "tpot" and regression["expr"].endswith("> 0.03")  # 1.5 x 0.02


def test_recordings_come_before_the_alerts_that_read_them():
    (group,) = symptom_groups(PD, Options())
    kinds = ["record" if isinstance(r, RecordingRule) else "alert" for r in group.rules]
    assert kinds == sorted(kinds, key=lambda k: k != "record")
    assert group.name == names.group("pd", "symptoms")


def test_for_durations_follow_the_time_scale():
    scaled = rules(PD, Options(time_scale=60))
    assert scaled[names.ALERT_TARGET_DOWN][0]["for"] == "2s" and scaled[names.ALERT_QUEUE_GROWING][0]["for"] == "10s"


def test_the_self_rules_alert_on_a_down_sidecar_a_stuck_loop_and_a_restarting_loop():
    (group,) = global_groups(Options())
    down, stuck, restarting, _recording, _reload = (r.data() for r in group.rules)
    assert down["alert"] == names.ALERT_SIDECAR_DOWN and f'job="{names.SIDECAR_JOB}"' in down["expr"]
    # Stale after the same number of the sidecar's own intervals as its /healthz.
    assert stuck["alert"] == names.ALERT_LOOP_STUCK and names.M_LOOP_CYCLE_AGE in stuck["expr"]
    assert f"{names.LOOP_STALE_INTERVALS} * {names.M_SCRAPE_INTERVAL}" in stuck["expr"]
    assert restarting["alert"] == names.ALERT_LOOP_RESTARTING and names.M_LOOP_RESTARTS in restarting["expr"]
    (scaled,) = global_groups(Options(time_scale=60))
    assert scaled.rules[1].for_ == "1s" and "[15s]" in scaled.rules[2].expr


def test_the_self_rules_alert_on_a_recording_that_cannot_be_written_and_a_failed_config_reload():
    (group,) = global_groups(Options())
    rules = {r.alert: r.data() for r in group.alerts}
    recording = rules[names.ALERT_RECORDING_FAILING]
    assert recording["expr"] == f"increase({names.M_RECORDING_WRITE_ERRORS}[15m]) > 0"
    assert "/healthz" in recording["annotations"]["description"]
    reload = rules[names.ALERT_CONFIG_RELOAD_FAILED]
    assert reload["expr"] == f"{names.M_CONFIG_RELOAD_OK} == 0" and reload["for"] == "5m"
