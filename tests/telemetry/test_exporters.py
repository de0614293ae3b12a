from __future__ import annotations

import pytest

from monitor.parse.exposition import ParseError
from monitor.telemetry.dcgm import parse_dcgm
from monitor.telemetry.model import MIB
from monitor.telemetry.npu_exporter import parse_npu_exporter
from tests.conftest import REAL_FIXTURES as REAL
from tests.conftest import npu_exporter_documented

from .conftest import TELEMETRY

DCGM = (REAL / "dcgm_exporter_sample.txt").read_text()
NPU_DOC = npu_exporter_documented()
NPU_A3 = (TELEMETRY / "npu_exporter_a3_synthetic.txt").read_text()


def test_npu_exporter_doc_sample_with_elisions_and_timestamps():
    rs = parse_npu_exporter(NPU_DOC, "n1")
    assert [r.device for r in rs] == [str(i) for i in range(8)]
    assert rs[0].model == "910A-Ascend-V1" and rs[0].bus_id == "0000:61:00.0"
    assert rs[0].uuid == "185011D4-21104518-A0C4ED94-14CC040A-56102003" and rs[0].phy_id == "0"
    # The documented excerpt has no health/temperature/HBM families: nothing is invented.
    assert rs[0].health is None and rs[0].health_label == "unknown" and rs[0].temperature_celsius is None


def test_npu_exporter_values_and_minus_one_is_missing():
    ok, bad, failed = parse_npu_exporter(NPU_A3, "n1")
    assert (ok.health, ok.health_label, ok.power_watts, ok.temperature_celsius) == (0, "ok", 172.6, 52)
    assert ok.utilization_ratio == pytest.approx(0.08)
    assert ok.memory_used_bytes == 51166 * MIB and ok.memory_total_bytes == 65536 * MIB
    assert ok.links == {"roce": True} and [(p.pid, p.memory_bytes) for p in ok.processes] == [(4071417, 47881 * MIB)]
    assert (bad.health, bad.health_label, bad.power_watts) == (2, "unhealthy", None)
    assert bad.ecc_errors == {"correctable": 3, "uncorrectable": 1} and bad.links == {"roce": False}
    assert bad.error_codes == ("80E01801",) and bad.processes == ()
    assert failed.health is None and failed.health_label == "unknown"
    for field in ("utilization_ratio", "memory_used_bytes", "memory_total_bytes", "temperature_celsius",
                  "power_watts", "processes"):
        assert getattr(failed, field) is None, field
    assert failed.ecc_errors == {} and failed.links == {}


def test_dcgm_sample_with_capital_hostname_label():
    (r,) = parse_dcgm(DCGM)
    assert (r.node, r.device, r.chip, r.vendor, r.model) == ("gpu1-wl8sg", "0", "0", "nvidia", "NVIDIA L40S")
    assert r.utilization_ratio == 0.0 and r.temperature_celsius == 32 and r.power_watts == pytest.approx(35.686)
    assert r.memory_used_bytes == 0 and r.memory_total_bytes == (45459 + 608) * MIB
    assert (r.health, r.health_label) == (0, "ok") and r.uuid.startswith("GPU-5b4e07f6")


def test_dcgm_lowercase_hostname_label_and_configured_node_wins():
    text = DCGM.replace('Hostname="gpu1-wl8sg"', 'hostname="gpu1-new"')
    assert parse_dcgm(text)[0].node == "gpu1-new"
    assert parse_dcgm(text, "configured")[0].node == "configured"


def test_dcgm_blank_sentinel_is_missing():
    text = DCGM.replace("DCGM_FI_DRIVER_VERSION=\"595.58.03\"} 32\n", "DCGM_FI_DRIVER_VERSION=\"595.58.03\"} 9223372036854775794\n")
    assert parse_dcgm(text)[0].temperature_celsius is None


def test_dcgm_ecc_and_row_remap_failure_drive_health():
    labels = 'gpu="1",UUID="GPU-x",pci_bus_id="00000000:01:00.0",device="nvidia1",modelName="NVIDIA H200",hostname="h"'
    base = f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 40\nDCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{labels}}} 5\n"
    (r,) = parse_dcgm(base + f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{labels}}} 1\n")
    assert r.ecc_errors == {"correctable": 5, "uncorrectable": 1} and (r.health, r.health_label) == (2, "alarm")
    (r,) = parse_dcgm(base + f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{labels}}} 1\n")
    assert (r.health, r.health_label) == (3, "critical")


def test_dcgm_default_counters_report_no_thermal_limit_or_throttling():
    (r,) = parse_dcgm(DCGM)
    assert r.temperature_slowdown_celsius is None and r.thermal_throttling is None


@pytest.mark.parametrize(("field", "reasons", "throttling"), [
    ("CLOCKS_EVENT_REASONS", 0x40, True), ("CLOCKS_EVENT_REASONS", 0x20, True), ("CLOCKS_EVENT_REASONS", 0x4, False),
    ("CLOCK_THROTTLE_REASONS", 0x40, True),  # the field's name before DCGM 3.3
])
def test_dcgm_slowdown_temperature_and_thermal_clock_reasons_where_the_csv_adds_them(field, reasons, throttling):
    labels = 'gpu="0",UUID="GPU-x",pci_bus_id="00000000:01:00.0",device="nvidia0",modelName="NVIDIA H100",hostname="h"'
    (r,) = parse_dcgm(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 84\nDCGM_FI_DEV_SLOWDOWN_TEMP{{{labels}}} 90\n"
                      f"DCGM_FI_DEV_{field}{{{labels}}} {reasons}\n")
    assert (r.temperature_slowdown_celsius, r.thermal_throttling) == (90, throttling)


def test_dcgm_mig_instances_are_chips():
    line = 'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-m",device="nvidia0",modelName="H100",GPU_I_PROFILE="1g.10gb",GPU_I_ID="{i}",hostname="h"}} 10\n'
    rs = parse_dcgm(line.format(i=1) + line.format(i=2))
    assert [(r.device, r.chip) for r in rs] == [("0", "1"), ("0", "2")]


@pytest.mark.parametrize("parse", [lambda t: parse_dcgm(t), lambda t: parse_npu_exporter(t, "n")])
def test_not_prometheus_text_is_an_error(parse):
    with pytest.raises(ParseError):
        parse("<html>502 Bad Gateway</html>\n{{{ not metrics")
