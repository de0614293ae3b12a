"""Readings per deployment -> `accelerator_*` metric families (for a custom Collector's collect()).

One label set for every per-chip series (`conventions.ACCEL_LABELS`); descriptive strings
(model, bus id, UUID, source) live once on `accelerator_info` so the numeric series stay narrow
and join with `* on (...) group_left (model) accelerator_info`. A field the source did not report
is left out rather than written as 0. The same chip reported twice in a deployment (two targets
on one node) is written once: Prometheus would keep only the first of the two samples anyway (2.42 and
3.16 seen: up=1, the repeat dropped; 3.16 counts it as a duplicate and logs a WARN line every scrape).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from monitor.conventions.names import (
    ACCEL_LABELS,
    M_ACCEL_DURATION,
    M_ACCEL_ECC,
    M_ACCEL_HEALTH,
    M_ACCEL_HEALTH_INFO,
    M_ACCEL_INFO,
    M_ACCEL_LINK_UP,
    M_ACCEL_MEMORY_TOTAL,
    M_ACCEL_MEMORY_USED,
    M_ACCEL_POWER,
    M_ACCEL_PROCESSES,
    M_ACCEL_TEMPERATURE,
    M_ACCEL_TEMPERATURE_SLOWDOWN,
    M_ACCEL_THERMAL_THROTTLING,
    M_ACCEL_UP,
    M_ACCEL_UTILIZATION,
)
from monitor.telemetry.model import Reading, TelemetryResult

UP_LABELS = ("deployment", "node", "source")


def _gauges() -> dict[str, GaugeMetricFamily]:
    specs = {
        "utilization": (M_ACCEL_UTILIZATION,
                        "Compute utilisation (Ascend AI Core / NPU Util, NVIDIA GPU util), 0..1.", ()),
        "mem_used": (M_ACCEL_MEMORY_USED, "Device memory in use (HBM, else DDR/framebuffer).", ()),
        "mem_total": (M_ACCEL_MEMORY_TOTAL, "Device memory size (HBM, else DDR/framebuffer).", ()),
        "temp": (M_ACCEL_TEMPERATURE, "Chip temperature.", ()),
        "slowdown": (M_ACCEL_TEMPERATURE_SLOWDOWN, "The chip's own slowdown (clock throttle) temperature, where "
                     "its telemetry reports one (NVML, DCGM).", ()),
        "throttling": (M_ACCEL_THERMAL_THROTTLING, "1 while the chip's clocks are lowered for its temperature "
                       "(NVML/DCGM thermal clock event reasons), else 0.", ()),
        "power": (M_ACCEL_POWER, "Power draw (per chip, or per card where the card reports it).", ()),
        "health": (M_ACCEL_HEALTH, "Chip health: 0 ok, 1 warning, 2 alarm/unhealthy, 3 critical.", ()),
        "health_info": (M_ACCEL_HEALTH_INFO, "Always 1; the health label says ok/warning/alarm/"
                        "critical/unhealthy/unknown.", ("health",)),
        "link": (M_ACCEL_LINK_UP, "1 when the link (RoCE port, NVLink) is up, 0 when down.", ("link",)),
        "procs": (M_ACCEL_PROCESSES, "Processes holding memory on the chip.", ()),
        "info": (M_ACCEL_INFO, "Always 1; describes the chip.", ("model", "source", "bus_id", "uuid")),
    }
    return {k: GaugeMetricFamily(name, doc, labels=[*ACCEL_LABELS, *extra]) for k, (name, doc, extra) in specs.items()}


def _add(fams: dict[str, GaugeMetricFamily], ecc: CounterMetricFamily, labels: list[str], r: Reading,
         source: str) -> None:
    for key, value in (("utilization", r.utilization_ratio), ("mem_used", r.memory_used_bytes),
                       ("mem_total", r.memory_total_bytes), ("temp", r.temperature_celsius),
                       ("slowdown", r.temperature_slowdown_celsius), ("throttling", r.thermal_throttling),
                       ("power", r.power_watts), ("health", r.health)):
        if value is not None:
            fams[key].add_metric(labels, float(value))
    fams["health_info"].add_metric([*labels, r.health_label], 1.0)
    for link, up in sorted(r.links.items()):
        fams["link"].add_metric([*labels, link], 1.0 if up else 0.0)
    if r.processes is not None:
        fams["procs"].add_metric(labels, float(len(r.processes)))
    for kind, count in sorted(r.ecc_errors.items()):
        ecc.add_metric([*labels, kind], float(count))
    fams["info"].add_metric([*labels, r.model, source, r.bus_id or "", r.uuid or ""], 1.0)


def telemetry_families(results: Mapping[str, Iterable[TelemetryResult]]) -> list[Metric]:
    """`{deployment: [TelemetryResult, ...]}` -> metric families, stable order."""
    fams = _gauges()
    ecc = CounterMetricFamily(M_ACCEL_ECC, "Memory ECC errors since driver load, by type "
                              "(correctable = single-bit, uncorrectable = double-bit).", labels=[*ACCEL_LABELS, "type"])
    up = GaugeMetricFamily(M_ACCEL_UP, "1 when the last telemetry collection succeeded.",
                           labels=list(UP_LABELS))
    duration = GaugeMetricFamily(M_ACCEL_DURATION, "Time the last telemetry collection took.",
                                 labels=list(UP_LABELS))
    for deployment in sorted(results):
        seen: set[tuple[str, ...]] = set()
        ups: dict[tuple[str, str], tuple[bool, float]] = {}
        for res in results[deployment]:
            key = (res.node, res.source)
            prev_up, prev_d = ups.get(key, (True, 0.0))
            ups[key] = (prev_up and res.up, max(prev_d, res.duration_seconds))
            for r in res.readings:
                labels = [deployment, r.node, r.device, r.chip, r.vendor]
                if tuple(labels) in seen:
                    continue
                seen.add(tuple(labels))
                _add(fams, ecc, labels, r, res.source)
        for (node, source), (ok, secs) in sorted(ups.items()):
            up.add_metric([deployment, node, source], 1.0 if ok else 0.0)
            duration.add_metric([deployment, node, source], secs)
    # Families with no sample (no source reported links or ECC) are left out of the exposition.
    return [f for f in (*fams.values(), ecc, up, duration) if f.samples]
