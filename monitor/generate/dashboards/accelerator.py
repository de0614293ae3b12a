"""Accelerator dashboard: the sidecar's `accelerator_*` series (NPU and GPU, base units)."""

from __future__ import annotations

from typing import Any

from monitor.config import Config
from monitor.generate.dashboards.common import dashboard, query_var, timeseries

# Exported by the sidecar's telemetry (labels deployment, node, device, chip, vendor).
ACCELERATOR_METRICS = ("accelerator_utilization_ratio", "accelerator_memory_used_bytes",
                       "accelerator_memory_total_bytes", "accelerator_temperature_celsius",
                       "accelerator_power_watts", "accelerator_health")
S = 'deployment=~"$deployment",node=~"$node"'
LEGEND = "{{node}} {{device}}"


def build(config: Config) -> dict[str, Any]:
    panels = [
        (timeseries("Utilization", "Compute utilization per device.",
                    [(f"accelerator_utilization_ratio{{{S}}}", LEGEND)], unit="percentunit"), 12, 8),
        (timeseries("Memory used", "Device memory used as a share of total.",
                    [(f"accelerator_memory_used_bytes{{{S}}} / accelerator_memory_total_bytes{{{S}}}", LEGEND)],
                    unit="percentunit"), 12, 8),
        (timeseries("Memory used (bytes)", "Device memory used and total.",
                    [(f"accelerator_memory_used_bytes{{{S}}}", "used " + LEGEND),
                     (f"accelerator_memory_total_bytes{{{S}}}", "total " + LEGEND)], unit="bytes"), 12, 8),
        (timeseries("Temperature", "Chip temperature.", [(f"accelerator_temperature_celsius{{{S}}}", LEGEND)],
                    unit="celsius"), 12, 8),
        (timeseries("Power", "Board power draw.", [(f"accelerator_power_watts{{{S}}}", LEGEND)], unit="watt"), 12, 8),
        (timeseries("Health", "Health level per device: 0 ok, 1 warning, 2 alarm/unhealthy, 3 critical.",
                    [(f"accelerator_health{{{S}}}", LEGEND)]), 12, 8),
    ]
    variables = [query_var("deployment", "Deployment", "label_values(accelerator_health, deployment)", multi=True),
                 query_var("node", "Node", 'label_values(accelerator_health{deployment=~"$deployment"}, node)',
                           multi=True)]
    return dashboard("Accelerators", "slo-monitor-accelerators",
                     "NPU/GPU utilization, memory, temperature, power and health per device.", variables,
                     [("Devices", panels)])
