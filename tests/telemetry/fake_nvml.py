"""A stand-in for `pynvml` with the calls monitor.telemetry.nvml makes (values from the H200 run)."""

from __future__ import annotations

from types import SimpleNamespace


class NVMLError(Exception):
    pass


class FakeNvml:
    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_NVLINK_MAX_LINKS = 4
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1

    def __init__(self, gpus: int = 1, *, init_fails: bool = False, uncorrected: int = 0,
                 remapped=(0, 0, 0, 0), nvlinks: int = 0, ecc_supported: bool = True,
                 slowdown: int | None = 90, reasons: int | None = 0, event_reasons_api: bool = True):
        self.gpus, self.init_fails, self.uncorrected = gpus, init_fails, uncorrected
        self.remapped, self.nvlinks, self.ecc_supported = remapped, nvlinks, ecc_supported
        # The thermal answers: a slowdown threshold (None: NOT_SUPPORTED), the clock event reasons bitmask, and
        # whether the driver has the ...EventReasons call or only the older ...ThrottleReasons one.
        self.slowdown, self.reasons, self.event_reasons_api = slowdown, reasons, event_reasons_api
        self.shutdowns = 0

    def nvmlInit(self):
        if self.init_fails:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:08d}"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:0{h}:06.0")

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=100, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=150754820096, used=21936078848, free=150754820096 - 21936078848)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 62

    def nvmlDeviceGetPowerUsage(self, h):
        return 673793

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        if kind != self.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN or self.slowdown is None:
            raise NVMLError("Not Supported")
        return self.slowdown

    def _reasons(self, h):
        if self.reasons is None:
            raise NVMLError("Not Supported")
        return self.reasons

    def __getattr__(self, name):
        # Only the calls this driver has: an older one lacks nvmlDeviceGetCurrentClocksEventReasons.
        if name == "nvmlDeviceGetCurrentClocksEventReasons" and self.event_reasons_api:
            return self._reasons
        if name == "nvmlDeviceGetCurrentClocksThrottleReasons":
            return self._reasons
        raise AttributeError(name)

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        if not self.ecc_supported:
            raise NVMLError("Not Supported")
        return self.uncorrected if kind == 1 else 7

    def nvmlDeviceGetRemappedRows(self, h):
        return self.remapped

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= self.nvlinks:
            raise NVMLError("Not Supported")
        return 0 if link == 1 else 1

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=425, usedGpuMemory=21281898496)]

    def nvmlSystemGetProcessName(self, pid):
        raise NVMLError("No Permission")
