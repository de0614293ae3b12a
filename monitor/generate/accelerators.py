"""Alerting rules over the sidecar's `accelerator_*` series, one set per deployment with accelerator targets.

Severities follow the generator's routing (`page` wakes someone, `ticket` does not); thresholds are
`conventions.ACCEL_MEMORY_RATIO` / `ACCEL_TEMPERATURE_CELSIUS`, and the chip's own word on throttling where its
telemetry gives one (NVML, DCGM: `accelerator_thermal_throttling`). Per-deployment selectors let `absent()`
name the deployment whose telemetry vanished, and the static `deployment` label keeps the rules of two
deployments distinct (promtool's duplicate-rules lint). `for` follows --time-scale like every other rule.
"""

from __future__ import annotations

from monitor.config import Deployment
from monitor.conventions import names as N
from monitor.conventions import policy as P
from monitor.conventions.names import TELEMETRY_SOURCES
from monitor.escaping import template_literal
from monitor.generate.options import Options
from monitor.generate.rule_model import AlertingRule, RuleGroup
from monitor.promql import Expr, binop, call, format_number, select

CHIP = "{{ $labels.node }} device {{ $labels.device }} chip {{ $labels.chip }}"
RUNBOOK = "docs/runbooks/accelerators.md"
FOR = "2m"


def has_accelerator_targets(dep: Deployment) -> bool:
    return any(t.role in ("npu", "gpu") or t.source in TELEMETRY_SOURCES for t in dep.targets)


def _rule(alert: str, expr: Expr, for_: str, severity: str, summary: str, description: str,
          deployment: str) -> AlertingRule:
    return AlertingRule(alert=alert, expr=expr, for_=for_, labels={"severity": severity, "deployment": deployment},
                        annotations={"summary": summary, "description": description,
                                     "runbook_url": f"{RUNBOOK}#{alert.lower()}"})


def accelerator_rules(dep: Deployment, opts: Options) -> list[AlertingRule]:
    """The seven accelerator alerts of `dep` ([] when it has no npu/gpu target: absent() would always fire)."""
    if not has_accelerator_targets(dep):
        return []
    eq = (("deployment", "=", dep.name),)
    name, for_ = template_literal(dep.name), opts.duration(FOR)
    pct = format_number(round(P.ACCEL_MEMORY_RATIO * 100, 6))
    temp = format_number(P.ACCEL_TEMPERATURE_CELSIUS)
    used, total = select(N.M_ACCEL_MEMORY_USED, eq), select(N.M_ACCEL_MEMORY_TOTAL, eq)
    up = select(N.M_ACCEL_UP, eq)
    share = binop(used, "/", binop(total, ">", 0), before="\n  ", parens="needed")
    return [
        _rule(N.ALERT_ACCEL_UNHEALTHY, binop(select(N.M_ACCEL_HEALTH, eq), ">=", 2), for_, "page",
              f"{name}: accelerator {CHIP} is unhealthy (level {{{{ $value }}}})",
              f"Health level {{{{ $value }}}} (2 alarm/unhealthy, 3 critical) on {CHIP} of deployment {name} "
              f"for {for_}. Requests served by this chip's rank will fail or stall.", dep.name),
        _rule(N.ALERT_ACCEL_WARNING, binop(select(N.M_ACCEL_HEALTH, eq), "==", 1), for_, "ticket",
              f"{name}: accelerator {CHIP} reports a warning",
              f"Health level 1 (minor alarm) on {CHIP} of deployment {name} for {for_}. Check "
              "`npu-smi info -t health -i <device>` (error codes) or NVML row-remap state.", dep.name),
        _rule(N.ALERT_ACCEL_MEMORY, binop(share, ">", P.ACCEL_MEMORY_RATIO, before="\n", parens="needed"), for_,
              "ticket", f"{name}: device memory on {CHIP} above {pct}%",
              f"{{{{ $value | humanizePercentage }}}} of device memory in use on {CHIP} of deployment {name} "
              f"for {for_}. Lower --mem-fraction-static or find the extra process ({N.M_ACCEL_PROCESSES}).",
              dep.name),
        _rule(N.ALERT_ACCEL_TEMPERATURE, binop(select(N.M_ACCEL_TEMPERATURE, eq), ">", P.ACCEL_TEMPERATURE_CELSIUS),
              for_, "ticket",
              f"{name}: {CHIP} at {{{{ $value }}}} °C",
              f"Chip temperature above {temp} °C on {CHIP} of deployment {name} for {for_}; expect clock "
              "throttling and higher TPOT.", dep.name),
        _rule(N.ALERT_ACCEL_THROTTLING, binop(select(N.M_ACCEL_THERMAL_THROTTLING, eq), "==", 1), for_, "ticket",
              f"{name}: {CHIP} is throttling for heat",
              f"The clocks of {CHIP} of deployment {name} have been lowered for its temperature for {for_} (NVML/"
              f"DCGM thermal clock event reasons; its slowdown temperature is {N.M_ACCEL_TEMPERATURE_SLOWDOWN}): "
              "every kernel runs slower, TPOT and TTFT rise on the server that owns it.", dep.name),
        _rule(N.ALERT_ACCEL_TELEMETRY_DOWN, binop(up, "==", 0), for_, "ticket",
              f"{name}: {{{{ $labels.source }}}} telemetry on {{{{ $labels.node }}}} failing",
              f"The sidecar's last {{{{ $labels.source }}}} collection on {{{{ $labels.node }}}} for deployment "
              f"{name} failed for {for_}; chip health and memory alerts are blind there. "
              "See the sidecar log for the error.", dep.name),
        _rule(N.ALERT_ACCEL_TELEMETRY_ABSENT, call("absent", up), for_, "ticket",
              f"{name}: no accelerator telemetry",
              f"No {N.M_ACCEL_UP} series for deployment {name} for {for_}: the sidecar is not scraped or has no "
              "npu/gpu target for it.", dep.name),
    ]


def accelerator_groups(deployments: list[Deployment], opts: Options) -> list[RuleGroup]:
    rules = [r for dep in deployments for r in accelerator_rules(dep, opts)]
    return [RuleGroup(name="slo-monitor:accelerators", rules=rules)] if rules else []
