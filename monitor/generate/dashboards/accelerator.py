"""Accelerator dashboard: the sidecar's `accelerator_*` series (NPU and GPU, base units)."""

from __future__ import annotations

from typing import Any

from monitor.config import Config
from monitor.conventions.names import (
    M_ACCEL_HEALTH,
    M_ACCEL_MEMORY_TOTAL,
    M_ACCEL_MEMORY_USED,
    M_ACCEL_POWER,
    M_ACCEL_TEMPERATURE,
    M_ACCEL_UTILIZATION,
)
from monitor.generate.dashboards.common import Matchers, dashboard, label_values, query_var, timeseries
from monitor.promql import binop, select

DEPLOYMENTS: Matchers = (("deployment", "=~", "$deployment"),)
S: Matchers = (*DEPLOYMENTS, ("node", "=~", "$node"))
LEGEND = "{{node}} {{device}}"


def build(config: Config) -> dict[str, Any]:
    panels = [
        (timeseries("Utilization", "Compute utilization per device.",
                    [(select(M_ACCEL_UTILIZATION, S), LEGEND)], unit="percentunit"), 12, 8),
        (timeseries("Memory used", "Device memory used as a share of total.",
                    [(binop(select(M_ACCEL_MEMORY_USED, S), "/", select(M_ACCEL_MEMORY_TOTAL, S)), LEGEND)],
                    unit="percentunit"), 12, 8),
        (timeseries("Memory used (bytes)", "Device memory used and total.",
                    [(select(M_ACCEL_MEMORY_USED, S), "used " + LEGEND),
                     (select(M_ACCEL_MEMORY_TOTAL, S), "total " + LEGEND)], unit="bytes"), 12, 8),
        (timeseries("Temperature", "Chip temperature.", [(select(M_ACCEL_TEMPERATURE, S), LEGEND)],
                    unit="celsius"), 12, 8),
        (timeseries("Power", "Board power draw.", [(select(M_ACCEL_POWER, S), LEGEND)], unit="watt"), 12, 8),
        (timeseries("Health", "Health level per device: 0 ok, 1 warning, 2 alarm/unhealthy, 3 critical.",
                    [(select(M_ACCEL_HEALTH, S), LEGEND)]), 12, 8),
    ]
    variables = [query_var("deployment", "Deployment", label_values(M_ACCEL_HEALTH, "deployment"), multi=True),
                 query_var("node", "Node", label_values(select(M_ACCEL_HEALTH, DEPLOYMENTS), "node"), multi=True)]
    return dashboard("Accelerators", "slo-monitor-accelerators",
                     "NPU/GPU utilization, memory, temperature, power and health per device.", variables,
                     [("Devices", panels)])
