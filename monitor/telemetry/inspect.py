"""`slo-monitor inspect --kind npu-smi FILE --json`: what the parsers make of an npu-smi capture."""

from __future__ import annotations

from typing import Any

from monitor.telemetry.model import Reading
from monitor.telemetry.npu_smi_keyvalue import parse_npu_smi_keyvalue
from monitor.telemetry.npu_smi_table import parse_npu_smi_info


def chip_dict(r: Reading) -> dict[str, Any]:
    hbm = r.memory_kind == "hbm"
    return {
        "npu_id": r.device,
        "chip_id": r.chip,
        "phy_id": r.phy_id,
        "name": r.model,
        "health": r.health_label,
        "health_level": r.health,
        "power_watts": r.power_watts,
        "temperature_celsius": r.temperature_celsius,
        "utilization_ratio": r.utilization_ratio,
        "hbm_used_bytes": r.memory_used_bytes if hbm else None,
        "hbm_total_bytes": r.memory_total_bytes if hbm else None,
        "memory_kind": r.memory_kind,
        "memory_used_bytes": r.memory_used_bytes,
        "memory_total_bytes": r.memory_total_bytes,
        "bus_id": r.bus_id,
        "ecc_errors": dict(r.ecc_errors),
        "error_codes": list(r.error_codes),
        "processes": None if r.processes is None else [
            {"pid": p.pid, "name": p.name, "memory_bytes": p.memory_bytes} for p in r.processes],
    }


def inspect_npu_smi(text: str) -> list[dict[str, Any]]:
    """Chips of an `npu-smi info` table, or of `npu-smi info -t ...` key/value output.

    Raises `NpuSmiParseError` (a ValueError) with the offending line for anything else.
    """
    is_table = any(line.strip().startswith("|") for line in text.splitlines())
    readings = parse_npu_smi_info(text) if is_table else parse_npu_smi_keyvalue(text, npu_id="0")
    return [chip_dict(r) for r in readings]
