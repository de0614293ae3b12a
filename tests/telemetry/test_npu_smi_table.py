from __future__ import annotations

import re

import pytest

from monitor.telemetry.model import MIB
from monitor.telemetry.npu_smi_table import NpuSmiParseError, layout_name, parse_npu_smi_info

from .conftest import NPU_SMI, npu_smi_text

TABLES = sorted(p.name for p in NPU_SMI.glob("*.txt") if re.match(r"(910_93|[^_]+)_info_", p.name))
NOT_TABLES = sorted(p.name for p in NPU_SMI.glob("*.txt") if p.name not in TABLES)


def test_every_table_fixture_is_known():
    assert len(TABLES) == 12


@pytest.mark.parametrize("name", TABLES)
def test_every_table_fixture_parses_one_reading_per_chip_record(name):
    text = npu_smi_text(name)
    readings = parse_npu_smi_info(text, node="n1")
    # Every row carrying a health word in the Health column opens one chip record.
    records = [ln for ln in text.splitlines()
               if re.match(r"\|[^|]*\|?[^|]*\|\s*(OK|Warning|Alarm|Critical|UNKNOWN)\s*\|", ln.strip())]
    assert len(readings) == len(records)
    assert {r.node for r in readings} == {"n1"}
    for r in readings:
        assert r.vendor == "huawei"
        assert r.memory_total_bytes and r.memory_total_bytes > 0
        assert 0 <= r.utilization_ratio <= 1
        assert r.temperature_celsius is not None


@pytest.mark.parametrize("name", NOT_TABLES)
def test_other_npu_smi_outputs_are_rejected_with_a_clear_error(name):
    with pytest.raises(NpuSmiParseError, match="not an `npu-smi info` table|unknown npu-smi table layout"):
        parse_npu_smi_info(npu_smi_text(name))


def test_a3_two_chips_per_npu_with_phy_ids_and_second_chip_power_missing(a3_text):
    rs = parse_npu_smi_info(a3_text)
    assert layout_name(a3_text) == "a3"
    assert [(r.device, r.chip, r.phy_id) for r in rs] == [("0", "0", "0"), ("0", "1", "1"), ("1", "0", "2"),
                                                          ("1", "1", "3")]
    assert [r.power_watts for r in rs] == [162.8, None, 167.1, None]
    assert rs[3].memory_used_bytes == 10568 * MIB and rs[3].memory_total_bytes == 65536 * MIB
    assert rs[3].memory_kind == "hbm" and rs[0].bus_id == "0000:9C:00.0" and rs[0].model == "Ascend910"
    assert rs[3].processes[0].pid == 990711 and rs[3].processes[0].memory_bytes == 7746 * MIB
    assert rs[3].processes[0].name == "python"
    assert [r.processes for r in rs[:3]] == [(), (), ()]


def test_a3_under_load_with_blank_process_names_and_shadow_entries():
    rs = parse_npu_smi_info(npu_smi_text("910_93_info_vllm-ascend-issue3548-16chips-load_npusmi25.3.rc1.txt"))
    assert len(rs) == 16 and [r.phy_id for r in rs] == [str(i) for i in range(16)]
    assert rs[0].utilization_ratio == pytest.approx(0.08) and rs[0].memory_used_bytes == 51166 * MIB
    assert [p.pid for p in rs[0].processes] == [4071417, 4071418, 4071419, 4071420]
    assert all(p.name is None for p in rs[0].processes)
    assert [p.pid for p in rs[1].processes] == [4071418] and rs[1].processes[0].memory_bytes == 49681 * MIB
    assert rs[4].processes == ()


def test_910b2c_trailing_spaces_and_process_name():
    rs = parse_npu_smi_info(npu_smi_text("910b2c_info_nputop-test-npusmi23.0.2.1_procs.txt"))
    assert layout_name(npu_smi_text("910b2c_info_nputop-test-npusmi23.0.2.1_procs.txt")) == "910"
    assert [r.model for r in rs] == ["910B2C", "910B2C"]
    assert rs[0].processes[0].name == "python3.8" and rs[0].processes[0].memory_bytes == 17400 * MIB
    assert rs[1].processes == () and rs[0].power_watts == 88.6 and rs[0].temperature_celsius == 51


def test_910b1_author_elision_is_skipped_and_missing_process_table_means_unknown():
    rs = parse_npu_smi_info(npu_smi_text("910b1_info_arthurchiao-blog_npusmi23.0.rc2_elided.txt"))
    assert [r.device for r in rs] == ["0", "1", "7"]
    assert all(r.processes is None for r in rs)


def test_910a_narrow_first_column_hbm_zero_used():
    rs = parse_npu_smi_info(npu_smi_text("910a_info_gpustack-atlas800-9010-npusmi22.0.3.1.txt"))
    assert len(rs) == 8 and rs[3].power_watts == 191.7
    assert rs[0].memory_used_bytes == 0 and rs[0].memory_total_bytes == 32768 * MIB and rs[0].memory_kind == "hbm"


def test_910_gen1_named_910b_reports_hbm_not_ddr():
    rs = parse_npu_smi_info(npu_smi_text("910-gen1_info_shirwy-vllm-ascend-910a-readme_name910B_ddr.txt"))
    assert rs[0].model == "910B" and rs[0].memory_used_bytes == 1365 * MIB and rs[0].memory_kind == "hbm"


