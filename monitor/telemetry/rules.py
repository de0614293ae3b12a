"""Prometheus alerting rules over the sidecar's `accelerator_*` series, one set per deployment.

Severities follow the generator's routing (`page` wakes someone, `ticket` does not). Thresholds:
HBM above 95 % means the headroom SGLang leaves beyond `--mem-fraction-static` is gone (activation
or graph-capture OOM next); 85 °C is NVIDIA's template default (`NvidiaGpuTemperatureHigh`) and
Huawei publishes no number (telemetry reference §5.2), so it is a site knob. Per-deployment
selectors let `absent()` name the deployment whose telemetry vanished.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from monitor.config import Deployment

ACCEL_SOURCES = frozenset({"npu-smi", "npu-exporter", "dcgm", "nvml"})
CHIP = "{{ $labels.node }} device {{ $labels.device }} chip {{ $labels.chip }}"
RUNBOOK = "docs/runbooks/accelerators.md"


def has_accelerator_targets(dep: Deployment) -> bool:
    return any(t.role in ("npu", "gpu") or t.source in ACCEL_SOURCES for t in dep.targets)


def _names(deployments: Iterable[Deployment | str]) -> list[str]:
    """Deployment objects without accelerator targets are skipped (their absent() would always fire)."""
    out = []
    for d in deployments:
        if isinstance(d, str):
            out.append(d)
        elif has_accelerator_targets(d):
            out.append(d.name)
    return out


def _rule(alert: str, expr: str, for_: str, severity: str, summary: str, description: str,
          runbook_base: str, deployment: str) -> dict[str, Any]:
    # The static deployment label keeps the rules of two deployments distinct (promtool's
    # duplicate-rules lint) and names the deployment even where the expression drops it.
    return {
        "alert": alert,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "deployment": deployment},
        "annotations": {"summary": summary, "description": description,
                        "runbook_url": f"{runbook_base}#{alert.lower()}"},
    }


def accelerator_alert_rules(deployments: Iterable[Deployment | str], *, hbm_ratio: float = 0.95,
                            temperature_celsius: float = 85.0, for_duration: str = "2m",
                            runbook_base: str = RUNBOOK) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    pct = f"{hbm_ratio * 100:g}"
    for name in _names(deployments):
        sel = f'{{deployment="{name}"}}'
        rules += [
            _rule("AcceleratorUnhealthy", f"accelerator_health{sel} >= 2", for_duration, "page",
                  f"{name}: accelerator {CHIP} is unhealthy (level {{{{ $value }}}})",
                  f"Health level {{{{ $value }}}} (2 alarm/unhealthy, 3 critical) on {CHIP} of deployment {name} "
                  f"for {for_duration}. Requests served by this chip's rank will fail or stall.",
                  runbook_base, name),
            _rule("AcceleratorHealthWarning", f"accelerator_health{sel} == 1", for_duration, "ticket",
                  f"{name}: accelerator {CHIP} reports a warning",
                  f"Health level 1 (minor alarm) on {CHIP} of deployment {name} for {for_duration}. Check "
                  "`npu-smi info -t health -i <device>` (error codes) or NVML row-remap state.", runbook_base, name),
            _rule("AcceleratorMemoryNearlyFull",
                  f"accelerator_memory_used_bytes{sel}\n  / (accelerator_memory_total_bytes{sel} > 0)\n> {hbm_ratio:g}",
                  for_duration, "ticket",
                  f"{name}: device memory on {CHIP} above {pct}%",
                  f"{{{{ $value | humanizePercentage }}}} of device memory in use on {CHIP} of deployment {name} "
                  f"for {for_duration}. Lower --mem-fraction-static or find the extra process "
                  "(accelerator_processes).", runbook_base, name),
            _rule("AcceleratorTemperatureHigh", f"accelerator_temperature_celsius{sel} > {temperature_celsius:g}",
                  for_duration, "ticket",
                  f"{name}: {CHIP} at {{{{ $value }}}} °C",
                  f"Chip temperature above {temperature_celsius:g} °C on {CHIP} of deployment {name} for "
                  f"{for_duration}; expect clock throttling and higher TPOT.", runbook_base, name),
            _rule("AcceleratorTelemetryDown", f"accelerator_telemetry_up{sel} == 0", for_duration, "ticket",
                  f"{name}: {{{{ $labels.source }}}} telemetry on {{{{ $labels.node }}}} failing",
                  f"The sidecar's last {{{{ $labels.source }}}} collection on {{{{ $labels.node }}}} for deployment "
                  f"{name} failed for {for_duration}; chip health and memory alerts are blind there. "
                  "See the sidecar log for the error.", runbook_base, name),
            _rule("AcceleratorTelemetryAbsent", f"absent(accelerator_telemetry_up{sel})", for_duration, "ticket",
                  f"{name}: no accelerator telemetry",
                  f"No accelerator_telemetry_up series for deployment {name} for {for_duration}: the sidecar is "
                  "not scraped or has no npu/gpu target for it.", runbook_base, name),
        ]
    return rules
