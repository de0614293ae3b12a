from __future__ import annotations

import json

import pytest

from monitor.telemetry.fake_npu_smi import render_a3
from monitor.telemetry.inspect import inspect_npu_smi
from monitor.telemetry.model import MIB, Process, Reading
from monitor.telemetry.npu_smi_table import NpuSmiParseError, parse_npu_smi_info

from .conftest import npu_smi_text

KEYS = {"npu_id", "chip_id", "name", "health", "power_watts", "temperature_celsius", "utilization_ratio",
        "hbm_used_bytes", "hbm_total_bytes", "processes"}


def test_inspect_a3_table(a3_text):
    chips = inspect_npu_smi(a3_text)
    json.dumps(chips)  # the CLI prints it as JSON
    assert len(chips) == 4 and set(chips[0]) >= KEYS
    assert {k: chips[1][k] for k in ("npu_id", "chip_id", "phy_id", "power_watts", "health")} == {
        "npu_id": "0", "chip_id": "1", "phy_id": "1", "power_watts": None, "health": "ok"}
    assert chips[3]["hbm_used_bytes"] == 10568 * MIB and chips[3]["hbm_total_bytes"] == 65536 * MIB
    assert chips[3]["processes"] == [{"pid": 990711, "name": "python", "memory_bytes": 7746 * MIB}]


def test_inspect_ddr_chip_has_no_hbm():
    (chip,) = inspect_npu_smi(npu_smi_text("310b4_info_nputop-test-npusmi23.0.0_alarm.txt"))
    assert chip["hbm_used_bytes"] is None and chip["memory_kind"] == "ddr" and chip["health"] == "alarm"


def test_inspect_keyvalue_output():
    (chip,) = inspect_npu_smi(npu_smi_text("950_info-t-common_driver-docs.txt"))
    assert chip["power_watts"] == 298.6 and chip["temperature_celsius"] == 65


def test_inspect_garbage_raises_parse_error():
    with pytest.raises(NpuSmiParseError):
        inspect_npu_smi("| this | is | not | npu-smi |\n")


@pytest.mark.parametrize(("name", "version"), [
    ("910_93_info_nputop-test-npusmi25.2.0_mixedprocs.txt", "25.2.0"),
    ("910_93_info_vllm-ascend-issue3548-16chips-load_npusmi25.3.rc1.txt", "25.3.rc1"),
])
def test_render_reproduces_real_a3_output_byte_for_byte(name, version):
    text = npu_smi_text(name)
    assert render_a3(parse_npu_smi_info(text), version=version) == text


def test_render_then_parse_round_trips_readings():
    def chip(dev, c, **kw):
        return Reading(node="localhost", device=dev, chip=c, vendor="huawei", model="Ascend910",
                       health=0, health_label="ok", bus_id=f"0000:9{dev}:0{c}.0", phy_id=str(int(dev) * 2 + int(c)),
                       memory_kind="hbm", memory_total_bytes=65536 * MIB, **kw)
    readings = [
        chip("0", "0", utilization_ratio=0.42, memory_used_bytes=61609 * MIB, temperature_celsius=55.0,
             power_watts=301.5, processes=(Process(4242, "sglang::schedu", 58000 * MIB),)),
        chip("0", "1", utilization_ratio=0.4, memory_used_bytes=100 * MIB, temperature_celsius=54.0,
             processes=()),
        chip("1", "0", utilization_ratio=0.0, memory_used_bytes=0, temperature_celsius=40.0, power_watts=90.0,
             processes=()),
        chip("1", "1", utilization_ratio=0.0, memory_used_bytes=0, temperature_celsius=41.0, processes=()),
    ]
    readings[3] = Reading(**{**readings[3].__dict__, "health": 3, "health_label": "critical"})
    assert parse_npu_smi_info(render_a3(readings)) == readings
