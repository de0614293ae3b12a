"""Per-deployment dashboard (templated by `deployment`): latency vs target, SLO, goodput, load, cache, PD,
gateway (dashboards/gateway.py)."""

from __future__ import annotations

from typing import Any

from monitor.config import Config
from monitor.conventions import names, policy
from monitor.conventions.names import (
    COUNTERS,
    GAUGES,
    GOODPUT_REQUESTS_TOTAL,
    KV_TRANSFER_LATENCY,
    LOG_FINISHED_TOTAL,
    M_DISAGREEMENT,
    M_GOODPUT_RATIO,
    M_MISSED,
)
from monitor.conventions.policy import QUANTILES, RULE_WINDOWS
from monitor.conventions.slis import (
    GOODPUT_SLI,
    LEADING_SLI,
    LEADING_SOURCE,
    REQUEST_SLIS,
    SLI_BY_KEY,
    SLI_FAMILIES,
    SLI_RECORDS,
)
from monitor.generate.dashboards.common import (
    ENGINE,
    RATE,
    REQUESTS,
    D,
    Matchers,
    dashboard,
    distribution,
    heatmap,
    label_values,
    mean,
    quantile,
    query_result,
    query_var,
    sli_matchers,
    stat,
    timeseries,
)
from monitor.generate.dashboards.gateway import gateway_panels
from monitor.promql import Expr, aggregate, binop, rate_sum, select


def per_dp(metric: str) -> Expr:
    # Sum over dp_rank, never over tp_rank (every TP rank of an attention group repeats the value);
    # priority="" keeps the total when priority scheduling adds a breakdown.
    ranks = aggregate("max", select(metric, (*ENGINE, ("priority", "=", ""))), ("role", "instance", "dp_rank"))
    return aggregate("sum", ranks, ("role", "dp_rank"))


def sli_target(sli: str) -> Expr:
    """The selected deployment's target of `sli` (the rules' record)."""
    return select(names.TARGET, (*D, ("sli", "=", sli)))


def rate_of(metric: str, matchers: Matchers = D) -> Expr:
    """Per-second rate of a counter over the dashboard's rate interval, summed."""
    return rate_sum(select(metric, matchers), RATE)


