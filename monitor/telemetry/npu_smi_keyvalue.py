"""Parse `npu-smi info -t usages|common|power|temp|memory|health|ecc|proc-mem -i N [-c M]`.

The output is `Key<spaces>: value` lines, indented by a tab, by spaces or not at all, in
blank-line-separated blocks: a card header (`NPU ID`, `Chip Count`), one block per chip (with
`Chip ID` at its start for `common` and at its end for `usages`) and, for `common`, a
`Chip Name : mcu` board block that is skipped (board sensor, not a chip). Ascend 950 prints one
block without chip ids. Each chip becomes a partial `Reading` (only what the command reports);
`model.merge` lays it over a table reading.
"""

from __future__ import annotations

import re

from monitor.telemetry.model import MIB, Process, Reading, parse_health, ratio_from_percent
from monitor.telemetry.npu_smi_table import MISSING, NpuSmiParseError

_PROC = re.compile(r"Process id:\s*(\d+)\s+Process name:\s*(.*?)\s+Process memory\(MB\):\s*(\d+)")


def parse_blocks(text: str) -> list[dict[str, str]]:
    """Blank-line-separated blocks of `key -> value` (a `_processes` entry for proc-mem lines)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines() + [""]:
        line = line.strip()
        if not line:
            if current:
                blocks.append(current)
            current = {}
            continue
        proc = _PROC.search(line)
        if proc:
            current["_processes"] = current.get("_processes", "") + f"{proc[1]}\t{proc[2]}\t{proc[3]}\n"
        elif ":" in line:
            key, value = line.split(":", 1)
            current[key.strip()] = value.strip()
    if not blocks:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        raise NpuSmiParseError(f"no 'Key : value' lines in npu-smi -t output (first line {first[:60]!r})")
    return blocks


def _num(block: dict[str, str], *keys: str) -> float | None:
    for key in keys:
        value = block.get(key)
        if value is None or value in MISSING:
            continue
        try:
            return float(value)
        except ValueError:
            raise NpuSmiParseError(f"{key} is {value!r}, not a number") from None
    return None


def _memory(block: dict[str, str]) -> dict:
    # `usages` gives capacity and a usage percentage, not MB used: used is rate x capacity.
    for kind in ("HBM", "DDR"):
        cap = _num(block, f"{kind} Capacity(MB)")
        if cap:
            rate = _num(block, f"{kind} Usage Rate(%)")
            total = int(cap * MIB)
            return {"memory_total_bytes": total, "memory_kind": kind.lower(),
                    "memory_used_bytes": int(total * rate / 100) if rate is not None else None}
    return {}


def _ecc(block: dict[str, str]) -> dict[str, int]:
    ecc: dict[str, int] = {}
    for kind, bit in (("correctable", "Single"), ("uncorrectable", "Double")):
        counts = [_num(block, f"{mem} {bit} Bit Error Count") for mem in ("HBM", "DDR")]
        if any(c is not None for c in counts):
            ecc[kind] = int(sum(c for c in counts if c is not None))
    return ecc


def _fields(block: dict[str, str]) -> dict:
    out: dict = _memory(block)
    out["utilization_ratio"] = ratio_from_percent(_num(block, "NPU Utilization(%)", "Aicore Usage Rate(%)"))
    out["temperature_celsius"] = _num(block, "Temperature(C)", "Temperature (C)")
    out["power_watts"] = _num(block, "NPU Real-time Power(W)", "Power Dissipation(W)")
    health_text = block.get("Health Status", block.get("Health"))
    if health_text is not None:
        out["health"], out["health_label"] = parse_health(health_text)
    code = block.get("Error Code", "NA")
    if code not in MISSING:
        out["error_codes"] = tuple(c for c in re.split(r"[\s,]+", code) if c)
    out["ecc_errors"] = _ecc(block)
    if "_processes" in block:
        out["processes"] = tuple(
            Process(pid=int(pid), name=name or None, memory_bytes=int(mb) * MIB)
            for pid, name, mb in (ln.split("\t") for ln in block["_processes"].splitlines()))
    return {k: v for k, v in out.items() if v is not None}


def parse_npu_smi_keyvalue(text: str, *, node: str = "localhost", npu_id: str | None = None,
                           chip_id: str | None = None) -> list[Reading]:
    """Partial readings, one per chip, from one `npu-smi info -t ...` output.

    `npu_id`/`chip_id` are the `-i`/`-c` the command was run with; needed when the output does
    not print them (e.g. `-t health -i 0 -c 0` on 910).
    """
    blocks = parse_blocks(text)
    card: dict[str, str] = {}
    chips: list[dict[str, str]] = []
    for block in blocks:
        if block.get("Chip Name", "").lower() == "mcu":
            continue
        if "Chip ID" in block:
            chips.append(block)
        else:
            card.update(block)
    device = card.get("NPU ID") or next((b["NPU ID"] for b in chips if "NPU ID" in b), None) or npu_id
    if device is None:
        raise NpuSmiParseError("npu-smi -t output names no NPU ID; pass npu_id (the -i argument)")
    if not chips:
        chips = [{**card, "Chip ID": chip_id or "0"}]
    return [Reading(node=node, device=device, chip=b["Chip ID"], vendor="huawei", **_fields(b)) for b in chips]
