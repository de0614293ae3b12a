"""Render readings as an `npu-smi info` table in the Ascend 910_93 (A3) layout, for emulators.

Widths and spacing copy npu-smi 25.2.0 on an Atlas 800 A3 (fixture
`910_93_info_nputop-test-npusmi25.2.0_mixedprocs.txt`): chips of one NPU are separated by a
`+---+` line, NPUs by `+===+`, and the second chip prints power as `-` (the card's power is on
chip 0). `write_fake_npu_smi` wraps the text in an executable that prints it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path

from monitor.telemetry.model import MIB, Reading

DASH = "+" + "-" * 96 + "+"
HEAD = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
CARD = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"
HEALTH_WORDS = {"ok": "OK", "warning": "Warning", "alarm": "Alarm", "critical": "Critical"}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _mb(value: int | None) -> str:
    return "0" if value is None else str(value // MIB)


def _chip_rows(r: Reading, phy: str) -> list[str]:
    health = HEALTH_WORDS.get(r.health_label, "UNKNOWN")
    power = "-" if r.chip != "0" else _fmt(r.power_watts, ".1f")
    util = _fmt(r.utilization_ratio * 100 if r.utilization_ratio is not None else None, ".0f")
    hbm = f"{_mb(r.memory_used_bytes):<5}/ {_mb(r.memory_total_bytes)}"
    return [
        f"| {r.device:<6}{r.model:<20}| {health:<14}| {power:<12}{_fmt(r.temperature_celsius, '.0f'):<18}"
        f"{'0    / 0':<21}|",
        f"| {r.chip:<6}{phy:<20}| {r.bus_id or 'NA':<14}| {util:<12}{'0    / 0':<18}{hbm:<21}|",
    ]


def _process_rows(cards: dict[str, list[Reading]]) -> list[str]:
    lines = [HEAD, f"| {'NPU     Chip':<26}| {'Process id':<14}| {'Process name':<25}| {'Process memory(MB)':<24}|",
             CARD]
    for device, chips in cards.items():
        rows = [f"| {device:<8}{r.chip:<18}| {p.pid:<14}| {p.name or '':<25}| {_mb(p.memory_bytes):<24}|"
                for r in chips for p in (r.processes or ())]
        lines += rows or [f"| {'No running processes found in NPU ' + device:<95}|"]
        lines.append(CARD)
    return lines


def render_a3(readings: Iterable[Reading], version: str = "25.2.0") -> str:
    cards: dict[str, list[Reading]] = {}
    for r in readings:
        cards.setdefault(r.device, []).append(r)
    banner = f"npu-smi {version}"
    lines = [DASH, f"| {banner:<33}{'Version: ' + version:<62}|", HEAD,
             f"| {'NPU   Name':<26}| {'Health':<14}| {'Power(W)':<12}{'Temp(C)':<18}{'Hugepages-Usage(page)':<21}|",
             f"| {'Chip  Phy-ID':<26}| {'Bus-Id':<14}| {'AICore(%)':<12}{'Memory-Usage(MB)':<18}{'HBM-Usage(MB)':<21}|",
             CARD]
    phy = 0
    for chips in cards.values():
        for i, r in enumerate(chips):
            lines += _chip_rows(r, r.phy_id if r.phy_id is not None else str(phy))
            lines.append(DASH if i < len(chips) - 1 else CARD)
            phy += 1
    return "\n".join(lines + _process_rows(cards)) + "\n"


def write_fake_npu_smi(path: str | Path, text: str, details: dict[str, str] | None = None) -> Path:
    """An executable `npu-smi` that prints `text` for `info`, `details[KIND]` for `info -t KIND ...`
    (any -i/-c), and fails for anything else."""
    path = Path(path)
    cases = "".join(f'  {shlex.quote(kind)}) printf \'%s\' {shlex.quote(out)}; exit 0;;\n'
                    for kind, out in (details or {}).items())
    path.write_text(
        "#!/bin/sh\n# fake npu-smi written by monitor.telemetry.fake_npu_smi\n"
        f'if [ "$1" = "info" ] && [ "$#" -eq 1 ]; then printf \'%s\' {shlex.quote(text)}; exit 0; fi\n'
        f'if [ "$1" = "info" ] && [ "$2" = "-t" ]; then case "$3" in\n{cases}esac; fi\n'
        "echo 'fake npu-smi: only info and the configured info -t kinds are emulated' >&2\nexit 2\n",
        encoding="utf-8")
    os.chmod(path, 0o755)
    return path
