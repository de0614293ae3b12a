from __future__ import annotations

import subprocess

import pytest
import yaml

from monitor.config import Deployment
from monitor.generate.accelerators import accelerator_groups, accelerator_rules
from monitor.generate.options import Options


def deployments():
    return [
        Deployment(name="kimi-a3", targets=[{"role": "npu", "node": "a3-0"}]),
        Deployment(name="llama-h200", targets=[{"role": "gpu", "source": "nvml", "node": "h200"}]),
        Deployment(name="no-accel", targets=[{"role": "server", "url": "http://127.0.0.1:30000/metrics"}]),
    ]


@pytest.fixture
def rule_file(tmp_path):
    path = tmp_path / "accel.rules.yml"
    rules = [r.data() for r in accelerator_groups(deployments(), Options())[0].rules]
    path.write_text(yaml.safe_dump({"groups": [{"name": "accelerators", "rules": rules}]}, sort_keys=False))
    return path


def test_rule_shape_and_deployments_without_accelerators_are_skipped():
    (group,) = accelerator_groups(deployments(), Options())
    rules = [r.data() for r in group.rules]
    assert len(rules) == 14
    assert {r["alert"] for r in rules} == {"AcceleratorUnhealthy", "AcceleratorHealthWarning",
                                           "AcceleratorMemoryNearlyFull", "AcceleratorTemperatureHigh",
                                           "AcceleratorThermalThrottling", "AcceleratorTelemetryDown",
                                           "AcceleratorTelemetryAbsent"}
    assert not any("no-accel" in r["expr"] for r in rules)
    for r in rules:
        assert set(r) == {"alert", "expr", "for", "labels", "annotations"} and r["for"] == "2m"
        assert r["labels"]["severity"] in {"page", "ticket"} and r["labels"]["deployment"] in r["expr"]
        assert set(r["annotations"]) == {"summary", "description", "runbook_url"}
    assert rules[2]["expr"].endswith("> 0.95") and rules[3]["expr"].endswith("> 85")
    assert accelerator_groups([deployments()[2]], Options()) == []


def test_for_follows_the_time_scale_like_every_other_rule():
    rules = accelerator_rules(deployments()[0], Options(time_scale=60))
    assert {r.for_ for r in rules} == {"2s"}


def test_deployment_names_are_escaped_in_selectors_and_templates():
    weird = Deployment(name="kimi-a3", targets=[{"role": "npu", "node": "a3-0"}]).model_copy(
        update={"name": 'x"{{ $value }}'})  # past the slug check on purpose: escaping must not rely on it
    rule = accelerator_rules(weird, Options())[0]
    assert 'accelerator_health{deployment="x\\"{{ $value }}"}' in rule.expr
    assert rule.annotations["summary"].startswith('x"{{ "{{" }} $value }}: ')  # printed, not executed