def latency_panels(sli: str, nhcb: bool = False) -> list[tuple[Any, int, int]]:
    record = SLI_BY_KEY[sli]
    family, title, on = record.family, record.title, sli_matchers(sli)
    queries = [(quantile(q, family, on, nhcb=nhcb), f"p{round(q * 100):d}") for q in QUANTILES]
    queries.append((mean(family, on, nhcb), "mean"))
    queries.append((sli_target(sli), "target"))
    target_style = [{"matcher": {"id": "byName", "options": "target"},
                     "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                                    {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}}]}]
    source = ("histogram_quantile over SGLang's histogram converted to a native histogram with custom buckets "
              "(interpolated inside a bucket, display only), the mean from histogram_avg" if nhcb else
              "histogram_quantile over SGLang's buckets summed by le (interpolated inside a bucket, display "
              "only), the mean from _sum/_count")
    pct = timeseries(f"{title} percentiles vs target", f"{record.long_name.capitalize()}: p50/p90/p99 from "
                     f"{source}, and the SLO target (red dashed).", queries, unit="s", overrides=target_style)
    heat = heatmap(f"{title} distribution (target ${{{sli}_target}} s)",
                   f"Per-bucket rate of {family}; the title shows the SLO target of the selected deployment "
                   f"(from {names.TARGET}); buckets above it are bad events.",
                   distribution(family, on, nhcb), "" if nhcb else "{{le}}")
    return [(pct, 12, 8), (heat, 12, 8)]


def leading_panel() -> list[tuple[Any, int, int]]:
    """TPOT waits for requests to finish; this shows how fast the running ones decode now. In the row of the
    SLI the leading warning is about (`LEADING_SLI`), against its target."""
    about, source = LEADING_SLI.title, LEADING_SOURCE.title
    target_style = [{"matcher": {"id": "byName", "options": "target"},
                     "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                                    {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}}]}]
    lead = timeseries(
        f"{about} leading signal: seconds per token of the running requests",
        f"What {about} will show once the running requests finish (docs/leading-tpot.md): the mean {source} over the last "
        f"{names.TPOT_LEADING_WINDOW} (SGLang observes it per output chunk), running requests / generated tokens per "
        f"second (scheduler gauges), and the larger of the two, which {names.ALERT_TPOT_LEADING} compares with the "
        f"{about} target (red dashed); the page stays on the burn rate.",
        [(select(names.TPOT_LEADING, D), "{{source}}"), (sli_target(LEADING_SLI.key), "target")],
        unit="s", overrides=target_style)
    return [(lead, 24, 8)]


def slo_panels() -> list[tuple[Any, int, int]]:
    good = timeseries("SLI: share of good events", "1 - error ratio over 5m and 1h per SLI, with the objective.",
                      [(binop(1, "-", select(names.sli_error("5m"), D)), "5m {{sli}}"),
                       (binop(1, "-", select(names.sli_error("1h"), D)), "1h {{sli}}"),
                       (select(names.OBJECTIVE, D), "objective {{sli}}")], unit="percentunit")
    burns = timeseries("Burn rates (all windows)", "Error ratio / error budget for each window; thresholds for a 30d "
                       f"period (others scale them): {policy.burn_thresholds_text()}.",
                       [(select(names.burn_rate(w), D), f"{w} {{{{sli}}}}") for w in RULE_WINDOWS],
                       thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1},
                                   {"color": "red", "value": policy.PAGE_BURN_RATE}])
    budget = stat("Error budget left", "Budget remaining over the SLO period, per SLI.",
                  [(select(names.BUDGET_REMAINING, D), "{{sli}}")], unit="percentunit",
                  thresholds=[{"color": "red", "value": None}, {"color": "orange", "value": 0.25},
                              {"color": "green", "value": 0.5}])
    events = timeseries("SLI events per second", "Good and total events per second (5m) feeding the SLI.",
                        [(select(names.sli_total("5m"), D), "total {{sli}}"),
                         (select(names.sli_good("5m"), D), "good {{sli}}")], unit="reqps")
    return [(good, 12, 8), (burns, 12, 8), (budget, 6, 8), (events, 18, 8)]


def load_panels() -> list[tuple[Any, int, int]]:
    g = GAUGES
    return [
        (timeseries("Running and queued requests", "Per role and DP rank (max over TP ranks, priority=\"\").",
                    [(per_dp(g["num_running_reqs"]), "running {{role}} dp{{dp_rank}}"),
                     (per_dp(g["num_queue_reqs"]), "queued {{role}} dp{{dp_rank}}")]), 12, 8),
        (timeseries("KV-cache token usage", "Pool usage ratio per scheduler (max, never summed).",
                    [(aggregate("max", select(g["token_usage"], ENGINE), ("role", "instance", "dp_rank")),
                      "{{role}} {{instance}} dp{{dp_rank}}")], unit="percentunit",
                    thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 0.95}]), 12, 8),
        (timeseries("Prefix cache hit rate", "Last prefill batch's hit rate per scheduler, and the windowed rate "
                    "from cached tokens over prompt tokens.",
                    [(aggregate("max", select(g["cache_hit_rate"], ENGINE), ("role", "instance")),
                      "batch {{role}} {{instance}}"),
                     (binop(rate_of(COUNTERS["cached_tokens_total"], REQUESTS), "/",
                            rate_of(COUNTERS["prompt_tokens_total"], REQUESTS)), "windowed")],
                    unit="percentunit"), 12, 8),
        (timeseries("Throughput", "Generated tokens/s (scheduler gauge summed over DP ranks) and token counters.",
                    [(per_dp(g["gen_throughput"]), "gen {{role}} dp{{dp_rank}}"),
                     (rate_of(COUNTERS["generation_tokens_total"], REQUESTS), "output tokens/s"),
                     (rate_of(COUNTERS["prompt_tokens_total"], REQUESTS), "prompt tokens/s"),
                     (rate_of(COUNTERS["requests_total"], REQUESTS), "requests/s")]), 12, 8),
        (timeseries("Speculative decoding accept length", "Accepted tokens per verify step (max per scheduler).",
                    [(aggregate("max", select(g["spec_accept_length"], ENGINE), ("role", "instance", "dp_rank")),
                      "{{role}} {{instance}} dp{{dp_rank}}")]), 12, 8),
        (timeseries("Aborted and retracted requests", "Requests aborted (client disconnects, errors) and "
                    "retracted (KV pressure) per second.",
                    [(rate_of(COUNTERS["aborted_requests_total"], REQUESTS), "aborted"),
                     (rate_of(COUNTERS["retracted_total"], ENGINE), "retracted")],
                    unit="reqps"), 12, 8),
    ]


