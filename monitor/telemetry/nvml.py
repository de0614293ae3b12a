"""NVIDIA GPUs through NVML (`nvidia-ml-py`, module `pynvml`), imported lazily: it is optional.

Every per-field call is guarded on its own because NVML answers NOT_SUPPORTED per field and per
SKU (ECC on consumer boards, NVLink on PCIe cards, process lists in some containers); one
unsupported field must not cost the chip. NVML has no health verdict, so one is derived from what
it does report (see `_health`).
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from monitor.telemetry.model import THERMAL_REASONS, Process, Reading, ratio_from_percent


class NvmlUnavailable(RuntimeError):
    """`nvidia-ml-py` is not installed or NVML (libnvidia-ml.so) cannot be initialised."""


def load_pynvml() -> ModuleType:
    try:
        import pynvml  # noqa: PLC0415 - optional dependency, imported only when an nvml target exists
    except ImportError as err:
        raise NvmlUnavailable("nvidia-ml-py is not installed (pip install 'sglang-slo-monitor[nvml]')") from err
    return pynvml


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _call(nv: ModuleType, fn: str, *args: Any) -> Any:
    """The call's result, or None when NVML says the field is unsupported/unavailable."""
    try:
        return getattr(nv, fn)(*args)
    except nv.NVMLError:
        return None
    except (AttributeError, TypeError):
        # An older nvidia-ml-py without this function or with another signature.
        return None


def _health(remapped: Any, uncorrectable: int | None) -> tuple[int, str]:
    """Row-remap failure -> critical, uncorrectable ECC since driver load -> alarm,
    remap pending (needs a GPU reset) -> warning, else ok. Mirrors the NVIDIA exporter rule set
    (uncorrectable ECC > 0, row-remap failure/pending) summarised in the telemetry reference §5.2."""
    # nvmlDeviceGetRemappedRows -> (corrRows, uncRows, isPending, failureOccurred)
    if remapped is not None and len(remapped) >= 4 and remapped[3]:
        return 3, "critical"
    if uncorrectable:
        return 2, "alarm"
    if remapped is not None and len(remapped) >= 4 and remapped[2]:
        return 1, "warning"
    return 0, "ok"


def _processes(nv: ModuleType, handle: Any) -> tuple[Process, ...] | None:
    procs = _call(nv, "nvmlDeviceGetComputeRunningProcesses", handle)
    if procs is None:
        return None
    out = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        name = _call(nv, "nvmlSystemGetProcessName", p.pid)
        out.append(Process(pid=int(p.pid), name=_text(name) if name else None,
                           memory_bytes=int(used) if isinstance(used, int) and used >= 0 else None))
    return tuple(out)


def _links(nv: ModuleType, handle: Any) -> dict[str, bool]:
    links: dict[str, bool] = {}
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        state = _call(nv, "nvmlDeviceGetNvLinkState", handle, link)
        if state is not None:
            links[f"nvlink{link}"] = bool(state)
    return links


NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1  # nvmlTemperatureThresholds_t


def _thermal(nv: ModuleType, handle: Any) -> tuple[float | None, bool | None]:
    """(the slowdown temperature, throttling for heat now): NVML's own limit for this GPU, and its current
    clock event reasons (nvmlDeviceGetCurrentClocksEventReasons, ...ThrottleReasons before driver 535)."""
    limit = _call(nv, "nvmlDeviceGetTemperatureThreshold", handle,
                  getattr(nv, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))
    reasons = _call(nv, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = _call(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    return (float(limit) if isinstance(limit, int) and limit > 0 else None,
            bool(reasons & THERMAL_REASONS) if isinstance(reasons, int) else None)


def read_device(nv: ModuleType, index: int, node: str) -> Reading:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    name = _call(nv, "nvmlDeviceGetName", h)
    uuid = _call(nv, "nvmlDeviceGetUUID", h)
    pci = _call(nv, "nvmlDeviceGetPciInfo", h)
    util = _call(nv, "nvmlDeviceGetUtilizationRates", h)
    mem = _call(nv, "nvmlDeviceGetMemoryInfo", h)
    temp = _call(nv, "nvmlDeviceGetTemperature", h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
    power_mw = _call(nv, "nvmlDeviceGetPowerUsage", h)
    corrected = _call(nv, "nvmlDeviceGetTotalEccErrors", h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)
    uncorrected = _call(nv, "nvmlDeviceGetTotalEccErrors", h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                        nv.NVML_VOLATILE_ECC)
    remapped = _call(nv, "nvmlDeviceGetRemappedRows", h)
    ecc = {k: int(v) for k, v in (("correctable", corrected), ("uncorrectable", uncorrected)) if v is not None}
    health, label = _health(remapped, ecc.get("uncorrectable"))
    slowdown, throttling = _thermal(nv, h)
    return Reading(
        node=node,
        device=str(index),
        chip="0",
        vendor="nvidia",
        model=_text(name) if name else "unknown",
        utilization_ratio=ratio_from_percent(float(util.gpu)) if util is not None else None,
        memory_used_bytes=int(mem.used) if mem is not None else None,
        memory_total_bytes=int(mem.total) if mem is not None else None,
        memory_kind="fb" if mem is not None else None,
        temperature_celsius=float(temp) if temp is not None else None,
        temperature_slowdown_celsius=slowdown,
        thermal_throttling=throttling,
        power_watts=power_mw / 1000.0 if power_mw is not None else None,  # NVML reports milliwatts
        health=health,
        health_label=label,
        ecc_errors=ecc,
        links=_links(nv, h),
        processes=_processes(nv, h),
        bus_id=_text(pci.busId) if pci is not None else None,
        uuid=_text(uuid) if uuid else None,
    )


def read_nvml(node: str, module: ModuleType | None = None) -> list[Reading]:
    """Every GPU NVML sees. Blocking (NVML is a C library): run it in a thread from async code."""
    nv = module or load_pynvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        raise NvmlUnavailable(f"NVML init failed: {err}") from err
    try:
        return [read_device(nv, i, node) for i in range(nv.nvmlDeviceGetCount())]
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