def test_promtool_check_rules(rule_file, prometheus_build):
    proc = subprocess.run([prometheus_build.tool, "check", "rules", str(rule_file)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 14 rules found" in proc.stdout and proc.stderr == "", proc.stdout + proc.stderr


def test_promtool_unit_tests(rule_file, tmp_path, prometheus_build):
    chip = 'deployment="kimi-a3",node="a3-0",device="0",chip="1",vendor="huawei"'
    gpu = 'deployment="llama-h200",node="h200",device="0",chip="0",vendor="nvidia"'
    gpu1 = gpu.replace('device="0"', 'device="1"')
    gpu_labels = {"deployment": "llama-h200", "node": "h200", "device": "0", "chip": "0", "vendor": "nvidia"}
    series = [
        {"series": f"accelerator_health{{{chip}}}", "values": "0 0 2 2 2 2 2"},
        {"series": f"accelerator_memory_used_bytes{{{chip}}}", "values": "60 66 66 66 66 66 66"},
        {"series": f"accelerator_memory_total_bytes{{{chip}}}", "values": "64 64 64 64 64 64 64"},
        {"series": f"accelerator_temperature_celsius{{{chip}}}", "values": "70 70 70 70 70 70 70"},
        {"series": 'accelerator_telemetry_up{deployment="kimi-a3",node="a3-0",source="npu-smi"}',
         "values": "1 1 0 0 0 0 0"},
        # One GPU throttles for heat from minute 1 on; another only for a minute (no alert: `for` is 2m).
        {"series": f"accelerator_thermal_throttling{{{gpu}}}", "values": "0 1 1 1 1 1 1"},
        {"series": f"accelerator_thermal_throttling{{{gpu1}}}", "values": "0 1 0 0 0 0 0"},
    ]
    labels = {"deployment": "kimi-a3", "node": "a3-0", "device": "0", "chip": "1", "vendor": "huawei"}
    up_labels = {"deployment": "kimi-a3", "node": "a3-0", "source": "npu-smi"}
    rules = [r.data() for r in accelerator_groups(deployments(), Options())[0].rules]

    def ann(alert: str, values: dict[str, str], value: str = "", deployment: str = "kimi-a3") -> dict[str, str]:
        """The rule's annotations with the templates promtool will expand filled in by hand."""
        rule = next(r for r in rules if r["alert"] == alert and r["labels"]["deployment"] == deployment)
        out = {}
        for key, text in rule["annotations"].items():
            for k, v in values.items():
                text = text.replace("{{ $labels." + k + " }}", v)
            out[key] = text.replace("{{ $value | humanizePercentage }}", value)
        return out

    tests = {
        "rule_files": [str(rule_file)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "AcceleratorUnhealthy", "exp_alerts": []},
                {"eval_time": "5m", "alertname": "AcceleratorUnhealthy", "exp_alerts": [{
                    "exp_labels": {**labels, "severity": "page"},
                    "exp_annotations": {
                        "summary": "kimi-a3: accelerator a3-0 device 0 chip 1 is unhealthy (level 2)",
                        "description": "Health level 2 (2 alarm/unhealthy, 3 critical) on a3-0 device 0 chip 1 of "
                                       "deployment kimi-a3 for 2m. Requests served by this chip's rank will fail "
                                       "or stall.",
                        "runbook_url": "docs/runbooks/accelerators.md#acceleratorunhealthy"}}]},
                {"eval_time": "5m", "alertname": "AcceleratorMemoryNearlyFull", "exp_alerts": [{
                    "exp_labels": {**labels, "severity": "ticket"},
                    "exp_annotations": ann("AcceleratorMemoryNearlyFull", labels, "103.1%")}]},
                {"eval_time": "5m", "alertname": "AcceleratorTemperatureHigh", "exp_alerts": []},
                {"eval_time": "2m", "alertname": "AcceleratorThermalThrottling", "exp_alerts": []},
                {"eval_time": "5m", "alertname": "AcceleratorThermalThrottling", "exp_alerts": [{
                    "exp_labels": {**gpu_labels, "severity": "ticket"},
                    "exp_annotations": ann("AcceleratorThermalThrottling", gpu_labels, deployment="llama-h200")}]},
                {"eval_time": "5m", "alertname": "AcceleratorTelemetryDown", "exp_alerts": [{
                    "exp_labels": {**up_labels, "severity": "ticket"},
                    "exp_annotations": ann("AcceleratorTelemetryDown", up_labels)}]},
                {"eval_time": "5m", "alertname": "AcceleratorTelemetryAbsent", "exp_alerts": [{
                    "exp_labels": {"deployment": "llama-h200", "severity": "ticket"},
                    "exp_annotations": ann("AcceleratorTelemetryAbsent", {}, deployment="llama-h200")}]},
            ],
        }],
    }
    # promtool matches annotations exactly; only the first alert checks them.
    path = tmp_path / "accel.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run([prometheus_build.tool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
