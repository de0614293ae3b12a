"""Incident dashboard: breach windows (burn-rate alerts as annotations) next to the series that move with them."""

from __future__ import annotations

from typing import Any

from monitor.config import Config
from monitor.conventions import names, policy
from monitor.conventions.names import (
    COUNTERS,
    GAUGES,
    M_ACCEL_TEMPERATURE,
    M_ACCEL_UTILIZATION,
    SMG_HTTP_RESPONSES,
)
from monitor.generate.dashboards.common import (
    DS,
    ENGINE,
    RATE,
    REQUESTS,
    D,
    Matchers,
    dashboard,
    label_values,
    quantile,
    query_var,
    sli_matchers,
    targeted,
    timeseries,
)
from monitor.promql import Expr, aggregate, binop, rate_sum, select


def _rate(metric: str, matchers: Matchers) -> Expr:
    return rate_sum(select(metric, matchers), RATE)


def build(config: Config, nhcb: bool = False) -> dict[str, Any]:
    breach = timeseries("Burn rate 5m / 1h (breach windows shaded by alerts)", "Short and long burn rates; a "
                        f"page needs both above {policy.PAGE_BURN_RATE:g} (or 6h and 30m above "
                        f"{policy.PAGE_BURN_RATE_SLOW:g}).",
                        [(select(names.burn_rate("5m"), D), "5m {{sli}}"),
                         (select(names.burn_rate("1h"), D), "1h {{sli}}")],
                        thresholds=[{"color": "green", "value": None}, {"color": "red", "value": policy.PAGE_BURN_RATE}])
    # The latency SLIs some deployment of the config targets (the ones that can breach), each from its own feed.
    slis = targeted(config)
    p99 = [(quantile(0.99, s.family, sli_matchers(s.key), nhcb=nhcb), f"p99 {s.key}") for s in slis]
    comoving = [
        (timeseries(f"{' / '.join(s.title for s in slis) or 'Latency'} p99", "p99 latency (display only) with the "
                    "targets.", [*p99, (select(names.TARGET, D), "target {{sli}}")], unit="s"), 12, 7),
        (timeseries("Queue and running", "Requests waiting and running (sum over DP ranks, max over TP ranks).",
                    [(select(names.QUEUE, D), "queued {{role}}"), (select(names.RUNNING, D), "running {{role}}")]),
         12, 7),
        (timeseries("KV-cache token usage", "Max pool usage per role.",
                    [(aggregate("max", select(GAUGES["token_usage"], ENGINE), ("role",)), "{{role}}")],
                    unit="percentunit"),
         12, 7),
        (timeseries("Throughput", "Output tokens per second and generation throughput gauge.",
                    [(_rate(COUNTERS["generation_tokens_total"], REQUESTS), "output tokens/s"),
                     (aggregate("sum", aggregate("max", select(GAUGES["gen_throughput"], ENGINE),
                                                 ("instance", "dp_rank"))), "gen_throughput")]),
         12, 7),
        (timeseries("Aborts, retractions, PD failures", "Per-second rates of requests that failed or were pushed "
                    "back.",
                    [(_rate(COUNTERS["aborted_requests_total"], REQUESTS), "aborted"),
                     (_rate(COUNTERS["retracted_total"], ENGINE), "retracted"),
                     (_rate(COUNTERS["transfer_failed_total"], D), "KV transfer failed")]),
         12, 7),
        (timeseries("Targets up and router errors", "Scrape health per role and router 5xx responses per second.",
                    [(aggregate("sum", select(names.UP, D), ("role",)), "up {{role}}"),
                     (_rate(SMG_HTTP_RESPONSES, (*D, ("status_code", "=~", "5.."))), "router 5xx/s")]),
         12, 7),
        (timeseries("Accelerators", "Max utilization and temperature across the deployment's devices.",
                    [(aggregate("max", select(M_ACCEL_UTILIZATION, D)), "max utilization"),
                     (binop(aggregate("max", select(M_ACCEL_TEMPERATURE, D)), "/", 100), "max temperature / 100 C")]),
         12, 7),
        (timeseries("Spec accept length", "Speculative decoding accept length (max per role).",
                    [(aggregate("max", select(GAUGES["spec_accept_length"], ENGINE), ("role",)), "{{role}}")]), 12, 7),
    ]
    annotations = [{
        "datasource": DS, "enable": True, "iconColor": "red", "name": "SLO burn alerts",
        "expr": select(names.ALERTS, (("alertstate", "=", "firing"),
                                      ("alertname", "=~", f"{names.ALERT_PAGE}|{names.ALERT_TICKET}"), *D)),
        "step": "60s", "titleFormat": "{{alertname}} {{sli}}", "textFormat": "{{severity}} {{long_window}}/{{short_window}}",
        "useValueForTime": False,
    }]
    variables = [query_var("deployment", "Deployment", label_values(names.OBJECTIVE, "deployment"))]
    return dashboard("SLO incident", "slo-monitor-incident", "Breach windows with the series that moved with them.",
                     variables, [("Breach", [(breach, 24, 8)]), ("Co-moving series", comoving)],
                     annotations=annotations)
