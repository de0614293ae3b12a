"""Recording and alert rules for an optional goodput SLO, over the sidecar's exported goodput ratio.

Goodput has no Prometheus histogram to take rates of: the sidecar computes it per request over its
own windows (5m 30m 1h 6h) and exports `slo_monitor_goodput_ratio{deployment,window}`. The rules
turn each window into an error ratio and a burn rate, with the `sli="goodput"` label and the same
multi-window policy as the histogram SLIs, restricted to the windows the sidecar has: page when
1h and 5m burn faster than 14.4x, and when 6h and 30m burn faster than 6x (scaled to the period).
"""

from __future__ import annotations

from typing import Any

from monitor.config import Deployment
from monitor.conventions import BURN_RATE_ALERTS, SIDECAR_WINDOWS
from monitor.escaping import template_literal
from monitor.generate import names
from monitor.generate.options import format_number
from monitor.generate.promql import selector
from monitor.generate.rules import alert, burn_factor, extra_labels, record
from monitor.requestlog.export import M_GOODPUT_RATIO, M_LOG_REQUESTS
from monitor.requestlog.records import request_targets

SLI = "goodput"


def goodput_error(window: str) -> str:
    return f"{names.NS}:goodput_error:ratio_{window}"


def goodput_burn_rate(window: str) -> str:
    return f"{names.NS}:goodput_burn_rate:ratio_{window}"


def has_goodput(dep: Deployment) -> bool:
    return any(t.source == "request-log" for t in dep.targets)


def goodput_rule_groups(dep: Deployment, objective: float | None = None) -> list[dict[str, Any]]:
    """Rule groups (`[{name, rules}]`) for the deployment's goodput SLO; [] without a request-log target.

    `objective` defaults to the deployment's: the share of requests that must meet *every* target.
    (Meeting each SLI at 99% does not imply 99% goodput; pass a lower one to tolerate that.)
    """
    if not has_goodput(dep):
        return []
    obj = dep.objective if objective is None else objective
    budget = round(1.0 - obj, 12)
    ids = {"deployment": dep.name}
    labels = {"sli": SLI}
    rec: list[dict[str, Any]] = [record(names.OBJECTIVE, f"vector({format_number(obj)})", {**ids, **labels}),
                                 record(names.ERROR_BUDGET, f"vector({format_number(budget)})", {**ids, **labels})]
    for window in SIDECAR_WINDOWS:
        ratio = selector(M_GOODPUT_RATIO, {**ids, "window": window})
        total = selector(M_LOG_REQUESTS, {**ids, "window": window})
        # `max by (deployment)` drops `window` (and instance/job) so windows can be compared with `and`;
        # requests > 0 keeps an empty window from paging (the sidecar exports no ratio there anyway).
        rec.append(record(goodput_error(window),
                          f"1 - max by (deployment) ({ratio})\nand on (deployment) max by (deployment) ({total}) > 0",
                          labels))
        rec.append(record(goodput_burn_rate(window),
                          f"{selector(goodput_error(window), {**ids, **labels})} / {format_number(budget)}", labels))
    alerts = []
    period = dep.period_seconds
    slis = ", ".join(f"{s} <= {format_number(t)}s" for s, t in request_targets(
        {s: dep.target_seconds(s) for s in ("ttft", "tpot", "e2e")}).items()) or "success only"
    for severity, long_w, short_w, nominal in BURN_RATE_ALERTS:
        if long_w not in SIDECAR_WINDOWS or short_w not in SIDECAR_WINDOWS:
            continue  # the sidecar does not compute 1d/2h/3d windows
        factor = burn_factor(nominal, period)
        if factor * budget >= 1:
            continue
        fac = format_number(factor)
        expr = (f"{selector(goodput_burn_rate(long_w), {**ids, **labels})} > {fac}\n"
                f"and\n{selector(goodput_burn_rate(short_w), {**ids, **labels})} > {fac}")
        name = template_literal(dep.name)
        alerts.append(alert(
            names.ALERT_PAGE if severity == "page" else names.ALERT_TICKET, expr, None,
            {**extra_labels(dep), "deployment": dep.name, "sli": SLI, "severity": severity,
             "long_window": long_w, "short_window": short_w, "burn_rate_threshold": fac},
            {"summary": f"{name}: goodput SLO burning its error budget at {{{{ $value | printf \"%.1f\" }}}}x "
                        f"({severity}: > {fac}x over {long_w} and {short_w})",
             "description": template_literal(
                 f"Deployment {dep.name}: the goodput SLO is {format_number(round(obj * 100, 6))}% of requests "
                 f"succeeding with every latency target met ({slis}) over {dep.period}, computed per request "
                 f"from SGLang's request-metrics log by the slo-monitor sidecar. ") +
                 f"Over {long_w} the budget burns at {{{{ $value | printf \"%.2f\" }}}}x, above {fac}x, and the "
                 f"{short_w} window confirms it.",
             "runbook": template_literal(
                 f"Check slo_monitor_requests_missed{{deployment=\"{dep.name}\"}} for which target is missed "
                 f"(ttft, tpot, e2e, failed), then the per-SLI alerts and the deployment dashboard."),
             "deployment": template_literal(dep.name), "sli": SLI, "objective": format_number(obj),
             "sli_metric": f'{M_GOODPUT_RATIO}{{window="{long_w}"}}'}))
    return [{"name": names.group(dep.name, "goodput"), "rules": rec},
            *([{"name": names.group(dep.name, "goodput-alerts"), "rules": alerts}] if alerts else [])]