def pd_panels(nhcb: bool = False) -> list[tuple[Any, int, int]]:
    g = GAUGES
    queues = [(per_dp(g[k]), f"{k.removeprefix('num_').removesuffix('_reqs')} {{{{role}}}} dp{{{{dp_rank}}}}")
              for k in ("num_prefill_bootstrap_queue_reqs", "num_prefill_inflight_queue_reqs",
                        "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs")]
    return [
        (timeseries("PD queues", "Prefill bootstrap/inflight and decode prealloc/transfer queues (PD only).",
                    queues), 12, 8),
        (timeseries("KV transfer latency and failures", "p99 KV transfer latency (ms) and failed "
                    "transfers/bootstraps per second.",
                    [(quantile(0.99, KV_TRANSFER_LATENCY, D, nhcb=nhcb), "p99 transfer ms"),
                     (rate_of(COUNTERS["transfer_failed_total"]), "transfer failed/s"),
                     (rate_of(COUNTERS["bootstrap_failed_total"]), "bootstrap failed/s")]),
         12, 8),
    ]


def goodput_panels() -> list[tuple[Any, int, int]]:
    """From a request-log target (SGLang's --export-metrics-to-file): the per-request view."""
    good, finished = rate_of(GOODPUT_REQUESTS_TOTAL), rate_of(LOG_FINISHED_TOTAL)
    return [
        (timeseries("Goodput: requests meeting every target", "Share of finished requests that succeeded and met "
                    f"every latency target ({', '.join(SLI_BY_KEY[s].title for s in REQUEST_SLIS)}), per sidecar window, from the counters over the "
                    "dashboard's rate interval, and the goodput objective when the deployment has one.",
                    [(aggregate("max", select(M_GOODPUT_RATIO, D), ("window",)), "{{window}}"),
                     (binop(good, "/", finished), "counters"),
                     (select(names.OBJECTIVE, (*D, ("sli", "=", GOODPUT_SLI))), "objective")],
                    unit="percentunit"), 12, 8),
        (timeseries("Goodput and finished requests per second", "Requests per second that met every target "
                    "(goodput, as bench_serving --goodput) and all finished requests, from the request log.",
                    [(good, "goodput"), (finished, "finished")],
                    unit="reqps"), 12, 8),
        (timeseries("Requests missing a target (5m)", "Finished requests in the last 5 minutes by what they "
                    "missed; a request can miss several.",
                    [(aggregate("max", select(M_MISSED, (*D, ("window", "=", "5m"))), ("missed",)),
                      "{{missed}}")]), 12, 8),
        (timeseries("Histogram vs request log", "Request-log good ratio minus the histogram-derived one, per SLI "
                    "and window: bucket interpolation, lost lines or scrape gaps show here.",
                    [(aggregate("max", select(M_DISAGREEMENT, D), ("sli", "window")),
                      "{{sli}} {{window}}")], unit="percentunit"), 12, 8),
    ]


def build(config: Config, nhcb: bool = False) -> dict[str, Any]:
    rows = [("SLO", slo_panels())]
    rows += [(f"{sli.title} ({sli.long_name})",
              latency_panels(sli.key, nhcb) + (leading_panel() if sli == LEADING_SLI else []))
             for sli in SLI_RECORDS]
    rows += [("Goodput (request log)", goodput_panels())]
    rows += [("Load and cache", load_panels()), ("PD disaggregation", pd_panels(nhcb)),
             ("Gateway (smg 1.13, sglang-router 0.3.2)", gateway_panels(nhcb))]
    variables = [query_var("deployment", "Deployment", label_values(names.OBJECTIVE, "deployment"))]
    # Hidden variables carrying each SLI's target, shown in the heatmap titles.
    variables += [query_var(f"{sli}_target", f"{sli} target",
                            query_result(sli_target(sli)), hide=2,
                            regex=r"/\} ([0-9.eE+-]+) /") for sli in SLI_FAMILIES]
    return dashboard("SGLang deployment", "slo-monitor-deployment",
                     "One deployment: latency against the SLO target, burn rates, load, KV cache, PD, gateway.",
                     variables, rows)
