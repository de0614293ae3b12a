"""Every name the project reads or writes (SGLang and gateway families, the sidecar's series, rule and
alert names), like Sloth's `conventions`.

SGLang family names are given in their canonical colon form; `canonical_name` maps the underscore
spelling that prometheus_client >= 0.23 produces under OpenMetrics (and that the router's
`/engine_metrics` produces) back to it.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

SGLANG_PREFIX: Final = "sglang:"
SGLANG_ALT_PREFIX: Final = "sglang_"
# --- SGLang counters and gauges the engine uses ----------------------------------------------
STAGE_LATENCY: Final = "sglang:per_stage_req_latency_seconds"
STAGE_LABEL: Final = "stage"
STAGE_PREFILL_FORWARD: Final = "prefill_forward"
STAGE_PREFILL_BOOTSTRAP: Final = "prefill_bootstrap"
STAGE_PREFILL_TRANSFER: Final = "prefill_transfer_kv_cache"
STAGE_DECODE_WAITING: Final = "decode_waiting"
# The scheduler stages a recording keeps (see the stage notes below), each as its histogram's _sum and _count:
# counters like any other (reset-aware, merged over the targets that observe the stage), so an analysis of the
# recording reads a stage's mean seconds per request as one of Prometheus does (rate of _sum / rate of _count).
RECORDED_STAGES: Final = (STAGE_PREFILL_FORWARD, STAGE_PREFILL_BOOTSTRAP, STAGE_PREFILL_TRANSFER, STAGE_DECODE_WAITING)


def stage_counters(stage: str) -> tuple[str, str]:
    """The sidecar's counter names for a stage's seconds and requests (snapshot `counters` keys)."""
    return f"stage_{stage}_seconds_total", f"stage_{stage}_requests_total"


COUNTERS: Final[dict[str, str]] = {
    "requests_total": "sglang:num_requests_total",
    "prompt_tokens_total": "sglang:prompt_tokens_total",
    "generation_tokens_total": "sglang:generation_tokens_total",
    "aborted_requests_total": "sglang:num_aborted_requests_total",
    "cached_tokens_total": "sglang:cached_tokens_total",
    "bootstrap_failed_total": "sglang:num_bootstrap_failed_reqs_total",
    "transfer_failed_total": "sglang:num_transfer_failed_reqs_total",
    "retracted_total": "sglang:num_retracted_requests_total",  # KV pressure pushed a running request back
    # SGLang's HTTP middleware counts a request as it arrives, before any inference
    # (observability/http_request_metrics.py): the measured arrival rate, on the routes in COUNTER_MATCHERS.
    "arrived_total": "sglang:http_requests_total",
    **{name: f"{STAGE_LATENCY}_{suffix}" for stage in RECORDED_STAGES
       for name, suffix in zip(stage_counters(stage), ("sum", "count"))},
}
# The routes that start a generation in SGLang 0.5.23 (entrypoints/http_server.py); /metrics, /health and
# the rest are counted by the same middleware and are not arrivals.
GENERATION_ENDPOINTS: Final = ("/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages")
GAUGES: Final[dict[str, str]] = {
    "num_running_reqs": "sglang:num_running_reqs",
    "num_queue_reqs": "sglang:num_queue_reqs",
    "token_usage": "sglang:token_usage",
    "gen_throughput": "sglang:gen_throughput",
    "cache_hit_rate": "sglang:cache_hit_rate",
    "spec_accept_length": "sglang:spec_accept_length",
    "num_prefill_bootstrap_queue_reqs": "sglang:num_prefill_bootstrap_queue_reqs",
    "num_prefill_inflight_queue_reqs": "sglang:num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs": "sglang:num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs": "sglang:num_decode_transfer_queue_reqs",
}

# Gauges that are ratios or per-rank averages: combine with max, not sum.
RATIO_GAUGES: Final = frozenset({"token_usage", "cache_hit_rate", "spec_accept_length"})
KV_TRANSFER_LATENCY: Final = "sglang:kv_transfer_latency_ms"
# Scheduler waits and stages (SGLang 0.5.23 observability/req_time_stats.py): queue_time_seconds is one
# sample per request, waiting queue -> first forward, on every engine role; per_stage_req_latency_seconds
# carries `stage`. The PD stages that make up a TTFT, in the order a request passes them, each with the role
# that observes it: the bootstrap handshake (which waits for the decode side's KV preallocation), the
# prefill queue (queue_time on the prefill server), prefill compute, the KV transfer, and the decode queue
# (queue_time on the decode server, the same as its `decode_waiting` stage).
QUEUE_TIME: Final = "sglang:queue_time_seconds"
# The request-latency histograms the latency SLIs are read from (conventions/slis.py takes them from here).
TTFT_FAMILY: Final = "sglang:time_to_first_token_seconds"
TPOT_FAMILY: Final = "sglang:request_time_per_output_token_seconds"
ITL_FAMILY: Final = "sglang:inter_token_latency_seconds"
E2E_FAMILY: Final = "sglang:e2e_request_latency_seconds"
LATENCY_FAMILIES: Final = frozenset({TTFT_FAMILY, TPOT_FAMILY, ITL_FAMILY, E2E_FAMILY, QUEUE_TIME})

# Labels that only identify a process, not a series: dropped at parse time.
DROPPED_LABELS: Final = frozenset({"pid"})

# --- Router ------------------------------------------------------------------------------------
# The gateways the project is tested against (monitor/emulate/router.py launches and finds them):
# the Shepherd Model Gateway people deploy today, and the sglang-router it replaced.
GATEWAY_SMG: Final = "smg-1.13"
GATEWAY_SGLANG_ROUTER: Final = "sglang-router-0.3.2"
GATEWAYS: Final = (GATEWAY_SMG, GATEWAY_SGLANG_ROUTER)
DEFAULT_GATEWAY: Final = GATEWAY_SMG
# The config's `source:` values, one list each: SGLang servers, the gateway's two listeners, accelerator
# telemetry (monitor/telemetry/ reads each into `accelerator_*`), and SGLang's per-request log.
SGLANG_SOURCE: Final = "sglang"
GATEWAY_SOURCES: Final = ("router", "router-engine-metrics")
HTTP_TELEMETRY_SOURCES: Final = ("npu-exporter", "dcgm")  # exporters scraped over HTTP; npu-smi and nvml are local
TELEMETRY_SOURCES: Final = ("npu-smi", *HTTP_TELEMETRY_SOURCES, "nvml")
REQUEST_LOG_SOURCE: Final = "request-log"
SOURCES: Final = (SGLANG_SOURCE, *GATEWAY_SOURCES, *TELEMETRY_SOURCES, REQUEST_LOG_SOURCE)
URL_SOURCES: Final = (SGLANG_SOURCE, *GATEWAY_SOURCES, *HTTP_TELEMETRY_SOURCES)  # the config's `url:` is required
# Families of smg 1.13 that sglang-router 0.3.2 does not have, each seen in the real binary's exposition or
# its metric descriptions (docs/gateways.md says what each measures, with the capture that shows it).
SMG_PD_HEAD: Final = "smg_pd_ttft_seconds"  # prefill dispatch to the decode response *head* on the HTTP router: not TTFT
SMG_PD_PREFILL: Final = "smg_pd_prefill_duration_seconds"
SMG_PD_RENDEZVOUS_FAILURES: Final = "smg_pd_rendezvous_failures_total"
# smg 1.13 counts one rendezvous failure in this phase per prefill whose bootstrap port refused the probe at
# registration (an emulated or capture worker has no bootstrap listener): not a per-request failure.
RENDEZVOUS_PROBE_PHASE: Final = "probe"
SMG_PD_ADMISSION_WINDOW: Final = "smg_pd_admission_window"
SMG_PD_FAMILIES: Final = (
    SMG_PD_HEAD,
    SMG_PD_PREFILL,
    "smg_pd_decode_ttft_seconds",
    "smg_pd_kv_transfer_duration_seconds",
    "smg_pd_bootstrap_failures_total",
    "smg_pd_kv_transfer_failures_total",
    SMG_PD_RENDEZVOUS_FAILURES,
    SMG_PD_ADMISSION_WINDOW,
    "smg_pd_admission_waits_total",
    "smg_pd_admission_sheds_total",
    "smg_pd_prefill_admission_inflight",
    "smg_pd_prefill_admission_queued",
    "smg_pd_prefill_admission_wait_seconds",
    "smg_pd_prefill_admission_rejections_total",
)
SMG_ENGINE_RUNNING: Final = "smg_engine_running_requests"
SMG_ENGINE_WAITING: Final = "smg_engine_waiting_requests"
SMG_ENGINE_FAMILIES: Final = (  # the gateway's copies of the workers' load (labels worker, model, dp_rank)
    SMG_ENGINE_RUNNING,
    SMG_ENGINE_WAITING,
    "smg_engine_token_usage",
    "smg_engine_gen_throughput",
    "smg_engine_cache_hit_rate",
)
SMG_OVERLOAD_SHED: Final = "smg_worker_overload_shed_total"  # stage: selection, dispatch, pd_admission
SMG_WORKERS_OVERLOADED: Final = "smg_workers_overloaded"
SMG_WORKER_FAMILIES: Final = (
    "smg_worker_requests_total",  # per worker URL, counted at each send (retries and both PD legs included)
    SMG_OVERLOAD_SHED,
    "smg_worker_overload_fallback_total",
    SMG_WORKERS_OVERLOADED,
    "smg_worker_stalled",
)
SMG_ADMISSION_INFLIGHT: Final = "smg_admission_inflight"  # always exposed by 1.13, never by 0.3.2
SMG_ADMISSION_QUEUE_DEPTH: Final = "smg_admission_queue_depth"
SMG_ADMISSION_REJECTED: Final = "smg_admission_queue_rejected_total"  # reason: full (429), timeout (503)
SMG_ADMISSION_FAMILIES: Final = (SMG_ADMISSION_INFLIGHT, SMG_ADMISSION_QUEUE_DEPTH, SMG_ADMISSION_REJECTED)
SMG_WORKER_HEALTH: Final = "smg_worker_health"  # per worker: 1 healthy, 0 unhealthy, -1 removed (0.3.2)
SMG_WORKER_CB_STATE: Final = "smg_worker_cb_state"  # per worker: 0 closed, 1 open, 2 half-open, -1 removed
CB_OPEN: Final = 1.0
SMG_WORKER_RETRIES: Final = "smg_worker_retries_total"
SMG_ROUTER_REQUESTS: Final = "smg_router_requests_total"
SMG_ROUTER_DURATION: Final = "smg_router_request_duration_seconds"  # time to the response head, not TTFT
SMG_ROUTER_ERRORS: Final = "smg_router_request_errors_total"
SMG_HTTP_RESPONSES: Final = "smg_http_responses_total"
SMG_WORKER_ERRORS: Final = "smg_worker_errors_total"
ROUTER_FAMILIES: Final = (
    SMG_ROUTER_REQUESTS,
    SMG_ROUTER_DURATION,
    SMG_ROUTER_ERRORS,
    "smg_router_upstream_responses_total",
    SMG_HTTP_RESPONSES,
    SMG_WORKER_HEALTH,
    "smg_worker_pool_size",
    SMG_WORKER_ERRORS,
    SMG_WORKER_RETRIES,
    SMG_WORKER_CB_STATE,
    *SMG_PD_FAMILIES,
    *SMG_ENGINE_FAMILIES,
    *SMG_WORKER_FAMILIES,
    *SMG_ADMISSION_FAMILIES,
)
# Families only smg 1.13 exposes: rules for a deployment behind sglang-router 0.3.2 never read them.
SMG_1_13_ONLY: Final = frozenset({*SMG_PD_FAMILIES, *SMG_ENGINE_FAMILIES, *SMG_WORKER_FAMILIES,
                                  *SMG_ADMISSION_FAMILIES})


def gateway_has(gateway: str, family: str) -> bool:
    """Whether `gateway` (a name in GATEWAYS) exposes `family` (one of the router families above)."""
    return gateway == GATEWAY_SMG or family not in SMG_1_13_ONLY


# --- The gateway availability SLI: share of requests answered without a server-side failure ----------
# Decided from the real binaries' captures (tests/fixtures/gateway/measurements.json, availability.json;
# the reasoning is in docs/gateways.md, "The availability SLI"). A matcher is (label, op, value) with
# Prometheus's semantics: op one of = != =~ !~, regexes anchored, a missing label reads as "".
AVAILABILITY_SLI: Final = "availability"
# The gateway's own endpoints (health and readiness probes, worker registry, load and metrics reads, model
# listing): requests no worker serves, some answered 5xx while no worker is healthy. smg 1.13 labels its
# responses with `path`; 0.3.2 cannot tell them apart.
GATEWAY_OWN_PATHS: Final = ("/health|/health_generate|/liveness|/readiness|/engine_metrics|/metrics|/workers(/.*)?|"
                            "/get_loads|/loads|/v1/loads|/flush_cache|/v1/models|/get_model_info|/get_server_info")
Matcher = tuple[str, str, str]


# Which series of a counter's family count (Prometheus label matching; none: every series).
COUNTER_MATCHERS: Final[dict[str, tuple[Matcher, ...]]] = {
    "arrived_total": (("endpoint", "=~", "|".join(re.escape(e) for e in GENERATION_ENDPOINTS)), ("method", "=", "POST")),
    **{name: ((STAGE_LABEL, "=", stage),) for stage in RECORDED_STAGES for name in stage_counters(stage)},
}
# Counters that share their family with another (the stages' _sum and _count): told apart by their matchers, and
# what their expired series added up to is kept per counter, not per family.
SHARED_FAMILY_COUNTERS: Final = frozenset(
    c for c, f in COUNTERS.items() if sum(1 for other in COUNTERS.values() if other == f) > 1)


def retired_key(counter: str) -> str:
    """Where the totals of a counter's expired series are kept (SeriesBook.retired_scalars): its family, unless
    it shares that family with another counter (recordings before the stages keep families)."""
    return counter if counter in SHARED_FAMILY_COUNTERS else COUNTERS[counter]


class SeriesMatch(NamedTuple):
    family: str
    matchers: tuple[Matcher, ...] = ()


class AvailabilitySeries(NamedTuple):
    """Per gateway version: the series whose increase counts requests, and those counting failed ones."""

    total: SeriesMatch
    bad: tuple[SeriesMatch, ...]


_SERVED = ("path", "!~", GATEWAY_OWN_PATHS)
AVAILABILITY_SERIES: Final[dict[str, AvailabilitySeries]] = {
    # Every response on a serving path, counted when its last frame is sent (499, 4xx and the 503s of
    # admission included: admission answers before routing, so smg_router_requests_total misses them).
    # Bad: a 5xx the gateway made itself (it names why in error_code; never also a backend_error), plus
    # backend_error, which counts both a worker's 5xx passed through (error_code "") and a stream broken
    # mid-body (status 200): so a passed-through 5xx counts once.
    GATEWAY_SMG: AvailabilitySeries(
        total=SeriesMatch(SMG_HTTP_RESPONSES, (_SERVED,)),
        bad=(SeriesMatch(SMG_HTTP_RESPONSES, (_SERVED, ("status_code", "=~", "5.."), ("error_code", "!=", ""))),
             SeriesMatch(SMG_ROUTER_ERRORS, (("error_type", "=", "backend_error"),)))),
    # No `path` label: the routed requests are the total (the gateway's own endpoints and its pre-routing
    # 408s are not in it); every 5xx is bad, including the own endpoints' (e.g. /readiness while no worker
    # is healthy). A stream broken mid-body is counted 200 with no error anywhere: invisible here.
    GATEWAY_SGLANG_ROUTER: AvailabilitySeries(
        total=SeriesMatch(SMG_ROUTER_REQUESTS),
        bad=(SeriesMatch(SMG_HTTP_RESPONSES, (("status_code", "=~", "5.."),)),)),
}
# The sidecar's two cumulative counters of the SLI (its snapshots' `counters` keys).
GATEWAY_REQUESTS: Final = "gateway_requests_total"
GATEWAY_FAILED: Final = "gateway_failed_requests_total"

# --- Clients that gave up before the end of their answer (docs/goodput.md, "Clients that gave up") -------
# Not a server-side failure (the availability SLI leaves them out) but lost goodput, and invisible to the
# latency SLIs: SGLang observes no TTFT for a request aborted before its first token, and its per-request
# log has no line for a stream whose client left. What is measured, per deployment:
#   - smg 1.13: its answers with status 499 (`error_code="client_closed_request"`) on the serving paths,
#     counted when the client's connection closed, over all its answers on those paths (the ratio);
#     sglang-router 0.3.2 counts such a request 200: not measurable there (None);
#   - SGLang 0.5.23: `sglang:num_aborted_requests_total` on the servers that answer requests, +1 per
#     `abort_request` (a streamed client gone for 2 s, a non-streamed one noticed, the /abort_request API).
# Neither says how old a request was when its client left: smg's in-flight age gauge has 0-30 s as its
# first band, and SGLang's E2E histogram mixes the aborted requests it observes with the finished ones.
CLIENT_CLOSED_SERIES: Final[dict[str, SeriesMatch | None]] = {
    GATEWAY_SMG: SeriesMatch(SMG_HTTP_RESPONSES, (_SERVED, ("status_code", "=", "499"))),
    GATEWAY_SGLANG_ROUTER: None,
}
# The sidecar's cumulative counters for them (snapshot `counters` keys; SGLang's is COUNTERS' own).
GATEWAY_ANSWERED: Final = "gateway_answered_requests_total"
GATEWAY_CLIENT_CLOSED: Final = "gateway_client_closed_requests_total"
# The gateway's /engine_metrics merges every worker's /metrics and labels each series with its worker.
WORKER_ADDR_LABEL: Final = "worker_addr"
# --- What the sidecar exports --------------------------------------------------------------
NS: Final = "slo_monitor"
M_SLI_TARGET = f"{NS}_sli_target_seconds"
M_OBJECTIVE = f"{NS}_sli_objective_ratio"
M_TARGET_IS_EDGE = f"{NS}_sli_target_is_bucket_edge"
M_GOOD_RATIO = f"{NS}_sli_good_ratio"
M_GOOD_RATIO_LOWER = f"{NS}_sli_good_ratio_lower_bound"
M_GOOD_RATIO_UPPER = f"{NS}_sli_good_ratio_upper_bound"
M_EVENTS = f"{NS}_sli_events"
M_BURN_RATE = f"{NS}_sli_burn_rate"
M_BUDGET_REMAINING = f"{NS}_sli_error_budget_remaining_ratio"
M_LATENCY_QUANTILE = f"{NS}_latency_seconds"
M_LATENCY_MEAN = f"{NS}_latency_mean_seconds"
M_LOAD = f"{NS}_deployment_load"
M_TARGET_UP = f"{NS}_target_up"
M_SCRAPE_DURATION = f"{NS}_target_scrape_duration_seconds"
M_SCRAPE_SAMPLES = f"{NS}_target_scrape_samples"
M_SCRAPE_BYTES = f"{NS}_target_scrape_bytes"
M_LAST_SUCCESS = f"{NS}_target_last_success_timestamp_seconds"
M_SCRAPES = f"{NS}_target_scrapes_total"
M_SCRAPE_ERRORS = f"{NS}_target_scrape_errors_total"
M_COUNTER_RESETS = f"{NS}_target_restarts_total"  # counter resets = SGLang restarts
M_SERIES_RETIRED_EARLY = f"{NS}_target_series_retired_early_total"  # label churn (monitor.slo.engine)
M_DEPLOYMENT_INFO = f"{NS}_deployment_info"
M_CLIENT_CLOSED = f"{NS}_client_closed_requests"  # gateway 499s in the window (labels deployment, window)
M_CLIENT_CLOSED_RATIO = f"{NS}_client_closed_ratio"  # ... over the gateway's answers in the window
M_ABORTED = f"{NS}_aborted_requests"  # SGLang's aborted requests in the window

# --- The leading TPOT signal (docs/leading-tpot.md) ---------------------------------------------
# TPOT is observed when a request finishes, a 1K-token answer ~100 s after a slowdown began. SGLang 0.5.23
# also says, while requests run, how fast they decode: the ITL histogram per output chunk, and each
# scheduler's gen_throughput with its num_running_reqs. The seconds per token of the requests running now:
#   itl             rate(ITL _sum) / rate(ITL _count) over TPOT_LEADING_WINDOW (token-weighted mean)
#   gen_throughput  sum(num_running_reqs) / sum(gen_throughput) over the ranks that answer requests
#   max             the larger of the two: whichever sees a slowdown first
# Over the TPOT target for TPOT_LEADING_FOR: a warning (severity "warning", routed as a ticket); the page
# stays on the multi-window burn rate of the finished requests.
M_TPOT_LEADING = f"{NS}_tpot_leading_seconds"  # the sidecar's, labels deployment, source
TPOT_LEADING = f"{NS}:tpot_leading:seconds"  # the recording rule's, labels deployment, source
TPOT_LEADING_SOURCES: Final = ("itl", "gen_throughput", "max")
TPOT_LEADING_WINDOW: Final = "1m"
TPOT_LEADING_FOR: Final = "1m"
# The sidecar's own loops (monitor.scrape.supervise): one `scrape` loop per deployment and the `sidecar`
# loop (request logs, recording). A loop with no completed cycle in LOOP_STALE_INTERVALS scrape
# intervals is stale: /healthz fails and ALERT_LOOP_STUCK fires.
LOOP_SCRAPE: Final = "scrape"
LOOP_SIDECAR: Final = "sidecar"
LOOP_STALE_INTERVALS: Final = 3
M_SCRAPE_INTERVAL = f"{NS}_scrape_interval_seconds"
M_LOOP_LAST_CYCLE = f"{NS}_loop_last_cycle_timestamp_seconds"
M_LOOP_CYCLE_AGE = f"{NS}_loop_last_cycle_age_seconds"
M_LOOP_RESTARTS = f"{NS}_loop_restarts_total"
# The recording (sidecar.recording_path): failed writes (disk full, I/O error) and the last tick written;
# ALERT_RECORDING_FAILING reads the first, /healthz says "degraded" while writes fail.
M_RECORDING_WRITE_ERRORS = f"{NS}_recording_write_errors_total"
M_RECORDING_LAST_WRITE = f"{NS}_recording_last_write_timestamp_seconds"
# Config reloads (SIGHUP, POST /-/reload), named after Prometheus's prometheus_config_last_reload_*.
M_CONFIG_RELOAD_OK = f"{NS}_config_last_reload_successful"
M_CONFIG_RELOAD_TS = f"{NS}_config_last_reload_success_timestamp_seconds"

# The sidecar's own port (monitor/export/connections.py): connections closed at accept because
# sidecar.max_connections were open, failed accepts (out of file descriptors), and the open count and cap.
M_HTTP_CONNECTIONS_SHED = f"{NS}_http_connections_shed_total"
M_HTTP_ACCEPT_ERRORS = f"{NS}_http_accept_errors_total"
M_HTTP_CONNECTIONS_OPEN = f"{NS}_http_connections_open"
M_HTTP_CONNECTIONS_LIMIT = f"{NS}_http_connections_limit"

# Request-log series (per-request goodput from SGLang's --export-metrics-to-file; monitor.requestlog).
M_GOODPUT_RATIO = f"{NS}_goodput_ratio"
M_GOODPUT_RATE = f"{NS}_goodput_requests_per_second"
M_LOG_REQUESTS = f"{NS}_request_log_requests"
M_MISSED = f"{NS}_requests_missed"
M_LOG_SLI_GOOD = f"{NS}_request_log_sli_good_ratio"
M_DISAGREEMENT = f"{NS}_sli_source_disagreement_ratio"
M_LOG_LINES = f"{NS}_request_log_lines"  # counters: exposed with `_total`
M_LOG_ERRORS = f"{NS}_request_log_errors"
M_LOG_FINISHED = f"{NS}_request_log_finished_requests"
M_GOODPUT_REQUESTS = f"{NS}_goodput_requests"
# The sample names Prometheus stores for the two counters the goodput SLO rules read.
LOG_FINISHED_TOTAL = M_LOG_FINISHED + "_total"
GOODPUT_REQUESTS_TOTAL = M_GOODPUT_REQUESTS + "_total"

# Accelerator series (monitor.telemetry): base units, one label set for every per-chip series.
ACCEL_LABELS: Final = ("deployment", "node", "device", "chip", "vendor")
M_ACCEL_UTILIZATION = "accelerator_utilization_ratio"
M_ACCEL_MEMORY_USED = "accelerator_memory_used_bytes"
M_ACCEL_MEMORY_TOTAL = "accelerator_memory_total_bytes"
M_ACCEL_TEMPERATURE = "accelerator_temperature_celsius"
M_ACCEL_TEMPERATURE_SLOWDOWN = "accelerator_temperature_slowdown_celsius"  # the chip's own limit (NVML, DCGM)
M_ACCEL_THERMAL_THROTTLING = "accelerator_thermal_throttling"  # 1 while clocks are lowered for heat
M_ACCEL_POWER = "accelerator_power_watts"
M_ACCEL_HEALTH = "accelerator_health"
M_ACCEL_HEALTH_INFO = "accelerator_health_info"
M_ACCEL_LINK_UP = "accelerator_link_up"
M_ACCEL_PROCESSES = "accelerator_processes"
M_ACCEL_INFO = "accelerator_info"
M_ACCEL_ECC = "accelerator_ecc_errors"  # counter: exposed with `_total`
M_ACCEL_UP = "accelerator_telemetry_up"
M_ACCEL_DURATION = "accelerator_telemetry_duration_seconds"
# The exporters' own families (monitor.telemetry reads them; the analyzer falls back on them where
# Prometheus has no accelerator_* series): Ascend npu-exporter and NVIDIA dcgm-exporter, in their units.
NPU_EXPORTER_PREFIX: Final = "npu_chip_info_"
NPU_TEMPERATURE: Final = NPU_EXPORTER_PREFIX + "temperature"  # °C
NPU_UTILIZATION: Final = NPU_EXPORTER_PREFIX + "utilization"  # percent
NPU_HBM_USED: Final = NPU_EXPORTER_PREFIX + "hbm_used_memory"  # MB
NPU_HBM_TOTAL: Final = NPU_EXPORTER_PREFIX + "hbm_total_memory"  # MB
NPU_POWER: Final = NPU_EXPORTER_PREFIX + "power"  # W
NPU_HEALTH: Final = NPU_EXPORTER_PREFIX + "health_status"  # 1 healthy, 0 unhealthy, -1 unknown
DCGM_PREFIX: Final = "DCGM_FI_DEV_"
DCGM_TEMPERATURE: Final = DCGM_PREFIX + "GPU_TEMP"  # °C
DCGM_UTILIZATION: Final = DCGM_PREFIX + "GPU_UTIL"  # percent
DCGM_FB_USED: Final = DCGM_PREFIX + "FB_USED"  # MiB
DCGM_FB_FREE: Final = DCGM_PREFIX + "FB_FREE"  # MiB
DCGM_POWER: Final = DCGM_PREFIX + "POWER_USAGE"  # W
DCGM_SLOWDOWN_TEMPERATURE: Final = DCGM_PREFIX + "SLOWDOWN_TEMP"  # °C, where the site's counters CSV adds it
# Prometheus's own series: each target's scrape health, and the firing alerts.
UP: Final = "up"
ALERTS: Final = "ALERTS"

# --- What the generated rules record and alert on (Sloth-style, one family per concept) -------
# Every SLO series carries `deployment` and `sli`; windows are in the name (`..:rate5m`) and keep
# the nominal window even under --time-scale, so dashboards and tests select by labels only.


def sli_good(window: str) -> str:
    return f"{NS}:sli_good:rate{window}"


def sli_total(window: str) -> str:
    return f"{NS}:sli_total:rate{window}"


def sli_error(window: str) -> str:
    return f"{NS}:sli_error:ratio_rate{window}"


def burn_rate(window: str) -> str:
    return f"{NS}:burn_rate:ratio_rate{window}"


def latency_mean(window: str) -> str:
    return f"{NS}:latency_mean:seconds_rate{window}"


SLI_ERROR_PERIOD: Final = f"{NS}:sli_error:ratio_period"  # + label period="30d"
PERIOD_BURN_RATE: Final = f"{NS}:period_burn_rate:ratio"
BUDGET_REMAINING: Final = f"{NS}:error_budget_remaining:ratio"
OBJECTIVE: Final = f"{NS}:objective:ratio"
ERROR_BUDGET: Final = f"{NS}:error_budget:ratio"
TARGET: Final = f"{NS}:target:seconds"
QUEUE: Final = f"{NS}:queue_requests:sum"  # labels deployment, role
RUNNING: Final = f"{NS}:running_requests:sum"  # labels deployment, role

# Alerts. Burn-rate alerts carry severity, long_window, short_window, burn_rate_threshold.
ALERT_PAGE: Final = "SLOErrorBudgetBurnFast"  # severity=page: 1h/5m and 6h/30m
ALERT_TICKET: Final = "SLOErrorBudgetBurnSlow"  # severity=ticket: 1d/2h and 3d/6h
ALERT_TARGET_DOWN: Final = "SGLangTargetDown"
ALERT_METRICS_ABSENT: Final = "SGLangMetricsAbsent"
ALERT_QUEUE_GROWING: Final = "SGLangQueueGrowing"
ALERT_KV_FULL: Final = "SGLangKVCacheNearFull"
ALERT_PD_TRANSFER: Final = "SGLangPDTransferFailures"
ALERT_PD_BOOTSTRAP: Final = "SGLangPDBootstrapFailures"
ALERT_REGRESSION: Final = "SGLangLatencyRegression"  # label sli=tpot|ttft
ALERT_TPOT_LEADING: Final = "SLOTPOTLeadingWarning"  # severity=warning, sli=tpot
ALERT_ROUTER_WORKER: Final = "SGLangRouterWorkerUnhealthy"
ALERT_GATEWAY_CIRCUIT_OPEN: Final = "SGLangGatewayCircuitBreakerOpen"
ALERT_GATEWAY_SHEDDING: Final = "SGLangGatewayShedding"  # smg 1.13: overload shedding, admission rejections
ALERT_GATEWAY_PD_FAILURES: Final = "SGLangGatewayPDRendezvousFailures"  # smg 1.13, gRPC PD path
ALERT_SIDECAR_DOWN: Final = "SLOMonitorSidecarDown"
ALERT_LOOP_STUCK: Final = "SLOMonitorLoopStuck"
ALERT_LOOP_RESTARTING: Final = "SLOMonitorLoopRestarting"
ALERT_RECORDING_FAILING: Final = "SLOMonitorRecordingFailing"
ALERT_CONFIG_RELOAD_FAILED: Final = "SLOMonitorConfigReloadFailed"
ALERT_ACCEL_UNHEALTHY: Final = "AcceleratorUnhealthy"
ALERT_ACCEL_WARNING: Final = "AcceleratorHealthWarning"
ALERT_ACCEL_MEMORY: Final = "AcceleratorMemoryNearlyFull"
ALERT_ACCEL_TEMPERATURE: Final = "AcceleratorTemperatureHigh"
ALERT_ACCEL_THROTTLING: Final = "AcceleratorThermalThrottling"
ALERT_ACCEL_TELEMETRY_DOWN: Final = "AcceleratorTelemetryDown"
ALERT_ACCEL_TELEMETRY_ABSENT: Final = "AcceleratorTelemetryAbsent"
SIDECAR_JOB: Final = "slo-monitor"
# Labels the generated alerts set themselves (or take from the series): a deployment's own `labels:`
# may not use these names, nor Prometheus's reserved `__` prefix.
CAUSE_LABEL: Final = "cause"  # tells apart alerts of one name with several causes (SGLangGatewayShedding)
RESERVED_ALERT_LABELS: Final = frozenset({"deployment", "sli", "severity", "long_window", "short_window",
                                          "burn_rate_threshold", "role", "instance", "job", "alertname",
                                          CAUSE_LABEL})


def group(deployment: str, kind: str) -> str:
    return f"slo-monitor:{deployment}:{kind}"


# The rule files of the sidecar itself and of accelerator telemetry, beside one per deployment: no
# deployment may take their names.
SELF_RULES: Final = "self"
ACCELERATOR_RULES: Final = "accelerators"
OWN_RULE_FILES: Final = (SELF_RULES, ACCELERATOR_RULES)


def rules_file(deployment: str) -> str:
    return f"rules/{deployment}.rules.yml"


def test_file(deployment: str) -> str:
    return f"tests/{deployment}.test.yml"


def canonical_name(name: str) -> str:
    """Map `sglang_foo` (OpenMetrics-escaped or router-renamed) to `sglang:foo`."""
    if name.startswith(SGLANG_ALT_PREFIX):
        return SGLANG_PREFIX + name[len(SGLANG_ALT_PREFIX):]
    return name


def prom_name_regex(family: str, suffix: str = "") -> str:
    """PromQL `__name__` regex matching both spellings of an SGLang family."""
    if family.startswith(SGLANG_PREFIX):
        return "sglang[:_]" + family[len(SGLANG_PREFIX):] + suffix
    return family + suffix
