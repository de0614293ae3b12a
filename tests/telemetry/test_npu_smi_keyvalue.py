from __future__ import annotations

import pytest

from monitor.telemetry.model import MIB, merge
from monitor.telemetry.npu_smi_keyvalue import parse_npu_smi_keyvalue
from monitor.telemetry.npu_smi_table import NpuSmiParseError, parse_npu_smi_info

from .conftest import npu_smi_text


def kv(name: str, **kw):
    return parse_npu_smi_keyvalue(npu_smi_text(name), node="n1", **kw)


@pytest.mark.parametrize(("name", "device", "chips", "util", "kind", "total_mb", "rate"), [
    ("910b1_info-t-usages_arthurchiao-blog.txt", "0", ["0"], 0.0, "hbm", 65536, 4),  # 8-space indent
    ("910a_info-t-usages_mindcluster-faultdiag-npu_info_before.txt", "0", ["0"], 0.0, "hbm", 31129, 0),  # tab
    ("910_info-t-usages_gpustack-test.txt", "0", ["0"], 0.0, "hbm", 32768, 0),
    ("310p_info-t-usages_gpustack-test.txt", "1", ["0", "1"], 0.0, "ddr", 44280, 3),  # Chip ID after the block
    ("950_info-t-usages_driver-docs.txt", "0", ["0"], 0.0, "hbm", 131072, 3),  # one block, no chip id
])
def test_usages_capacity_and_rate(name, device, chips, util, kind, total_mb, rate):
    rs = kv(name)
    assert [r.chip for r in rs] == chips and {r.device for r in rs} == {device}
    r = rs[0]
    assert r.utilization_ratio == util and r.memory_kind == kind
    assert r.memory_total_bytes == total_mb * MIB
    assert r.memory_used_bytes == int(total_mb * MIB * rate / 100)


@pytest.mark.parametrize(("name", "device", "chips", "temps", "power"), [
    ("910b1_info-t-common_arthurchiao-blog.txt", "1", ["0"], [46.0], 93.4),
    ("910_info-t-common_gpustack-test.txt", "0", ["0"], [46.0], 69.0),
    ("310p_info-t-common_gpustack-test.txt", "1", ["0", "1"], [60.0, 59.0], None),  # mcu block skipped
    ("950_info-t-common_driver-docs.txt", "0", ["0"], [65.0], 298.6),
])
def test_common_temperature_power_and_mcu_block_skipped(name, device, chips, temps, power):
    rs = kv(name)
    assert [r.chip for r in rs] == chips and {r.device for r in rs} == {device}
    assert [r.temperature_celsius for r in rs] == temps and rs[0].power_watts == power


def test_power_temp_memory_of_950():
    assert kv("950_info-t-power_driver-docs.txt")[0].power_watts == 296.5
    assert kv("950_info-t-temp_driver-docs.txt")[0].temperature_celsius == 53  # "Temperature (C)" spelling
    (mem,) = kv("950_info-t-memory_driver-docs.txt")
    assert mem.memory_total_bytes == 131072 * MIB and mem.memory_used_bytes is None


def test_health_with_and_without_npu_id():
    (r,) = kv("910a_info-t-health_mindcluster-faultdiag-npu_info_before.txt", npu_id="3", chip_id="0")
    assert (r.device, r.chip, r.health, r.health_label, r.error_codes) == ("3", "0", 0, "ok", ())
    (r,) = kv("950_info-t-health_driver-docs.txt")
    assert (r.device, r.health_label) == ("0", "ok")
    with pytest.raises(NpuSmiParseError, match="names no NPU ID"):
        kv("910a_info-t-health_mindcluster-faultdiag-npu_info_before.txt")


def test_health_alarm_with_error_code():
    (r,) = parse_npu_smi_keyvalue("Health Status : Critical\nError Code : 80E01801 80CB8009\n"
                                  "Error Information : node type=SOC, sensor type=Temperature\n", npu_id="2")
    assert (r.health, r.health_label, r.error_codes) == (3, "critical", ("80E01801", "80CB8009"))


@pytest.mark.parametrize("name", ["910a_info-t-ecc_mindcluster-docs-faultdiag-collecting-logs.txt",
                                  "950_info-t-ecc_driver-docs.txt"])
def test_ecc_counts(name):
    (r,) = kv(name)
    assert r.ecc_errors == {"correctable": 0, "uncorrectable": 0}


def test_ecc_sums_hbm_and_ddr():
    text = npu_smi_text("910a_info-t-ecc_mindcluster-docs-faultdiag-collecting-logs.txt")
    text = text.replace("HBM Double Bit Error Count               : 0", "HBM Double Bit Error Count               : 2")
    text = text.replace("DDR Double Bit Error Count               : 0", "DDR Double Bit Error Count               : 1")
    assert parse_npu_smi_keyvalue(text)[0].ecc_errors["uncorrectable"] == 3


def test_proc_mem_of_950():
    (r,) = kv("950_info-t-proc-mem_driver-docs.txt")
    assert [(p.pid, p.name, p.memory_bytes) for p in r.processes] == [(395864, "power_test", 5118 * MIB)]


def test_merge_lays_keyvalue_fields_over_a_table_reading():
    (table,) = parse_npu_smi_info(npu_smi_text("950_info_driver-docs.txt"), node="n1")
    ecc = kv("950_info-t-ecc_driver-docs.txt")[0]
    health = parse_npu_smi_keyvalue("Health : Warning\nError Code : 81AF8000\n", npu_id="0")[0]
    merged = merge(merge(table, ecc), health)
    assert merged.ecc_errors == {"correctable": 0, "uncorrectable": 0}
    assert (merged.health, merged.error_codes) == (1, ("81AF8000",))
    assert merged.power_watts == table.power_watts and merged.memory_used_bytes == table.memory_used_bytes


@pytest.mark.parametrize("text", ["", "\n\n", "garbage without separators\n"])
def test_no_key_value_lines_is_an_error(text):
    with pytest.raises(NpuSmiParseError):
        parse_npu_smi_keyvalue(text, npu_id="0")


def test_non_numeric_value_is_an_error():
    with pytest.raises(NpuSmiParseError, match="Temperature"):
        parse_npu_smi_keyvalue("NPU ID : 0\nTemperature(C) : hot\n")
