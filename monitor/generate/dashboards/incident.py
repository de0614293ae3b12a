"""Incident dashboard: breach windows (burn-rate alerts as annotations) next to the series that move with them."""

from __future__ import annotations

from typing import Any

from monitor.config import Config
from monitor.conventions import names, policy
from monitor.conventions.names import COUNTERS, GAUGES, M_ACCEL_TEMPERATURE, M_ACCEL_UTILIZATION
from monitor.conventions.slis import SLI_FAMILIES
from monitor.generate.dashboards.common import (
    DS,
    ENGINE,
    RATE,
    REQUESTS,
    D,
    dashboard,
    quantile,
    query_var,
    timeseries,
)


def build(config: Config, nhcb: bool = False) -> dict[str, Any]:
    breach = timeseries("Burn rate 5m / 1h (breach windows shaded by alerts)", "Short and long burn rates; a "
                        f"page needs both above {policy.PAGE_BURN_RATE:g} (or 6h and 30m above "
                        f"{policy.PAGE_BURN_RATE_SLOW:g}).",
                        [(f"{names.burn_rate('5m')}{{{D}}}", "5m {{sli}}"),
                         (f"{names.burn_rate('1h')}{{{D}}}", "1h {{sli}}")],
                        thresholds=[{"color": "green", "value": None}, {"color": "red", "value": policy.PAGE_BURN_RATE}])
    p99 = [(quantile(0.99, SLI_FAMILIES[s], REQUESTS, nhcb=nhcb), f"p99 {s}") for s in ("ttft", "tpot")]
    comoving = [
        (timeseries("TTFT / TPOT p99", "p99 latency (display only) with the targets.",
                    [*p99, (f"{names.TARGET}{{{D}}}", "target {{sli}}")], unit="s"), 12, 7),
        (timeseries("Queue and running", "Requests waiting and running (sum over DP ranks, max over TP ranks).",
                    [(f"{names.QUEUE}{{{D}}}", "queued {{role}}"), (f"{names.RUNNING}{{{D}}}", "running {{role}}")]),
         12, 7),
        (timeseries("KV-cache token usage", "Max pool usage per role.",
                    [(f"max by (role) ({GAUGES['token_usage']}{{{ENGINE}}})", "{{role}}")], unit="percentunit"),
         12, 7),
        (timeseries("Throughput", "Output tokens per second and generation throughput gauge.",
                    [(f"sum(rate({COUNTERS['generation_tokens_total']}{{{REQUESTS}}}[{RATE}]))", "output tokens/s"),
                     (f'sum(max by (instance, dp_rank) ({GAUGES["gen_throughput"]}{{{ENGINE}}}))', "gen_throughput")]),
         12, 7),
        (timeseries("Aborts, retractions, PD failures", "Per-second rates of requests that failed or were pushed "
                    "back.",
                    [(f"sum(rate({COUNTERS['aborted_requests_total']}{{{REQUESTS}}}[{RATE}]))", "aborted"),
                     (f"sum(rate({COUNTERS['retracted_total']}{{{ENGINE}}}[{RATE}]))", "retracted"),
                     (f"sum(rate({COUNTERS['transfer_failed_total']}{{{D}}}[{RATE}]))", "KV transfer failed")]),
         12, 7),
        (timeseries("Targets up and router errors", "Scrape health per role and router 5xx responses per second.",
                    [(f"sum by (role) (up{{{D}}})", "up {{role}}"),
                     (f'sum(rate(smg_http_responses_total{{{D},status_code=~"5.."}}[{RATE}]))', "router 5xx/s")]),
         12, 7),
        (timeseries("Accelerators", "Max utilization and temperature across the deployment's devices.",
                    [(f"max({M_ACCEL_UTILIZATION}{{{D}}})", "max utilization"),
                     (f"max({M_ACCEL_TEMPERATURE}{{{D}}}) / 100", "max temperature / 100 C")]), 12, 7),
        (timeseries("Spec accept length", "Speculative decoding accept length (max per role).",
                    [(f"max by (role) ({GAUGES['spec_accept_length']}{{{ENGINE}}})", "{{role}}")]), 12, 7),
    ]
    annotations = [{
        "datasource": DS, "enable": True, "iconColor": "red", "name": "SLO burn alerts",
        "expr": f'ALERTS{{alertstate="firing",alertname=~"{names.ALERT_PAGE}|{names.ALERT_TICKET}",{D}}}',
        "step": "60s", "titleFormat": "{{alertname}} {{sli}}", "textFormat": "{{severity}} {{long_window}}/{{short_window}}",
        "useValueForTime": False,
    }]
    variables = [query_var("deployment", "Deployment", f"label_values({names.OBJECTIVE}, deployment)")]
    return dashboard("SLO incident", "slo-monitor-incident", "Breach windows with the series that moved with them.",
                     variables, [("Breach", [(breach, 24, 8)]), ("Co-moving series", comoving)],
                     annotations=annotations)
