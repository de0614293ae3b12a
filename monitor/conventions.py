"""Every name the project reads or writes, in one place (like Sloth's `conventions`).

SGLang family names are given in their canonical colon form; `canonical_name` maps the
underscore spelling that prometheus_client >= 0.23 produces under OpenMetrics (and that the
router's `/engine_metrics` produces) back to it.
"""

from __future__ import annotations

import re
from typing import Final

SGLANG_PREFIX: Final = "sglang:"
SGLANG_ALT_PREFIX: Final = "sglang_"

# --- SGLang latency histograms, one per SLI -------------------------------------------------
SLI_FAMILIES: Final[dict[str, str]] = {
    "ttft": "sglang:time_to_first_token_seconds",
    "tpot": "sglang:request_time_per_output_token_seconds",
    "itl": "sglang:inter_token_latency_seconds",
    "e2e": "sglang:e2e_request_latency_seconds",
}
SLIS: Final = tuple(SLI_FAMILIES)
# The optional per-request SLO (requests meeting every target), from a request-log target.
GOODPUT_SLI: Final = "goodput"
# Older SGLang (the docs sample) used this name for what is now ITL.
LEGACY_TPOT_FAMILY: Final = "sglang:time_per_output_token_seconds"

# Default buckets of SGLang 0.5.23 (metrics_collector.py); TPOT shares ITL's list.
DEFAULT_BUCKETS: Final[dict[str, tuple[float, ...]]] = {
    "ttft": (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0),
    "itl": (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
            0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0),
    "e2e": (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
            400.0, 600.0, 1200.0, 1800.0, 2400.0),
}
DEFAULT_BUCKETS["tpot"] = DEFAULT_BUCKETS["itl"]

# The SGLang launch flag that sets each SLI's buckets.
BUCKET_FLAGS: Final[dict[str, str]] = {
    "ttft": "--bucket-time-to-first-token",
    "tpot": "--bucket-inter-token-latency",
    "itl": "--bucket-inter-token-latency",
    "e2e": "--bucket-e2e-request-latency",
}

# --- SGLang counters and gauges the engine uses ----------------------------------------------
COUNTERS: Final[dict[str, str]] = {
    "requests_total": "sglang:num_requests_total",
    "prompt_tokens_total": "sglang:prompt_tokens_total",
    "generation_tokens_total": "sglang:generation_tokens_total",
    "aborted_requests_total": "sglang:num_aborted_requests_total",
    "cached_tokens_total": "sglang:cached_tokens_total",
    "bootstrap_failed_total": "sglang:num_bootstrap_failed_reqs_total",
    "transfer_failed_total": "sglang:num_transfer_failed_reqs_total",
}
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
# --- Which server roles feed which number ---------------------------------------------------
# SGLang 0.5.23 (tokenizer_manager.collect_metrics; docs/reference/sglang_metrics.md §1.4): a PD request
# passes a prefill and a decode server, and each records it. The prefill server records no TTFT, ITL or
# TPOT, but it does record an E2E latency and the request/token counters, covering its part only. Every
# per-request number is therefore taken where the request is answered, the unified (`server`) or
# `decode` server, so each request counts once and E2E is the client's whole request. PD failures and
# load gauges are per server and come from every engine role. Sidecar, rules, dashboards, analyzer and
# emulator all read these.
ENGINE_ROLES: Final = ("server", "prefill", "decode")
REQUEST_ROLES: Final = ("server", "decode")
SLI_ROLES: Final[dict[str, tuple[str, ...]]] = {sli: REQUEST_ROLES for sli in SLI_FAMILIES}
# PD failures are counted on the server that saw them (prefill or decode); the rest per request.
COUNTER_ROLES: Final[dict[str, tuple[str, ...]]] = {
    name: ENGINE_ROLES if name in ("bootstrap_failed_total", "transfer_failed_total") else REQUEST_ROLES
    for name in COUNTERS
}
# What SGLang itself records on a PD prefill server (the emulator reproduces it): E2E only.
PREFILL_RECORDED_SLIS: Final = ("e2e",)
# A router's /engine_metrics merges its workers; their `engine_type` label tells prefill series apart.
ENGINE_TYPE_LABEL: Final = "engine_type"
PREFILL_ENGINE_TYPE: Final = "prefill"

