"""Scrape config, Kubernetes manifests, provisioning and the writer's --check."""

from __future__ import annotations

import yaml

from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.generate.prometheus_config import METRIC_RELABEL
from monitor.generate.writer import check, write


def test_scrape_config_has_one_job_per_role_with_labels_and_relabeling(small_files):
    text = small_files["alerts/prometheus.yml"]
    prom = yaml.safe_load(text)
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert {"slo-monitor", "sglang-prefill", "sglang-decode", "sglang-router", "sglang-server", "npu-exporter"} <= set(jobs)
    assert jobs["slo-monitor"]["static_configs"][0]["targets"] == ["127.0.0.1:9464"]
    decode = jobs["sglang-decode"]
    assert decode["metric_relabel_configs"] == METRIC_RELABEL
    assert decode["static_configs"] == [{"targets": ["10.0.0.2:30000"], "labels": {"deployment": "kimi-pd",
                                                                                   "role": "decode"}}]
    assert "# not scraped: kimi-pd decode: http://<decode-node-2>:30000/metrics has a placeholder" in text
    assert prom["rule_files"] == ["rules/*.rules.yml"]
    assert prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]


def test_prometheus_rule_carries_exactly_the_generated_groups(small_files):
    objects = list(yaml.safe_load_all(small_files["deploy/kubernetes/prometheusrule.yaml"]))
    assert [o["kind"] for o in objects] == ["PrometheusRule"]  # a small config fits one (fleets: test_prometheusrule_split)
    k8s_groups = [g for o in objects for g in o["spec"]["groups"]]
    groups = [g for rel, text in small_files.items() if rel.startswith("alerts/rules/")
              for g in yaml.safe_load(text)["groups"]]
    assert sorted(g["name"] for g in k8s_groups) == sorted(g["name"] for g in groups)
    by_name = {g["name"]: g for g in groups}
    assert all(g == by_name[g["name"]] for g in k8s_groups)


def test_pod_monitor_relabels_names_like_the_scrape_config(small_files):
    pm = yaml.safe_load(small_files["deploy/kubernetes/podmonitor-sglang.yaml"])
    endpoint = pm["spec"]["podMetricsEndpoints"][0]
    assert endpoint["metricRelabelings"][0] == {"sourceLabels": ["__name__"], "regex": "sglang_(.+)",
                                                "targetLabel": "__name__", "replacement": "sglang:${1}"}
    assert {r["targetLabel"] for r in endpoint["relabelings"]} >= {"deployment", "role"}
    sm = yaml.safe_load(small_files["deploy/kubernetes/servicemonitor-slo-monitor.yaml"])
    assert sm["kind"] == "ServiceMonitor"
    kust = yaml.safe_load(small_files["deploy/kubernetes/kustomization.yaml"])
    assert len(kust["resources"]) == 3


def test_grafana_provisioning_points_at_the_dashboards(small_files):
    ds = yaml.safe_load(small_files["dashboards/provisioning/datasources/prometheus.yaml"])
    assert ds["datasources"][0]["type"] == "prometheus"
    prov = yaml.safe_load(small_files["dashboards/provisioning/dashboards/slo-monitor.yaml"])
    assert prov["providers"][0]["type"] == "file"


def test_generation_is_deterministic(small_config, small_files):
    assert generate(small_config, Options(config_name="tests/generate/fixtures/small.yaml")) == small_files


def test_check_lists_changed_missing_and_extra_files(small_files, tmp_path):
    write(small_files, tmp_path)
    assert check(small_files, tmp_path) == []
    (tmp_path / "alerts/alertmanager.yml").write_text("changed\n")
    (tmp_path / "dashboards/slo-overview.json").unlink()
    (tmp_path / "alerts/rules/old.rules.yml").write_text("groups: []\n")
    problems = check(small_files, tmp_path)
    assert any(p.startswith("alerts/alertmanager.yml: differs") for p in problems)
    assert "dashboards/slo-overview.json: missing" in problems
    assert "alerts/rules/old.rules.yml: not generated (should not be there)" in problems
    write(small_files, tmp_path)
    assert check(small_files, tmp_path) == []


def test_the_scrape_config_writes_no_url_secret_and_says_what_the_job_needs_instead():
    from monitor.config import parse_config
    from monitor.generate.prometheus_config import prometheus_yml

    config = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
        {"role": "server", "url": "http://user:pa@SSSECRET3@10.0.0.1:8000/metrics?api_token=TOKSECRET4&format=text"}]}]})
    text = prometheus_yml(config, Options(), [])
    assert "SSSECRET3" not in text and "TOKSECRET4" not in text and "pa@" not in text
    doc = yaml.safe_load(text)
    job = next(j for j in doc["scrape_configs"] if j["job_name"] == "sglang-server")
    assert job["static_configs"][0]["targets"] == ["10.0.0.1:8000"]  # an address, without userinfo
    assert job["params"] == {"format": ["text"]}
    assert "basic_auth: {username: ..., password_file: ...}" in text and "params: {api_token: [...]}" in text
