"""Which series the analysis looks at, how they are named for a reader, and their groups."""

from __future__ import annotations

LOAD_LABELS: dict[str, tuple[str, str, str]] = {  # metric -> (label, group, unit)
    "num_queue_reqs": ("queued requests", "queue", "requests"),
    "num_running_reqs": ("running requests", "running", "requests"),
    "token_usage": ("KV token usage", "kv", "ratio"),
    "gen_throughput": ("generation throughput", "running", "tokens/s"),
    "cache_hit_rate": ("prefix cache hit rate", "cache", "ratio"),
    "spec_accept_length": ("speculative accept length", "spec", "tokens"),
    "num_prefill_bootstrap_queue_reqs": ("PD prefill bootstrap queue", "pd", "requests"),
    "num_prefill_inflight_queue_reqs": ("PD prefill in-flight (KV transfer) queue", "pd", "requests"),
    "num_decode_prealloc_queue_reqs": ("PD decode prealloc queue", "pd", "requests"),
    "num_decode_transfer_queue_reqs": ("PD decode transfer queue", "pd", "requests"),
}
RATE_LABELS: dict[str, tuple[str, str, str]] = {  # counter -> (label, group, unit)
    "requests_total": ("finished requests rate", "traffic", "req/s"),
    "arrived_total": ("arrived requests rate (SGLang's HTTP request counter)", "traffic", "req/s"),
    "generation_tokens_total": ("generated tokens rate", "traffic", "tokens/s"),
    "prompt_tokens_total": ("prompt tokens rate", "traffic", "tokens/s"),
    "aborted_requests_total": ("aborted requests rate", "errors", "req/s"),
    "bootstrap_failed_total": ("PD bootstrap failures rate", "pd", "req/s"),
    "transfer_failed_total": ("PD KV transfer failures rate", "pd", "req/s"),
    "cached_tokens_total": ("cached prompt tokens rate", "traffic", "tokens/s"),
    "retracted_total": ("retracted requests rate", "kv", "req/s"),
}
ACCEL_LABELS: dict[str, tuple[str, str, str]] = {  # key -> (label, group, unit)
    "temperature_max": ("accelerator temperature (hottest chip)", "accelerator", "°C"),
    "utilization_mean": ("accelerator utilization (mean)", "accelerator", "ratio"),
    "memory_ratio_max": ("accelerator HBM used (fullest chip)", "accelerator", "ratio"),
    "power_mean": ("accelerator power (mean)", "accelerator", "W"),
    "unhealthy": ("accelerator chips not healthy", "accelerator", "chips"),
    # Where the telemetry reports them (NVML, DCGM; never npu-smi or npu-exporter).
    "temperature_slowdown_min": ("accelerator slowdown temperature (lowest chip limit)", "accelerator", "°C"),
    "thermal_throttling": ("accelerator chips throttling for heat", "accelerator", "chips"),
}
OTHER_LABELS: dict[str, tuple[str, str, str]] = {
    "restarts": ("restarts (counter resets)", "restarts", "per step"),
    "targets_down": ("targets down", "restarts", "targets"),
    "kv_transfer_latency": ("KV transfer latency (mean)", "pd", "ms"),
    "router_errors": ("router request errors rate", "router", "1/s"),
    "router_worker_errors": ("router worker errors rate", "router", "1/s"),
}


# Prometheus only (the recording keeps the SLI histograms, not these): mean seconds per request of a
# scheduler stage or of the wait in the queue, per role, over the lookback.
STAGE_UNIT = "s"


def stage_label(role: str, stage: str) -> str:
    return f"{stage.replace('_', ' ')} stage, mean ({role})"


def queue_time_label(role: str) -> str:
    return f"queue time, mean ({role})"


def role_suffix(role: str, roles: set[str]) -> str:
    """`(decode)` where a deployment has several server roles; nothing for a plain mixed one."""
    return f" ({role})" if len(roles - {"all"}) > 1 or role not in ("server", "all") else ""
