"""The deployment dashboard's Gateway row: smg 1.13's families, with the ones sglang-router 0.3.2 shares
(requests, time to headers, status codes, worker health, circuit breakers, retries) first. What each family
measures on the real binaries is docs/gateways.md; the panels say it where it is not what the name suggests
(`smg_router_request_duration_seconds` is time to the response head, `smg_pd_ttft_seconds` the decode
response head: neither is TTFT)."""

from __future__ import annotations

from typing import Any

from monitor.conventions import names
from monitor.conventions.names import (
    AVAILABILITY_SLI,
    GATEWAY_OWN_PATHS,
    SMG_ADMISSION_INFLIGHT,
    SMG_ADMISSION_QUEUE_DEPTH,
    SMG_ADMISSION_REJECTED,
    SMG_ENGINE_RUNNING,
    SMG_ENGINE_WAITING,
    SMG_HTTP_RESPONSES,
    SMG_OVERLOAD_SHED,
    SMG_PD_ADMISSION_WINDOW,
    SMG_PD_HEAD,
    SMG_PD_PREFILL,
    SMG_ROUTER_DURATION,
    SMG_ROUTER_ERRORS,
    SMG_ROUTER_REQUESTS,
    SMG_WORKER_CB_STATE,
    SMG_WORKER_HEALTH,
    SMG_WORKER_RETRIES,
)
from monitor.generate.dashboards.common import RATE, D, Matchers, quantile, timeseries
from monitor.promql import Expr, aggregate, binop, rate_sum, select

ROUTER: Matchers = (*D, ("role", "=", "router"))
AVAILABILITY: Matchers = (*D, ("sli", "=", AVAILABILITY_SLI))
ONLY_1_13 = " smg 1.13 only (sglang-router 0.3.2 has no such family)."


def _sel(metric: str) -> Expr:
    return select(metric, ROUTER)


def _served(metric: str) -> Expr:
    """The gateway's answers on serving paths (smg 1.13 labels `path`; 0.3.2's series have none and match)."""
    return select(metric, (*ROUTER, ("path", "!~", GATEWAY_OWN_PATHS)))


def _rate(sel: Expr, *by: str) -> Expr:
    return rate_sum(sel, RATE, by)


def _quantiles(family: str, legend: str, nhcb: bool = False) -> list[tuple[Expr, str]]:
    # The gateway's jobs convert to native histograms too under --histograms nhcb (prometheus_config).
    return [(quantile(q, family, ROUTER, nhcb=nhcb), f"{legend} p{round(q * 100):d}") for q in (0.5, 0.99)]


def traffic_panels() -> list[tuple[Any, int, int]]:
    sli = select(names.sli_error("5m"), AVAILABILITY)
    sli1h = select(names.sli_error("1h"), AVAILABILITY)
    return [
        (timeseries("Gateway requests", "Requests per second the gateway routed, by endpoint and backend "
                    "(regular or pd), and its answers on serving paths (its own probe and registry endpoints "
                    "left out where smg 1.13 labels the path).",
                    [(_rate(_sel(SMG_ROUTER_REQUESTS), "endpoint", "backend_type"),
                      "routed {{endpoint}} {{backend_type}}"),
                     (_rate(_served(SMG_HTTP_RESPONSES)), "answered")], unit="reqps"), 8, 8),
        (timeseries("Gateway answers by status code", "Answers per second by status code and the gateway's "
                    "error_code: 499 client_closed_request is a client that left (smg 1.13; 0.3.2 counts it 200), "
                    "429 admission_queue_full a request refused at admission; 5xx are server-side failures. Routing "
                    "errors by type: backend_error (a worker's 5xx passed through, or a stream broken mid-body), "
                    "validation_error (a worker's 4xx), unavailable (no worker available).",
                    [(_rate(_served(SMG_HTTP_RESPONSES), "status_code", "error_code"), "{{status_code}} {{error_code}}"),
                     (_rate(_sel(SMG_ROUTER_ERRORS), "error_type"), "error {{error_type}}")],
                    unit="reqps"), 8, 8),
        (timeseries("Gateway availability", "Share of requests answered without a server-side failure (5xx, and "
                    "on smg 1.13 a stream broken mid-body) over 5m and 1h, from the availability SLO's rules "
                    "(deployments with availability_objective), against its objective.",
                    [(binop(1, "-", sli), "5m"), (binop(1, "-", sli1h), "1h"),
                     (select(names.OBJECTIVE, AVAILABILITY), "objective")],
                    unit="percentunit"), 8, 8),
    ]


