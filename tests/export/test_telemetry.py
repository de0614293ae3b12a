from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.conventions.names import ACCEL_LABELS
from monitor.export.telemetry import telemetry_families
from monitor.telemetry.dcgm import parse_dcgm
from monitor.telemetry.model import TelemetryResult
from monitor.telemetry.npu_exporter import parse_npu_exporter
from monitor.telemetry.npu_smi_table import parse_npu_smi_info
from monitor.telemetry.nvml import read_nvml
from tests.conftest import REAL_FIXTURES as REAL
from tests.telemetry.conftest import TELEMETRY, npu_smi_text
from tests.telemetry.fake_nvml import FakeNvml


def render(results) -> str:
    class C:
        def collect(self):
            return telemetry_families(results)

    reg = CollectorRegistry()
    reg.register(C())
    return generate_latest(reg).decode()


@pytest.fixture
def results():
    a3 = parse_npu_smi_info(npu_smi_text("910_93_info_vllm-ascend-issue3548-16chips-load_npusmi25.3.rc1.txt"), "a3-0")
    npu = parse_npu_exporter((TELEMETRY / "npu_exporter_a3_synthetic.txt").read_text(), "a3-1")
    gpu = parse_dcgm((REAL / "dcgm_exporter_sample.txt").read_text())
    return {
        "kimi-pd": [TelemetryResult("npu-smi", "a3-0", a3, duration_seconds=0.2),
                    TelemetryResult("npu-exporter", "a3-1", npu),
                    TelemetryResult("npu-smi", "a3-2", up=False, error="npu-smi: not found")],
        "llama-gpu": [TelemetryResult("dcgm", "gpu1-wl8sg", gpu)],
    }


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_output_passes_promtool_check_metrics(results, prometheus_build):
    text = render(results)
    proc = subprocess.run([prometheus_build.tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "" and proc.stderr.strip() == ""


def test_names_units_and_labels(results):
    s = samples(render(results))
    assert set(s) >= {"accelerator_utilization_ratio", "accelerator_memory_used_bytes",
                      "accelerator_memory_total_bytes", "accelerator_temperature_celsius", "accelerator_power_watts",
                      "accelerator_health", "accelerator_health_info", "accelerator_ecc_errors_total",
                      "accelerator_link_up", "accelerator_processes", "accelerator_info", "accelerator_telemetry_up"}
    for sample in s["accelerator_temperature_celsius"]:
        assert tuple(sorted(sample.labels)) == tuple(sorted(ACCEL_LABELS))
    by = {(x.labels["deployment"], x.labels["node"], x.labels["device"], x.labels["chip"]): x.value
          for x in s["accelerator_utilization_ratio"]}
    assert by[("kimi-pd", "a3-0", "0", "0")] == pytest.approx(0.08)
    assert len([k for k in by if k[1] == "a3-0"]) == 16


def test_missing_values_are_left_out_not_zero(results):
    s = samples(render(results))
    power = {(x.labels["node"], x.labels["device"], x.labels["chip"]) for x in s["accelerator_power_watts"]}
    assert ("a3-0", "0", "0") in power and ("a3-0", "0", "1") not in power  # A3 chip 1 prints '-'
    assert ("a3-1", "2", "0") not in power  # npu-exporter -1
    health = {(x.labels["node"], x.labels["device"]): x.value for x in s["accelerator_health"]}
    assert health[("a3-1", "1")] == 2 and ("a3-1", "2") not in health
    info = {(x.labels["node"], x.labels["device"]): x.labels["health"] for x in s["accelerator_health_info"]}
    assert info[("a3-1", "1")] == "unhealthy" and info[("a3-1", "2")] == "unknown"


def test_the_slowdown_temperature_and_thermal_throttling_only_where_the_telemetry_reports_them(
        results, prometheus_build):
    nvml = read_nvml("h200", module=FakeNvml(gpus=2, reasons=0x40))
    text = render({**results, "h200-nvml": [TelemetryResult("nvml", "h200", nvml)]})
    proc = subprocess.run([prometheus_build.tool, "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), proc.stdout + proc.stderr
    s = samples(text)
    for name, value in (("accelerator_temperature_slowdown_celsius", 90.0), ("accelerator_thermal_throttling", 1.0)):
        assert {(x.labels["deployment"], x.labels["device"], x.value) for x in s[name]} == {
            ("h200-nvml", "0", value), ("h200-nvml", "1", value)}, name


def test_ecc_links_processes_and_info(results):
    s = samples(render(results))
    ecc = {(x.labels["device"], x.labels["type"]): x.value for x in s["accelerator_ecc_errors_total"]}
    assert ecc[("1", "uncorrectable")] == 1 and ecc[("1", "correctable")] == 3
    links = {(x.labels["device"], x.labels["link"]): x.value for x in s["accelerator_link_up"]}
    assert links == {("0", "roce"): 1.0, ("1", "roce"): 0.0}
    procs = {(x.labels["node"], x.labels["device"], x.labels["chip"]): x.value for x in s["accelerator_processes"]}
    assert procs[("a3-0", "0", "0")] == 4 and procs[("a3-0", "2", "0")] == 0
    gpu_info = [x for x in s["accelerator_info"] if x.labels["vendor"] == "nvidia"][0]
    assert gpu_info.labels["model"] == "NVIDIA L40S" and gpu_info.labels["source"] == "dcgm"


def test_telemetry_up_per_deployment_node_source(results):
    up = {(x.labels["deployment"], x.labels["node"], x.labels["source"]): x.value
          for x in samples(render(results))["accelerator_telemetry_up"]}
    assert up == {("kimi-pd", "a3-0", "npu-smi"): 1.0, ("kimi-pd", "a3-1", "npu-exporter"): 1.0,
                  ("kimi-pd", "a3-2", "npu-smi"): 0.0, ("llama-gpu", "gpu1-wl8sg", "dcgm"): 1.0}


def test_same_chip_twice_is_written_once_and_any_failure_marks_down(results):
    first = results["kimi-pd"][0]
    dup = replace(first, readings=first.readings[:1], up=False, error="timeout")
    text = render({"kimi-pd": [first, dup]})
    s = samples(text)
    keys = [tuple(sorted(x.labels.items())) for x in s["accelerator_temperature_celsius"]]
    assert len(keys) == len(set(keys)) == 16
    assert [x.value for x in s["accelerator_telemetry_up"]] == [0.0]


def test_nothing_collected_yet_is_empty():
    assert telemetry_families({}) == []
