"""Grafana dashboards built with grafanalib: overview, per-deployment, accelerator, incident."""

from __future__ import annotations

from monitor.config import Config
from monitor.escaping import json_text
from monitor.generate.dashboards import accelerator, deployment, incident, overview

BUILDERS = {
    "slo-overview.json": overview.build,
    "sglang-deployment.json": deployment.build,
    "accelerators.json": accelerator.build,
    "slo-incident.json": incident.build,
}
HISTOGRAM_DASHBOARDS = frozenset({"slo-overview.json", "sglang-deployment.json", "slo-incident.json"})


def dashboards(config: Config, nhcb: bool = False) -> dict[str, str]:
    """`nhcb`: latency panels read native histograms with custom buckets (--histograms nhcb)."""
    return {name: json_text(build(config, nhcb) if name in HISTOGRAM_DASHBOARDS else build(config))
            for name, build in BUILDERS.items()}
