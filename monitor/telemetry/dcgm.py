"""NVIDIA dcgm-exporter (`http://<node>:9400/metrics`, `DCGM_FI_DEV_*`).

One reading per `gpu` label (per `GPU_I_ID` MIG instance when present, as `chip`). dcgm-exporter
renamed its `Hostname` label to `hostname` (NVIDIA/dcgm-exporter #655); both are read. DCGM
writes "blank" sentinels (>= 0x7ffffff0, e.g. 9223372036854775794 for an unsupported memory
temperature) instead of leaving a field out; those count as missing. Health, which DCGM's default
counters do not report as such, is derived as for NVML: row-remap failure -> critical,
uncorrectable (double-bit) volatile ECC -> alarm, else ok. The thermal fields are not in dcgm-exporter's
default counters; where a site's CSV adds them, `DCGM_FI_DEV_SLOWDOWN_TEMP` is the GPU's slowdown temperature
and `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` (`..._CLOCK_THROTTLE_REASONS` before DCGM 3.3) the NVML bitmask.
"""

from __future__ import annotations

from collections import defaultdict

from monitor.conventions.names import DCGM_PREFIX
from monitor.telemetry.exposition import exporter_samples
from monitor.telemetry.model import MIB, THERMAL_REASONS, Reading, ratio_from_percent

BLANK = 0x7FFFFFF0  # DCGM_FT_INT32_BLANK; the int64/fp64 blanks are larger still
F = DCGM_PREFIX


def _ok(value: float | None) -> float | None:
    return None if value is None or value < 0 or value >= BLANK else value


def _throttling(v: dict[str, float]) -> bool | None:
    reasons = _ok(v.get(f"{F}CLOCKS_EVENT_REASONS", v.get(f"{F}CLOCK_THROTTLE_REASONS")))
    return None if reasons is None else bool(int(reasons) & THERMAL_REASONS)


def _gpu(v: dict[str, float], meta: dict[str, str], node: str) -> Reading:
    used, free, reserved = _ok(v.get(f"{F}FB_USED")), _ok(v.get(f"{F}FB_FREE")), _ok(v.get(f"{F}FB_RESERVED"))
    total = used + free + (reserved or 0) if used is not None and free is not None else None
    ecc = {kind: int(x) for kind, key in (("correctable", "SBE"), ("uncorrectable", "DBE"))
           if (x := _ok(v.get(f"{F}ECC_{key}_VOL_TOTAL"))) is not None}
    if not v:
        health, label = None, "unknown"
    elif v.get(f"{F}ROW_REMAP_FAILURE", 0) >= 1:
        health, label = 3, "critical"
    elif ecc.get("uncorrectable"):
        health, label = 2, "alarm"
    else:
        health, label = 0, "ok"
    return Reading(
        node=node, device=meta.get("gpu", "0"), chip=meta.get("GPU_I_ID") or "0", vendor="nvidia",
        model=meta.get("modelName") or "unknown",
        utilization_ratio=ratio_from_percent(_ok(v.get(f"{F}GPU_UTIL"))),
        memory_used_bytes=int(used * MIB) if used is not None else None,
        memory_total_bytes=int(total * MIB) if total is not None else None,
        memory_kind="fb" if used is not None else None,
        temperature_celsius=_ok(v.get(f"{F}GPU_TEMP")),
        temperature_slowdown_celsius=_ok(v.get(f"{F}SLOWDOWN_TEMP")) or None,
        thermal_throttling=_throttling(v),
        power_watts=_ok(v.get(f"{F}POWER_USAGE")),
        health=health, health_label=label, ecc_errors=ecc,
        bus_id=meta.get("pci_bus_id") or None, uuid=meta.get("UUID") or None,
    )


def parse_dcgm(text: str, node: str | None = None) -> list[Reading]:
    """`node` (the configured one) wins over the exporter's own `hostname`/`Hostname` label."""
    values: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    meta: dict[tuple[str, str], dict[str, str]] = {}
    for s in exporter_samples(text):
        if not s.name.startswith(F) or "gpu" not in s.labels:
            continue  # NVSwitch/NVLink entity series use other label sets
        key = (s.labels["gpu"], s.labels.get("GPU_I_ID", ""))
        meta.setdefault(key, {}).update(s.labels)
        values[key][s.name] = s.value
    out = []
    for key in sorted(values, key=lambda k: (len(k[0]), k)):
        m = meta[key]
        host = node or m.get("hostname") or m.get("Hostname") or "unknown"
        out.append(_gpu(values[key], m, host))
    return out
