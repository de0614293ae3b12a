"""Symptom alerts at the gateway: each deployment gets those its gateway version can fire, and a PD
deployment's rendezvous alert ignores the registration probe (its promtool case shows it)."""

from __future__ import annotations

import yaml

from monitor.config import parse_config
from monitor.conventions import names
from monitor.generate.gateway import gateway_alerts
from monitor.generate.options import Options


def _alerts(small_files: dict[str, str], deployment: str) -> dict[str, list[dict]]:
    doc = yaml.safe_load(small_files[f"alerts/{names.rules_file(deployment)}"])
    out: dict[str, list[dict]] = {}
    for g in doc["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                out.setdefault(r["alert"], []).append(r)
    return out


def test_smg_1_13_pd_gets_every_gateway_symptom(small_files):
    alerts = _alerts(small_files, "kimi-pd")
    assert alerts[names.ALERT_ROUTER_WORKER][0]["expr"] == 'smg_worker_health{deployment="kimi-pd",role="router"} == 0'
    assert alerts[names.ALERT_GATEWAY_CIRCUIT_OPEN][0]["expr"] == \
        'smg_worker_cb_state{deployment="kimi-pd",role="router"} == 1'
    shedding = sorted(a["expr"] for a in alerts[names.ALERT_GATEWAY_SHEDDING])
    assert shedding == [
        'sum by (deployment, reason) (increase(smg_admission_queue_rejected_total{deployment="kimi-pd",role="router"}'
        '[5m])) > 0',
        'sum by (deployment, stage) (increase(smg_worker_overload_shed_total{deployment="kimi-pd",role="router"}'
        '[5m])) > 0']
    pd = alerts[names.ALERT_GATEWAY_PD_FAILURES][0]
    assert 'phase!="probe"' in pd["expr"] and pd["labels"]["severity"] == "page"


def test_sglang_router_0_3_2_gets_only_what_it_exposes(small_files):
    alerts = _alerts(small_files, "llama-unified")
    assert names.ALERT_ROUTER_WORKER in alerts and names.ALERT_GATEWAY_CIRCUIT_OPEN in alerts
    assert names.ALERT_GATEWAY_SHEDDING not in alerts and names.ALERT_GATEWAY_PD_FAILURES not in alerts
    assert alerts[names.ALERT_ROUTER_WORKER][0]["labels"]["team"] == 'inference "core" ü'  # the deployment's labels


def test_no_router_target_no_gateway_alert():
    dep = parse_config({"deployments": [{"name": "d", "targets": [
        {"role": "server", "url": "http://127.0.0.1:30000/metrics"}]}]}).deployments[0]
    assert gateway_alerts(dep, Options(), {}) == []


def test_a_regular_smg_deployment_has_no_pd_alert():
    dep = parse_config({"deployments": [{"name": "d", "targets": [
        {"role": "router", "url": "http://127.0.0.1:29000/metrics"}]}]}).deployments[0]
    got = {a.alert for a in gateway_alerts(dep, Options(), {})}
    assert names.ALERT_GATEWAY_PD_FAILURES not in got and names.ALERT_GATEWAY_SHEDDING in got


def test_promtool_cases_cover_the_breaker_and_the_registration_probe(small_files):
    tests = {t["name"] for t in yaml.safe_load(small_files[f"alerts/{names.test_file('kimi-pd')}"])["tests"]}
    assert "kimi-pd: gateway circuit breaker open" in tests
    assert "kimi-pd: PD rendezvous failures: registration probes stay quiet, a bootstrap failure pages" in tests
    old = {t["name"] for t in yaml.safe_load(small_files[f"alerts/{names.test_file('llama-unified')}"])["tests"]}
    assert "llama-unified: gateway circuit breaker open" in old and not any("rendezvous" in t for t in old)


def test_the_scrape_config_labels_each_gateway_with_its_version(small_files):
    jobs = {j["job_name"]: j for j in yaml.safe_load(small_files["alerts/prometheus.yml"])["scrape_configs"]}
    labels = {tuple(s["targets"]): s["labels"] for s in jobs["sglang-router"]["static_configs"]}
    assert labels[("10.0.0.3:29000",)] == {"deployment": "kimi-pd", "role": "router", "gateway": "smg-1.13"}
    assert labels[("127.0.0.1:29000",)]["gateway"] == "sglang-router-0.3.2"
    assert all("gateway" not in s["labels"] for s in jobs["sglang-decode"]["static_configs"])
