from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from monitor.telemetry import nvml
from monitor.telemetry.nvml import NvmlUnavailable, read_nvml

from .fake_nvml import FakeNvml


def test_reading_matches_what_the_h200_reported():
    fake = FakeNvml()
    (r,) = read_nvml("h200", module=fake)
    assert (r.node, r.device, r.chip, r.vendor, r.model) == ("h200", "0", "0", "nvidia", "NVIDIA H200")
    assert r.utilization_ratio == 1.0 and r.power_watts == pytest.approx(673.793)
    assert r.memory_used_bytes == 21936078848 and r.memory_total_bytes == 150754820096 and r.memory_kind == "fb"
    assert r.temperature_celsius == 62 and (r.health, r.health_label) == (0, "ok")
    assert r.ecc_errors == {"correctable": 7, "uncorrectable": 0} and r.links == {}
    assert [(p.pid, p.name, p.memory_bytes) for p in r.processes] == [(425, None, 21281898496)]
    assert r.bus_id == "00000000:00:06.0" and r.uuid == "GPU-00000000" and fake.shutdowns == 1


@pytest.mark.parametrize(("kw", "health"), [
    ({"uncorrected": 2}, (2, "alarm")),
    ({"remapped": (0, 1, 1, 0)}, (1, "warning")),
    ({"remapped": (0, 1, 0, 1)}, (3, "critical")),
])
def test_derived_health(kw, health):
    (r,) = read_nvml("n", module=FakeNvml(**kw))
    assert (r.health, r.health_label) == health


def test_unsupported_fields_are_missing_not_fatal_and_nvlinks_are_read():
    rs = read_nvml("n", module=FakeNvml(gpus=2, ecc_supported=False, nvlinks=2))
    assert [r.device for r in rs] == ["0", "1"]
    assert rs[0].ecc_errors == {} and rs[0].links == {"nvlink0": True, "nvlink1": False}


@pytest.mark.parametrize(("kw", "slowdown", "throttling"), [
    ({}, 90.0, False),
    ({"reasons": 0x40}, 90.0, True),  # HW thermal slowdown
    ({"reasons": 0x20 | 0x1}, 90.0, True),  # SW thermal slowdown (and idle)
    ({"reasons": 0x4 | 0x80}, 90.0, False),  # power cap and power brake: not heat
    ({"reasons": 0x40, "event_reasons_api": False}, 90.0, True),  # a driver before ...EventReasons
    ({"slowdown": None, "reasons": None}, None, None),  # neither supported: not reported, not "no"
])
def test_the_gpus_own_slowdown_temperature_and_thermal_throttling_are_read(kw, slowdown, throttling):
    (r,) = read_nvml("n", module=FakeNvml(**kw))
    assert (r.temperature_slowdown_celsius, r.thermal_throttling) == (slowdown, throttling)


def test_init_failure_is_nvml_unavailable():
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        read_nvml("n", module=FakeNvml(init_fails=True))


def test_missing_package_is_nvml_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py is not installed"):
        nvml.load_pynvml()


def test_a_real_h100s_thresholds_and_power_capped_load_read_as_its_limit_and_no_thermal_throttling():
    """The lent H100's own answers (tests/fixtures/telemetry/nvml_h100_thermal_probe.log): a slowdown threshold of
    89 degC, and under a full matmul load (61 degC, 697 W) clock event reasons 0x4, the software power cap. The
    sidecar reports the 89 and no thermal throttling: a power-capped GPU is not overheating."""
    log = (Path(__file__).resolve().parents[1] / "fixtures" / "telemetry" / "nvml_h100_thermal_probe.log").read_text()
    assert "NVIDIA H100" in log
    slowdown = int(re.search(r"^threshold SLOWDOWN (\d+)$", log, re.M).group(1))
    loaded = log[log.index("== under load"):]
    reasons = int(re.search(r"^nvmlDeviceGetCurrentClocksEventReasons (0x[0-9a-f]+)$", loaded, re.M).group(1), 16)
    assert (slowdown, reasons) == (89, 0x4)
    (r,) = read_nvml("n", module=FakeNvml(slowdown=slowdown, reasons=reasons))
    assert (r.temperature_slowdown_celsius, r.thermal_throttling) == (89.0, False)
