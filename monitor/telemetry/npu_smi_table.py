"""Parse the `npu-smi info` table of every known Ascend generation into `Reading`s.

Column widths differ between releases (80 to 116 characters) and slash pairs are spaced
inconsistently (`10568/ 65536`, `0    / 0`), so rows are split on `|` and whitespace, never by
column offset. Each chip is a two-row record; what the rows mean comes from the two header rows:

* 310 / 310P / 310B  `| Chip    Device | Bus-Id | AICore(%) Memory-Usage(MB) |`  (DDR only)
* 910 gen-1 / 910B   `| Chip           | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB) |`
* 910_93 (A3)        `| Chip  Phy-ID   | Bus-Id | ... |`, two chips per NPU, chip 1 power `-`
* 950                `| NPU ID | Name | Health | ...` with an extra `|` column, `NPU Util(%)`

Anything else (no header, rows that do not fit the header, a table cut off) raises
`NpuSmiParseError` with a message naming the line, so a collector reports it instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from monitor.telemetry.model import MIB, Process, Reading, memory_pair, parse_health, ratio_from_percent

MISSING = frozenset({"NA", "N/A", "-", "--", ""})
_SLASH = re.compile(r"\s*/\s*")


class NpuSmiParseError(ValueError):
    """npu-smi output this parser does not understand (unknown layout, truncated, garbage)."""


@dataclass(frozen=True)
class Layout:
    row1_cells: int
    row2_cells: int
    health_at: int  # cell index of Health in row 1
    bus_at: int  # cell index of Bus-Id in row 2
    second_id: str | None  # "phy" (A3 Phy-ID), "device" (310 Device) or None
    has_hbm: bool
    name: str


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip()[1:-1].split("|")]


def _num(token: str, what: str, lineno: int) -> float | None:
    if token in MISSING:
        return None
    try:
        return float(token)
    except ValueError:
        raise NpuSmiParseError(f"line {lineno}: {what} is {token!r}, not a number") from None


def _pair(token: str, what: str, lineno: int) -> tuple[float | None, float | None]:
    if "/" not in token:
        raise NpuSmiParseError(f"line {lineno}: {what} is {token!r}, expected used / total")
    used, total = token.split("/", 1)
    return _num(used, what, lineno), _num(total, what, lineno)


def _tokens(text: str) -> list[str]:
    return _SLASH.sub("/", text).split()


def _layout(h1: list[str], h2: list[str], lineno: int) -> Layout:
    health_at = next((i for i, c in enumerate(h1) if c.startswith("Health")), None)
    bus_at = next((i for i, c in enumerate(h2) if c.startswith("Bus-Id")), None)
    tail = " ".join(h2[bus_at + 1:]) if bus_at is not None else ""
    util_ok = "AICore(%)" in tail or "NPU Util(%)" in tail
    if health_at is None or bus_at is None or not util_ok or "Memory-Usage(MB)" not in tail:
        raise NpuSmiParseError(
            f"line {lineno}: unknown npu-smi table layout (header {' | '.join(h1)} / {' | '.join(h2)})")
    first = " ".join(h2[:bus_at])
    second = "phy" if "Phy-ID" in first else "device" if "Device" in first else None
    has_hbm = "HBM-Usage(MB)" in tail
    name = "950" if "NPU Util(%)" in tail else "a3" if second == "phy" else "910" if has_hbm else "310"
    return Layout(len(h1), len(h2), health_at, bus_at, second, has_hbm, name)


def _chip(layout: Layout, r1: list[str], r2: list[str], n1: int, n2: int, node: str) -> Reading:
    if len(r1) != layout.row1_cells or len(r2) != layout.row2_cells:
        raise NpuSmiParseError(f"lines {n1}-{n2}: chip record has {len(r1)}/{len(r2)} columns, "
                               f"header has {layout.row1_cells}/{layout.row2_cells}")
    ident = " ".join(r1[:layout.health_at]).split()
    if not ident or not ident[0].isdigit():
        raise NpuSmiParseError(f"line {n1}: expected '<NPU id> <name>', got {' | '.join(r1)!r}")
    health, label = parse_health(r1[layout.health_at])
    m1 = _tokens(" ".join(r1[layout.health_at + 1:]))
    if len(m1) < 2:
        raise NpuSmiParseError(f"line {n1}: expected 'Power(W) Temp(C) ...', got {' | '.join(r1)!r}")
    ids = " ".join(r2[:layout.bus_at]).split()
    if ids and not ids[0].isdigit():
        raise NpuSmiParseError(f"line {n2}: expected '<chip id> ...', got {' | '.join(r2)!r}")
    m2 = _tokens(" ".join(r2[layout.bus_at + 1:]))
    want = 3 if layout.has_hbm else 2
    if len(m2) < want:
        raise NpuSmiParseError(f"line {n2}: expected {want} values after Bus-Id, got {' | '.join(r2)!r}")
    ddr_used, ddr_total = _pair(m2[1], "Memory-Usage(MB)", n2)
    hbm_used, hbm_total = _pair(m2[2], "HBM-Usage(MB)", n2) if layout.has_hbm else (None, None)
    used, total, kind = memory_pair(hbm_used, hbm_total, ddr_used, ddr_total)
    bus = r2[layout.bus_at]
    return Reading(
        node=node,
        device=ident[0],
        chip=ids[0] if ids else "0",
        vendor="huawei",
        model=" ".join(ident[1:]) or "unknown",
        utilization_ratio=ratio_from_percent(_num(m2[0], "AICore(%)", n2)),
        memory_used_bytes=int(used * MIB) if used is not None else None,
        memory_total_bytes=int(total * MIB) if total is not None else None,
        memory_kind=kind,  # type: ignore[arg-type]
        temperature_celsius=_num(m1[1], "Temp(C)", n1),
        power_watts=_num(m1[0], "Power(W)", n1),
        health=health,
        health_label=label,
        bus_id=None if bus in MISSING else bus,
        phy_id=ids[1] if layout.second_id == "phy" and len(ids) > 1 else None,
    )


def _process(cells: list[str], lineno: int) -> tuple[tuple[str, str], Process] | None:
    if len(cells) == 1 and cells[0].startswith("No running processes found"):
        return None
    if len(cells) != 4:
        raise NpuSmiParseError(f"line {lineno}: process row has {len(cells)} columns, expected 4")
    ids = cells[0].split()
    if not ids or not ids[0].isdigit() or not cells[1].isdigit():
        raise NpuSmiParseError(f"line {lineno}: expected '<NPU> <chip> | <pid> | ...', got {' | '.join(cells)!r}")
    mem = _num(cells[3], "Process memory(MB)", lineno)
    proc = Process(pid=int(cells[1]), name=cells[2] or None, memory_bytes=int(mem * MIB) if mem is not None else None)
    return (ids[0], ids[1] if len(ids) > 1 else "0"), proc


def parse_npu_smi_info(text: str, node: str = "localhost") -> list[Reading]:
    """All chips of one `npu-smi info` output, in table order, with their processes attached."""
    lines = [(n, ln.strip()) for n, ln in enumerate(text.splitlines(), 1)]
    table = [(n, ln) for n, ln in lines if ln.startswith(("|", "+"))]
    for n, ln in table:
        if ln.startswith("|") and not ln.endswith("|") or ln.startswith("+") and not ln.endswith("+"):
            raise NpuSmiParseError(f"line {n}: truncated table row {ln[:60]!r}")
    rows = [(n, _cells(ln)) for n, ln in table if ln.startswith("|")]
    start = next((i for i, (_, c) in enumerate(rows) if any(x.startswith("Health") for x in c)
                  and "Name" in " ".join(c)), None)
    if start is None or start + 1 >= len(rows):
        first = next((ln for _, ln in lines if ln), "")
        raise NpuSmiParseError(f"not an `npu-smi info` table: no 'NPU  Name | Health' header (first line {first[:60]!r})")
    layout = _layout(rows[start][1], rows[start + 1][1], rows[start][0])

    readings: list[Reading] = []
    procs: dict[tuple[str, str], list[Process]] | None = None
    pending: tuple[int, list[str]] | None = None
    for n, cells in rows[start + 2:]:
        if procs is not None:
            got = _process(cells, n)
            if got is not None:
                procs.setdefault(got[0], []).append(got[1])
        elif any(c.startswith("Process id") for c in cells):
            if pending is not None:
                raise NpuSmiParseError(f"line {pending[0]}: chip record cut off before the process table")
            procs = {}
        elif pending is None:
            pending = (n, cells)
        else:
            readings.append(_chip(layout, pending[1], cells, pending[0], n, node))
            pending = None
    if pending is not None:
        raise NpuSmiParseError(f"line {pending[0]}: truncated table, chip record has no second row")
    last_n, last = table[-1]
    # A full-width `+----+` (no column joints) only separates the chips of one A3 card.
    if last.startswith("|") or (last.count("+") == 2 and readings):
        raise NpuSmiParseError(f"line {last_n}: truncated table, no closing border")
    if not readings:
        raise NpuSmiParseError("npu-smi table has a header but no chip rows")
    if procs is not None:
        readings = [replace(r, processes=tuple(procs.get((r.device, r.chip), ()))) for r in readings]
    return readings


def layout_name(text: str) -> str:
    """'310', '910', 'a3' or '950' (for diagnostics and `inspect`); raises like the parser."""
    rows = [_cells(ln.strip()) for ln in text.splitlines() if ln.strip().startswith("|") and ln.strip().endswith("|")]
    for i, c in enumerate(rows[:-1]):
        if any(x.startswith("Health") for x in c):
            return _layout(c, rows[i + 1], 0).name
    raise NpuSmiParseError("not an `npu-smi info` table")