def latency_panels(nhcb: bool = False) -> list[tuple[Any, int, int]]:
    return [
        (timeseries("Gateway time to response headers", "p50/p99 of smg_router_request_duration_seconds: the time "
                    "until the gateway sent the client the response head. Not TTFT and, for streams, not the "
                    "request's end (measured: 0.30 s for a stream whose first token came at 1.81 s and which ended "
                    "at 3.04 s); in PD mode it includes waiting for the prefill leg. Only successful routes are "
                    "observed.", _quantiles(SMG_ROUTER_DURATION, "headers", nhcb), unit="s"), 12, 8),
        (timeseries("PD phases at the gateway: prefill leg and decode response head", "p50/p99 of "
                    "smg_pd_prefill_duration_seconds (prefill dispatch to the end of the prefill response) and of "
                    "smg_pd_ttft_seconds, which on the HTTP router is the time to the decode worker's response "
                    "head, not to the first token: about 0 for a streamed SGLang request (0.001 s measured for a "
                    "first token at 2.0 s). SGLang's sglang:time_to_first_token_seconds stays the TTFT source."
                    + ONLY_1_13, [*_quantiles(SMG_PD_PREFILL, "prefill leg", nhcb), *_quantiles(SMG_PD_HEAD, "decode head", nhcb)],
                    unit="s"), 12, 8),
    ]


def worker_panels() -> list[tuple[Any, int, int]]:
    return [
        (timeseries("Gateway workers: health and circuit breakers", "Per worker as the gateway sees it: health "
                    "(1 healthy, 0 unhealthy, -1 removed) and circuit breaker (0 closed, 1 open: nothing is sent "
                    "to it, 2 half-open).",
                    [(_sel(SMG_WORKER_HEALTH), "health {{worker}}"), (_sel(SMG_WORKER_CB_STATE), "breaker {{worker}}")]),
         12, 8),
        (timeseries("Gateway retries and shedding", "Retries per second by worker type; requests shed because "
                    "workers were over the overload thresholds, by stage (smg 1.13 only); requests refused at "
                    "admission, by reason (full: 429, timeout: 503; smg 1.13 with --max-concurrent-requests).",
                    [(_rate(_sel(SMG_WORKER_RETRIES), "worker_type"), "retries {{worker_type}}"),
                     (_rate(_sel(SMG_OVERLOAD_SHED), "stage"), "shed {{stage}}"),
                     (_rate(_sel(SMG_ADMISSION_REJECTED), "reason"), "admission rejected {{reason}}")],
                    unit="reqps"), 12, 8),
        (timeseries("Gateway admission and queues", "Requests holding an admission slot and waiting for one, the "
                    "PD admission window per decode worker, and the workers' running and waiting requests as the "
                    "gateway last polled them (every --load-monitor-interval, 10 s by default)." + ONLY_1_13,
                    [(aggregate("sum", _sel(SMG_ADMISSION_INFLIGHT)), "admission in flight"),
                     (aggregate("sum", _sel(SMG_ADMISSION_QUEUE_DEPTH)), "admission queue"),
                     (_sel(SMG_PD_ADMISSION_WINDOW), "PD window {{worker}}"),
                     (aggregate("sum", _sel(SMG_ENGINE_RUNNING), ("worker",)), "running {{worker}}"),
                     (aggregate("sum", _sel(SMG_ENGINE_WAITING), ("worker",)), "waiting {{worker}}")]), 24, 8),
    ]


def gateway_panels(nhcb: bool = False) -> list[tuple[Any, int, int]]:
    return [*traffic_panels(), *latency_panels(nhcb), *worker_panels()]