# Gauges that are ratios or per-rank averages: combine with max, not sum.
RATIO_GAUGES: Final = frozenset({"token_usage", "cache_hit_rate", "spec_accept_length"})
KV_TRANSFER_LATENCY: Final = "sglang:kv_transfer_latency_ms"

# Labels that only identify a process, not a series: dropped at parse time.
DROPPED_LABELS: Final = frozenset({"pid"})
RANK_LABELS: Final = ("tp_rank", "pp_rank", "moe_ep_rank", "dp_rank")
# Gauges with `le`/`gt` labels that are NOT histograms (GaugeHistogram emulations).
GAUGE_HISTOGRAMS: Final = frozenset({
    "sglang:routing_key_running_req_count",
    "sglang:routing_key_all_req_count",
    "smg_http_inflight_request_age_count",
})

# --- Router ------------------------------------------------------------------------------------
ROUTER_FAMILIES: Final = (
    "smg_router_requests_total",
    "smg_router_request_duration_seconds",
    "smg_router_request_errors_total",
    "smg_router_upstream_responses_total",
    "smg_http_responses_total",
    "smg_worker_health",
    "smg_worker_pool_size",
    "smg_worker_errors_total",
    "smg_worker_retries_total",
    "smg_worker_cb_state",
)

# --- SLO windows and the SRE-workbook multi-window multi-burn-rate policy -------------------
# Windows the sidecar computes itself; longer ones are Prometheus's job (generated rules).
SIDECAR_WINDOWS: Final[dict[str, int]] = {"5m": 300, "30m": 1800, "1h": 3600, "6h": 21600}
RULE_WINDOWS: Final[dict[str, int]] = {
    "5m": 300, "30m": 1800, "1h": 3600, "2h": 7200, "6h": 21600, "1d": 86400, "3d": 259200,
}
# (severity, long window, short window, burn-rate factor): Google SRE workbook, ch. 5, table 5-8.
BURN_RATE_ALERTS: Final = (
    ("page", "1h", "5m", 14.4),
    ("page", "6h", "30m", 6.0),
    ("ticket", "1d", "2h", 3.0),
    ("ticket", "3d", "6h", 1.0),
)
QUANTILES: Final = (0.5, 0.9, 0.99)

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
M_DEPLOYMENT_INFO = f"{NS}_deployment_info"
M_BASELINE_TPOT = f"{NS}_baseline_tpot_seconds"
M_BASELINE_TTFT = f"{NS}_baseline_ttft_seconds"

# Accelerator series (telemetry issue): base units, one label set.
ACCEL_LABELS: Final = ("deployment", "node", "device", "chip", "vendor")


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


def format_le(edge: float) -> str:
    """The `le` string prometheus_client writes for a bucket edge (`0.1`, `1.0`, `+Inf`)."""
    if edge == float("inf"):
        return "+Inf"
    return repr(float(edge))


def window_seconds(window: str) -> int:
    return RULE_WINDOWS.get(window) or parse_duration(window)


_DURATION_UNITS = (("y", 31536000.0), ("w", 604800.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0),
                   ("ms", 0.001))
# Prometheus's own grammar (model.ParseDuration): units largest first, each at most once. The API renders
# configured durations this way (`90s` comes back as `1m30s`, half a second as `500ms`).
_DURATION_RE = re.compile("".join(rf"(?:(\d+){u}(?!s))?" if u == "m" else rf"(?:(\d+){u})?" for u, _ in _DURATION_UNITS))


def parse_prometheus_duration(text: str) -> float:
    """Any Prometheus duration (`30d`, `1m30s`, `500ms`) to seconds."""
    m = _DURATION_RE.fullmatch(text.strip())
    if not text.strip() or m is None or not any(m.groups()):
        raise ValueError(f"not a duration like 30d, 6h, 5m, 90s or 1m30s: {text!r}")
    return sum(int(g) * size for g, (_, size) in zip(m.groups(), _DURATION_UNITS) if g)


def parse_duration(text: str) -> int:
    """A whole-second Prometheus duration (`30d`, `6h`, `5m`, `90s`, `1h30m`) to seconds."""
    seconds = parse_prometheus_duration(text)
    if seconds != int(seconds):
        raise ValueError(f"not a whole number of seconds: {text!r}")
    return int(seconds)


def format_duration(seconds: float) -> str:
    """Seconds to the shortest exact Prometheus duration string."""
    s = int(round(seconds))
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{max(s, 1)}s"
