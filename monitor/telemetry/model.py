"""The one vendor-neutral per-chip record every collector produces.

Units are base units (ratio 0..1, bytes, celsius, watts) so export never converts. `None` means
"the source did not report it" (or reported a failure sentinel such as npu-exporter's -1): it is
never exported as a value, only left out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

MIB = 1024 * 1024  # npu-smi "MB" and DCGM "MiB" are both 2**20 bytes (65536 MB HBM = 64 GiB)
# nvmlClocksEventReasonSwThermalSlowdown | ...HwThermalSlowdown (nvml.h; the same bits under their older
# ...ThrottleReason... names, and in DCGM's clock event reasons field): clocks lowered for the temperature.
THERMAL_REASONS = 0x20 | 0x40

# Health scale of DCMI `dcmi_get_device_health` (0 normal, 1 minor, 2 major, 3 critical), which
# npu-smi prints as OK / Warning / Alarm / Critical.
HEALTH_LEVELS: dict[str, int] = {"ok": 0, "warning": 1, "alarm": 2, "critical": 3}
# npu-exporter collapses health to 1/0/-1; "unhealthy" (DCMI health != 0) has no finer grade.
UNHEALTHY = ("unhealthy", 2)
UNKNOWN = "unknown"

Vendor = Literal["huawei", "nvidia"]
MemoryKind = Literal["hbm", "ddr", "fb"]


def parse_health(text: str | None) -> tuple[int | None, str]:
    """`OK` -> (0, "ok"); `UNKNOWN`, `NA`, `-`, empty or unseen words -> (None, "unknown")."""
    word = (text or "").strip().lower()
    if word in HEALTH_LEVELS:
        return HEALTH_LEVELS[word], word
    return None, UNKNOWN


@dataclass(frozen=True)
class Process:
    pid: int
    name: str | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Reading:
    """One chip (an Ascend NPU chip or an NVIDIA GPU) at one moment.

    `device` is what the operator uses to address the card: npu-smi's NPU id (`-i`), the
    npu-exporter `id` label (a chip *physical* id), or the NVIDIA GPU index. `chip` is the chip
    within that card (`-c`; "0" when the card has one chip or the source does not say).
    """

    node: str
    device: str
    chip: str
    vendor: Vendor
    model: str = "unknown"
    utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_kind: MemoryKind | None = None
    temperature_celsius: float | None = None
    # The chip's own slowdown (clock throttle) temperature, where the source reports one: NVML's
    # SLOWDOWN threshold, DCGM_FI_DEV_SLOWDOWN_TEMP. npu-smi and npu-exporter report none.
    temperature_slowdown_celsius: float | None = None
    # The clocks are held down for heat now (NVML/DCGM clock event reasons, SW or HW thermal slowdown).
    thermal_throttling: bool | None = None
    power_watts: float | None = None
    health: int | None = None
    health_label: str = UNKNOWN
    # Error counters by kind ("correctable", "uncorrectable"); only kinds the source reports.
    ecc_errors: dict[str, int] = field(default_factory=dict)
    # Link name -> up; only links the source reports.
    links: dict[str, bool] = field(default_factory=dict)
    processes: tuple[Process, ...] | None = None
    error_codes: tuple[str, ...] = ()
    bus_id: str | None = None
    uuid: str | None = None
    phy_id: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.node, self.device, self.chip)

    @property
    def memory_ratio(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes


def merge(base: Reading, extra: Reading) -> Reading:
    """`base` with every field `extra` actually reports (non-None, non-empty) laid over it."""
    changes = {}
    for f in dataclasses.fields(Reading):
        if f.name in ("node", "device", "chip", "vendor"):
            continue
        value = getattr(extra, f.name)
        if value is None or value == () or value == {} or (f.name == "model" and value == "unknown"):
            continue
        if f.name == "health_label" and value == UNKNOWN and extra.health is None:
            continue
        if f.name in ("ecc_errors", "links"):
            value = {**getattr(base, f.name), **value}
        changes[f.name] = value
    return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class TelemetryResult:
    """What one collection of one target produced. `up=False` always carries an `error`."""

    source: str
    node: str
    readings: list[Reading] = field(default_factory=list)
    up: bool = True
    error: str | None = None
    duration_seconds: float = 0.0
    target: str | None = None
    # Up, but something was missing (an `npu-smi info -t` detail that failed): one line each.
    warnings: tuple[str, ...] = ()


def memory_pair(hbm_used: float | None, hbm_total: float | None, ddr_used: float | None, ddr_total: float | None
                ) -> tuple[float | None, float | None, str | None]:
    """(used, total, kind): HBM when the chip has it; 310-class chips (and A2's all-zero DDR pair) use DDR."""
    if hbm_total:
        return hbm_used, hbm_total, "hbm"
    if ddr_total:
        return ddr_used, ddr_total, "ddr"
    return None, None, None


def ratio_from_percent(value: float | None) -> float | None:
    if value is None or value < 0:
        return None
    return min(value, 100.0) / 100.0