@pytest.mark.parametrize(("name", "device", "chips", "used_mb", "total_mb"), [
    ("310_info_gpustack-atlas800-3000-npusmi20.2.0.txt", "215", ["0", "1", "2", "3"], 2703, 8192),
    ("310_info_gpustack-atlas800-3000-npusmi21.0.4.txt", "6", ["0", "1", "2", "3"], 2703, 8192),
    ("310_info_hpckurt-Ascend-npu-drivers-readme_atlas300-3000_noproc.txt", "0", ["0"], 577, 7759),
    ("310p3_info_ascend-pytorch-issue94-duo_npusmi24.1.rc2.txt", "1792", ["0", "1"], 1821, 44280),
])
def test_310_family_ddr_only_layouts(name, device, chips, used_mb, total_mb):
    rs = parse_npu_smi_info(npu_smi_text(name))
    assert layout_name(npu_smi_text(name)) == "310"
    assert {r.device for r in rs} == {device} and [r.chip for r in rs] == chips
    assert rs[0].memory_kind == "ddr" and rs[0].memory_used_bytes == used_mb * MIB
    assert rs[0].memory_total_bytes == total_mb * MIB


def test_310p3_duo_power_na_is_missing_and_no_processes():
    rs = parse_npu_smi_info(npu_smi_text("310p3_info_ascend-pytorch-issue94-duo_npusmi24.1.rc2.txt"))
    assert [r.power_watts for r in rs] == [None, None] and [r.processes for r in rs] == [(), ()]


def test_310b4_alarm_health_and_bus_id_na():
    (r,) = parse_npu_smi_info(npu_smi_text("310b4_info_nputop-test-npusmi23.0.0_alarm.txt"))
    assert (r.health, r.health_label) == (2, "alarm")
    assert r.bus_id is None and r.power_watts == 0.0 and r.model == "310B4"


def test_950_extra_column_and_npu_util():
    text = npu_smi_text("950_info_driver-docs.txt")
    (r,) = parse_npu_smi_info(text)
    assert layout_name(text) == "950"
    assert (r.device, r.chip, r.power_watts, r.temperature_celsius) == ("0", "0", 204.4, 56)
    assert r.memory_used_bytes == 4439 * MIB and r.memory_total_bytes == 86016 * MIB and r.processes == ()


def test_wider_columns_of_npu_smi_26_parse_the_same(a3_text):
    # npu-smi 26.0 widened the third column (98 -> 116 chars); rows are split on '|', not offsets.
    def widen(line: str) -> str:
        if line.startswith("|") and line.count("|") == 4:
            a, b, c, _ = line.split("|")[1:]
            return f"|{a}|{b}|{'   '.join(c.split('  '))}{' ' * 18}|"
        return line[:-1] + ("-" * 18 if "-" in line[-2:] else "=" * 18) + "+" if line.startswith("+") else line
    wide = "\n".join(widen(ln) for ln in a3_text.splitlines())
    assert wide != a3_text
    assert parse_npu_smi_info(wide) == parse_npu_smi_info(a3_text)


# 7: header only; 9: NPU 0 chip 0 then the intra-card border; 22: inside the process table.
# (A cut exactly at a `+===+` card border looks like a smaller complete table and is not detectable.)
@pytest.mark.parametrize("cut", [7, 9, 22])
def test_truncated_tables_are_errors(a3_text, cut):
    lines = a3_text.splitlines()
    with pytest.raises(NpuSmiParseError, match="truncated|cut off"):
        parse_npu_smi_info("\n".join(lines[:cut]))


def test_line_cut_mid_row_is_an_error(a3_text):
    with pytest.raises(NpuSmiParseError, match="line 8: truncated table row"):
        parse_npu_smi_info(a3_text[: a3_text.index("3133")])


@pytest.mark.parametrize("text", ["", "Segmentation fault\n", "dcmi module initialize failed. ret is -8005\n",
                                  "\x00\x01garbage|||\n"])
def test_garbage_is_an_error_not_a_crash(text):
    with pytest.raises(NpuSmiParseError):
        parse_npu_smi_info(text)


def test_unknown_layout_names_the_header(a3_text):
    with pytest.raises(NpuSmiParseError, match="unknown npu-smi table layout"):
        parse_npu_smi_info(a3_text.replace("AICore(%)", "Cube(%)  "))


def test_rows_that_do_not_fit_the_header_are_errors(a3_text):
    with pytest.raises(NpuSmiParseError, match="Temp\\(C\\) is 'hot'"):
        parse_npu_smi_info(a3_text.replace("162.8       37 ", "162.8       hot"))
    with pytest.raises(NpuSmiParseError, match="columns"):
        parse_npu_smi_info(a3_text.replace("| 0     0                   | 0000:9C:00.0  |",
                                           "| 0     0                   | 0000:9C:00.0  | x |"))


def test_header_without_chips_is_an_error(a3_text):
    head = "\n".join(a3_text.splitlines()[:6])
    with pytest.raises(NpuSmiParseError, match="no chip rows"):
        parse_npu_smi_info(head)
