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


def dashboards(config: Config) -> dict[str, str]:
    return {name: json_text(build(config)) for name, build in BUILDERS.items()}
