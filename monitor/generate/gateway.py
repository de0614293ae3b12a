"""Symptom alerts at the gateway (smg 1.13, sglang-router 0.3.2): what its own listener says before, or
besides, an SLO burn. Each alert reads only families the deployment's gateway version exposes
(`conventions.gateway_has`); docs/gateways.md says what each family measures on the real binaries."""

from __future__ import annotations

from monitor.config import Deployment
from monitor.conventions import names
from monitor.conventions.names import (
    CB_OPEN,
    RENDEZVOUS_PROBE_PHASE,
    SMG_ADMISSION_REJECTED,
    SMG_OVERLOAD_SHED,
    SMG_PD_RENDEZVOUS_FAILURES,
    SMG_WORKER_CB_STATE,
    SMG_WORKER_HEALTH,
    gateway_has,
)
from monitor.escaping import template_literal
from monitor.generate.options import Options
from monitor.generate.rule_model import AlertingRule
from monitor.generate.rules import alert
from monitor.promql import Expr, aggregate, binop, range_call, select, select_groups


def _ann(summary: str, description: str, runbook: str) -> dict[str, str]:
    return {"summary": summary, "description": description, "runbook": runbook}


def _increase(metric: str, eq: dict[str, str], by: tuple[str, ...], window: str,
              neq: dict[str, str] | None = None) -> Expr:
    """`sum by (...) (increase(metric{...}[window])) > 0`."""
    selected = select_groups(metric, eq, neq=neq)
    return binop(aggregate("sum", range_call("increase", selected, window), by), ">", 0)


def gateway_alerts(dep: Deployment, opts: Options, base: dict[str, str]) -> list[AlertingRule]:
    """Worker unhealthy and circuit breaker open (both versions); overload shedding, admission rejections and
    PD rendezvous failures (smg 1.13 only). None without a router target (source router)."""
    if not dep.router_targets:
        return []
    d = template_literal(dep.name)
    eq = {"deployment": dep.name, "role": "router"}
    five = opts.duration("5m")
    gw = dep.gateway
    rules = [
        alert(names.ALERT_ROUTER_WORKER, binop(select_groups(SMG_WORKER_HEALTH, eq), "==", 0), opts.duration("2m"),
              {**base, "severity": "ticket"},
              _ann(f"{d}: router marks worker {{{{ $labels.worker }}}} unhealthy",
                   f"smg_worker_health == 0 for a worker of deployment {d}'s router.",
                   "Check the worker's /health endpoint and logs.")),
        alert(names.ALERT_GATEWAY_CIRCUIT_OPEN, binop(select_groups(SMG_WORKER_CB_STATE, eq), "==", CB_OPEN),
              opts.duration("1m"), {**base, "severity": "ticket"},
              _ann(f"{d}: the gateway's circuit breaker for worker {{{{ $labels.worker }}}} is open",
                   f"{binop(select(SMG_WORKER_CB_STATE), '==', CB_OPEN)} (open) for a worker of deployment {d}: after "
                   "consecutive failed requests (10 by default) the gateway sends it nothing until the breaker's "
                   "timeout, then half-opens it to test.",
                   "Check the worker's logs and its 5xx answers on the deployment dashboard's Gateway row; with "
                   "every breaker open the gateway answers 503 no_available_workers (the availability SLO burns).")),
    ]
    # Two ways of shedding, one alert name: each carries its own `cause`, or the two rules would be the same rule
    # to Prometheus (promtool's lint: "duplicate rule", exit 3 with --lint-fatal).
    shedding = (
        (SMG_OVERLOAD_SHED, "worker_overload", "stage", f"{d}: the gateway sheds load at {{{{ $labels.stage }}}}",
         f"{SMG_OVERLOAD_SHED} increased: smg refused requests of deployment {d} because its workers are over the "
         "overload thresholds (--worker-overload-waiting-requests / --worker-overload-token-usage).",
         "Add decode capacity or lower the load; see the workers' queues and KV-cache usage."),
        (SMG_ADMISSION_REJECTED, "admission_queue", "reason", f"{d}: the gateway rejects requests at admission ({{{{ $labels.reason }}}})",
         f"{SMG_ADMISSION_REJECTED} increased: with --max-concurrent-requests set, smg answered requests of "
         f"deployment {d} 429 admission_queue_full (reason full) or 503 admission_queue_timeout (timeout).",
         "Raise --max-concurrent-requests / --queue-size if the workers have headroom, else add capacity."),
    )
    for family, cause, by, summary, description, runbook in shedding:
        if gateway_has(gw, family):
            rules.append(alert(
                names.ALERT_GATEWAY_SHEDDING, _increase(family, eq, ("deployment", by), five), None,
                {**base, "severity": "ticket", names.CAUSE_LABEL: cause},
                _ann(f"{summary}: {{{{ $value | printf \"%.0f\" }}}} in {five}", description, runbook)))
    if dep.mode == "pd-disaggregated" and gateway_has(gw, SMG_PD_RENDEZVOUS_FAILURES):
        # The probe phase is counted once per prefill whose bootstrap port refused smg's registration probe (a
        # worker without a bootstrap listener, as the emulator): not a request failure, never paged on.
        rules.append(alert(
            names.ALERT_GATEWAY_PD_FAILURES,
            _increase(SMG_PD_RENDEZVOUS_FAILURES, eq, ("deployment", "leg", "phase"), five,
                      neq={"phase": RENDEZVOUS_PROBE_PHASE}),
            opts.duration("1m"), {**base, "severity": "page"},
            _ann(f"{d}: PD {{{{ $labels.phase }}}} failures at the gateway on the {{{{ $labels.leg }}}} leg "
                 f"({{{{ $value | printf \"%.0f\" }}}} in {five})",
                 f"{SMG_PD_RENDEZVOUS_FAILURES} (phase bootstrap or transfer) increased: requests of deployment {d} "
                 "failed between prefill and decode as the engines reported them to smg (gRPC workers).",
                 "Check the transfer backend and the bootstrap port between the prefill and decode nodes; "
                 "SGLangPDBootstrapFailures / SGLangPDTransferFailures show the engines' own counts.")))
    return rules
