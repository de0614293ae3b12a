"""The SLIs: one record each (family, buckets, launch flag, roles, titles)."""

from __future__ import annotations

from typing import Final

from monitor.conventions.names import COUNTERS

# --- SGLang latency histograms, one per SLI -------------------------------------------------
SLI_FAMILIES: Final[dict[str, str]] = {
    "ttft": "sglang:time_to_first_token_seconds",
    "tpot": "sglang:request_time_per_output_token_seconds",
    "itl": "sglang:inter_token_latency_seconds",
    "e2e": "sglang:e2e_request_latency_seconds",
}
SLIS: Final = tuple(SLI_FAMILIES)
# The optional per-request SLO (requests meeting every target), from a request-log target, and the
# latency SLIs a request's log line can be judged on (ITL is per token: no single verdict per request).
GOODPUT_SLI: Final = "goodput"
REQUEST_SLIS: Final = ("ttft", "tpot", "e2e")
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
    name: ENGINE_ROLES if name in ("bootstrap_failed_total", "transfer_failed_total", "retracted_total")
    else REQUEST_ROLES
    for name in COUNTERS
}
# What SGLang itself records on a PD prefill server (the emulator reproduces it): E2E only.
PREFILL_RECORDED_SLIS: Final = ("e2e",)
# A router's /engine_metrics merges its workers; their `engine_type` label tells prefill series apart.
ENGINE_TYPE_LABEL: Final = "engine_type"
PREFILL_ENGINE_TYPE: Final = "prefill"

# SGLang labels every series with the server's engine type (DisaggregationMode.to_engine_type); the
# sidecar's target role for each.
ENGINE_TYPE_LABEL: Final = "engine_type"
ENGINE_TYPE_ROLES: Final[dict[str, str]] = {"unified": "server", "prefill": "prefill", "decode": "decode"}
