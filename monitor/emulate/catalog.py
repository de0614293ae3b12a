"""SGLang 0.5.23 `/metrics` families, in the order the real server prints them.

Taken from `tests/fixtures/real/sglang_0.5.23_server_metrics.txt` (real output of SGLang's metrics code,
unified engine): name, type, HELP, which process writes it (`kind`), whether it carries `is_streaming`,
the extra label sets it is pre-seeded with, and static bucket edges. PD-only families (KV-transfer
histograms, failure counters) come from `reference/sglang_metrics.md` section 1.5; they appear on
prefill/decode servers only.

kind: `tok` tokenizer (no rank labels), `sched` scheduler (rank labels), `pid` scheduler gauge with the
extra `pid` label (multiprocess mode "all"), `http` HTTP middleware, `bare` no labels.

The SLI histograms are the SLI records' (`conventions.slis`): named by their family constants, written by the
process that observes their measure (`sli_family`); a record on a family SGLang 0.5.23 does not print is
added after the real server's families, so the emulator exposes every record.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.conventions.names import E2E_FAMILY, ITL_FAMILY, QUEUE_TIME, TPOT_FAMILY, TTFT_FAMILY
from monitor.conventions.slis import PER_REQUEST, SLI_BY_FAMILY, SLI_RECORDS


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    help: str
    kind: str
    streaming: bool = False
    extra: tuple[tuple[tuple[str, str], ...], ...] = ()
    buckets: tuple[float, ...] = ()
    roles: tuple[str, ...] = ("server", "prefill", "decode")


TOKEN_BUCKETS: tuple[float, ...] = (
    100.0,
    300.0,
    500.0,
    700.0,
    1000.0,
    1500.0,
    2000.0,
    3000.0,
    4000.0,
    5000.0,
    6000.0,
    7000.0,
    8000.0,
    9000.0,
    10000.0,
    12500.0,
    15000.0,
    17500.0,
    20000.0,
    22500.0,
    25000.0,
    27500.0,
    30000.0,
    35000.0,
    40000.0,
    60000.0,
    80000.0,
    100000.0,
    200000.0,
    300000.0,
    400000.0,
    600000.0,
    800000.0,
    1000000.0,
    1100000.0,
)
# exponential_buckets(0.001, 1.62, 30), as prometheus/SGLang compute them (float products, not rounded).
STAGE_BUCKETS: tuple[float, ...] = tuple(0.001 * 1.62**i for i in range(30))



def sli_family(family: str, help_text: str | None = None) -> Family:
    """An SLI record's histogram as SGLang prints it: written by the process that observes the record's measure,
    with `is_streaming` on the tokenizer's per-request ones; a scheduler's carries the record's (fixed) edges, as
    it is created at zero when the scheduler starts. `help_text`: SGLang's, where it prints the family."""
    sli = SLI_BY_FAMILY[family]
    tok = sli.measure.observer == "tokenizer"
    return Family(family, "histogram", help_text or f"Histogram of {sli.long_name} in seconds.",
                  "tok" if tok else "sched", streaming=tok and sli.kind == PER_REQUEST,
                  buckets=() if tok else sli.buckets)


# GaugeHistogram bands (gt < count <= le) of the routing-key gauges: a gauge, not a histogram.
_BOUNDS = ("0", "1", "2", "3", "5", "7", "10", "20", "50", "100", "200", "+Inf")
ROUTING_KEY_BANDS: tuple[tuple[tuple[str, str], ...], ...] = tuple(
    (("gt", lo), ("le", hi)) for lo, hi in zip(_BOUNDS, _BOUNDS[1:])
)

FAMILIES: tuple[Family, ...] = (
    Family("sglang:num_retracted_reqs", "gauge", "The number of retracted requests.", "pid"),
    Family("sglang:num_paused_reqs", "gauge", "The number of paused requests by async weight sync.", "pid"),
    Family(
        "sglang:http_requests",
        "counter",
        "Total number of HTTP requests by endpoint and method",
        "http",
        extra=((("endpoint", "/v1/chat/completions"), ("method", "POST")),),
    ),
    Family("sglang:num_aborted_requests", "counter", "Number of requests aborted.", "tok"),
    Family(
        "sglang:http_responses",
        "counter",
        "Total number of HTTP responses by endpoint and status code",
        "http",
        extra=(
            (("endpoint", "/v1/chat/completions"), ("method", "POST"), ("status_code", "499")),
            (("endpoint", "/v1/chat/completions"), ("method", "POST"), ("status_code", "200")),
        ),
    ),
    Family("sglang:prompt_tokens", "counter", "Number of prefill tokens processed.", "tok", streaming=True),
    Family(
        "sglang:generation_tokens", "counter", "Number of generation tokens processed.", "tok", streaming=True
    ),
    Family(
        "sglang:spec_verify_calls", "counter", "Number of speculative decoding verification calls.", "tok"
    ),
    Family(
        "sglang:cached_tokens",
        "counter",
        "Number of cached prompt tokens by source (device/host/storage).",
        "tok",
        extra=((("cache_source", "device"),),),
    ),
    Family("sglang:num_requests", "counter", "Number of requests processed.", "tok", streaming=True),
    Family("sglang:num_so_requests", "counter", "Number of structured output requests processed.", "tok"),
    sli_family(TTFT_FAMILY, "Histogram of time to first token in seconds."),
    sli_family(ITL_FAMILY, "Histogram of inter-token latency in seconds."),
    sli_family(E2E_FAMILY, "Histogram of End-to-end request latency in seconds"),
    sli_family(TPOT_FAMILY,
               "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1)."),
    Family(
        "sglang:prompt_tokens_histogram",
        "histogram",
        "Histogram of prompt token length.",
        "tok",
        buckets=TOKEN_BUCKETS,
    ),
    Family(
        "sglang:uncached_prompt_tokens_histogram",
        "histogram",
        "Histogram of uncached (compute) prompt token length.",
        "tok",
        buckets=TOKEN_BUCKETS,
    ),
    Family(
        "sglang:generation_tokens_histogram",
        "histogram",
        "Histogram of generation token length.",
        "tok",
        buckets=TOKEN_BUCKETS,
    ),
    Family(
        "sglang:max_total_num_tokens",
        "gauge",
        "Maximum total number of tokens in the KV cache pool.",
        "sched",
    ),
    Family("sglang:weight_memory_usage_gb", "gauge", "Memory used by model weights in GB.", "sched"),
    Family("sglang:kv_cache_memory_usage_gb", "gauge", "Memory used by the KV cache pools in GB.", "sched"),
    Family(
        "sglang:graph_memory_usage_gb",
        "gauge",
        "Memory used by captured device graphs in GB.",
        "sched",
        extra=((("phase", "decode"),),),
    ),
    Family("sglang:page_size", "gauge", "KV cache page size in tokens.", "sched"),
    Family("sglang:num_pages", "gauge", "Number of KV cache pages.", "sched"),
    Family("sglang:context_len", "gauge", "Maximum context length.", "sched"),
    Family(
        "sglang:startup_available_gpu_memory_gb", "gauge", "Available GPU memory in GB at startup.", "sched"
    ),
    Family("sglang:num_running_reqs", "gauge", "The number of running requests.", "sched"),
    Family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", "sched"),
    Family(
        "sglang:num_grammar_queue_reqs",
        "gauge",
        "The number of requests in the grammar waiting queue.",
        "sched",
    ),
    Family("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", "sched"),
    Family("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", "sched"),
    Family("sglang:decode_sum_seq_lens", "gauge", "The sum of all sequence lengths in decode.", "sched"),
    Family("sglang:token_usage", "gauge", "The token usage.", "sched"),
    Family("sglang:full_token_usage", "gauge", "The token usage for full attention layers.", "sched"),
    Family("sglang:swa_token_usage", "gauge", "The token usage for SWA layers.", "sched"),
    Family("sglang:mamba_usage", "gauge", "The token usage for Mamba layers.", "sched"),
    Family("sglang:num_used_tokens", "gauge", "The number of used tokens.", "sched"),
    Family(
        "sglang:kv_available_tokens", "gauge", "Number of free token slots in the KV cache pool.", "sched"
    ),
    Family(
        "sglang:kv_evictable_tokens",
        "gauge",
        "Number of evictable (radix-cached) token slots in the KV cache pool.",
        "sched",
    ),
    Family(
        "sglang:kv_used_tokens", "gauge", "Number of actively used token slots in the KV cache pool.", "sched"
    ),
    Family(
        "sglang:swa_available_tokens",
        "gauge",
        "Number of free token slots in the SWA pool (hybrid-SWA only).",
        "sched",
    ),
    Family(
        "sglang:swa_evictable_tokens",
        "gauge",
        "Number of evictable (radix-cached) token slots in the SWA pool.",
        "sched",
    ),
    Family(
        "sglang:swa_used_tokens", "gauge", "Number of actively used token slots in the SWA pool.", "sched"
    ),
    Family(
        "sglang:mamba_available_tokens",
        "gauge",
        "Number of free state slots in the mamba SSM pool (hybrid-SSM only).",
        "sched",
    ),
    Family(
        "sglang:mamba_evictable_tokens",
        "gauge",
        "Number of evictable (radix-cached) state slots in the mamba SSM pool.",
        "sched",
    ),
    Family(
        "sglang:mamba_used_tokens",
        "gauge",
        "Number of actively used state slots in the mamba SSM pool.",
        "sched",
    ),
    Family(
        "sglang:spec_accept_length",
        "gauge",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
        "sched",
    ),
    Family(
        "sglang:spec_accept_rate",
        "gauge",
        "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
        "sched",
    ),
    Family(
        "sglang:spec_cap_length",
        "gauge",
        "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is scheduled).",
        "sched",
    ),
    Family(
        "sglang:spec_block_accept_length",
        "gauge",
        "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only in DSpark cap-accept mode).",
        "sched",
    ),
    Family("sglang:spec_num_steps", "gauge", "Currently active speculative_num_steps.", "sched"),
    Family(
        "sglang:spec_num_draft_tokens",
        "gauge",
        "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
        "sched",
    ),
    Family(
        "sglang:num_prefill_bootstrap_queue_reqs",
        "gauge",
        "The number of requests in the prefill bootstrap queue.",
        "sched",
    ),
    Family(
        "sglang:num_prefill_inflight_queue_reqs",
        "gauge",
        "The number of requests in the prefill inflight queue.",
        "sched",
    ),
    Family(
        "sglang:num_decode_prealloc_queue_reqs",
        "gauge",
        "The number of requests in the decode prealloc queue.",
        "sched",
    ),
    Family(
        "sglang:num_decode_transfer_queue_reqs",
        "gauge",
        "The number of requests in the decode transfer queue.",
        "sched",
    ),
    Family(
        "sglang:num_decode_host_receive_queue_reqs",
        "gauge",
        "Requests in the decode transfer queue receiving into host memory or waiting for device admission.",
        "sched",
    ),
    Family(
        "sglang:num_decode_deferred_kv_release_reqs",
        "gauge",
        "The number of failed decode requests whose KV allocations are held pending transfer drain acknowledgement or timeout.",
        "sched",
    ),
    Family(
        "sglang:pending_prealloc_token_usage",
        "gauge",
        "The token usage for pending preallocated tokens (not preallocated yet).",
        "sched",
    ),
    Family(
        "sglang:prealloc_full_token_usage",
        "gauge",
        "Share of the full-attention KV pool held by decode requests whose KV transfer is pending (preallocated, not yet running); same capacity basis as sglang:full_token_usage.",
        "sched",
    ),
    Family(
        "sglang:prealloc_swa_token_usage",
        "gauge",
        "Share of the SWA KV pool held by decode requests whose KV transfer is pending; same capacity basis as sglang:swa_token_usage.",
        "sched",
    ),
    Family("sglang:utilization", "gauge", "The utilization.", "sched"),
    Family("sglang:fwd_occupancy", "gauge", "Forward pass GPU occupancy percentage.", "sched"),
    Family("sglang:new_token_ratio", "gauge", "The new token ratio.", "sched"),
    Family("sglang:is_cuda_graph", "gauge", "Whether the batch is using CUDA graph.", "sched"),
    Family(
        "sglang:num_unique_running_routing_keys",
        "gauge",
        "Number of unique routing keys in running batch.",
        "sched",
    ),
    Family(
        "sglang:routing_key_running_req_count",
        "gauge",
        "Distribution of routing keys by running request count (gt < count <= le).",
        "sched",
        extra=ROUTING_KEY_BANDS,
    ),
    Family(
        "sglang:routing_key_all_req_count",
        "gauge",
        "Distribution of routing keys by running+waiting request count (gt < count <= le).",
        "sched",
        extra=ROUTING_KEY_BANDS,
    ),
    Family(
        "sglang:startup_time_seconds",
        "gauge",
        "Engine startup duration by phase in seconds.",
        "tok",
        extra=(
            (("phase", "load_weight"),),
            (("phase", "kv_cache_allocation"),),
            (("phase", "scheduler_e2e"),),
            (("phase", "tokenizer_e2e"),),
        ),
    ),
    Family(
        "sglang:startup_cuda_graph_time_seconds",
        "gauge",
        "CUDA graph capture duration by phase in seconds.",
        "tok",
        extra=((("phase", "decode"),),),
    ),
    Family(
        "sglang:dp_attention_token_imbalance_ratio",
        "histogram",
        "Per MLP-sync step, max tokens over mean tokens across the DP ranks (1.0 = balanced, num_dp_ranks = one busy rank). Reported once per engine, by the scheduler of DP rank 0.",
        "sched",
        buckets=(1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0),
    ),
    Family(
        "sglang:dp_attention_sync_wait_seconds",
        "histogram",
        "Wall time of this DP rank's scheduler MLP-sync all-gather per step. On the gloo path (the default with overlap scheduling) this is waiting for the slowest rank; on the device-group paths it also includes the gather's stream sync.",
        "sched",
        buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    ),
    sli_family(QUEUE_TIME, "Histogram of queueing time in seconds."),
    Family(
        "sglang:per_stage_req_latency_seconds",
        "histogram",
        "The latency of each stage of requests.",
        "sched",
        extra=((("stage", "prefill_waiting"),), (("stage", "prefill_forward"),)),
        buckets=STAGE_BUCKETS,
    ),
    Family(
        "sglang:routing_keys_active", "gauge", "Number of unique routing keys with active requests", "bare"
    ),
    Family(
        "sglang:prefill_effective_tokens",
        "counter",
        "Effective prefill tokens with retracted-request re-counts excluded, updated on each log interval. mode: device_hit, host_hit, storage_hit, input. Windowed prefix cache hit rate = rate(sum of *_hit) / rate(sum of all modes); per-tier rate uses a single *_hit mode in the numerator.",
        "sched",
        extra=(
            (("mode", "input"),),
            (("mode", "device_hit"),),
            (("mode", "host_hit"),),
            (("mode", "storage_hit"),),
        ),
    ),
    Family(
        "sglang:scheduler_idle_seconds",
        "counter",
        "Total wall time while the scheduler has no runnable or queued work.",
        "sched",
    ),
    Family(
        "sglang:scheduler_process_cpu_seconds",
        "counter",
        "Total CPU time consumed by the scheduler process across all threads.",
        "sched",
    ),
    Family(
        "sglang:scheduler_stage_seconds",
        "counter",
        "Total scheduler-loop wall time exclusively attributed to each stage. forward_overlap (full, partial, none): full=both endpoints active, partial=one, none=no observed overlap (including unavailable timing). Not exact overlapped/exposed seconds.",
        "sched",
        extra=(
            (("category", "other"), ("forward_overlap", "none")),
            (("category", "recv_requests"), ("forward_overlap", "none")),
            (("category", "process_input_requests"), ("forward_overlap", "none")),
            (("category", "get_next_batch_to_run"), ("forward_overlap", "none")),
            (("category", "process_queue"), ("forward_overlap", "none")),
            (("category", "run_batch"), ("forward_overlap", "none")),
            (("category", "process_batch_result"), ("forward_overlap", "none")),
            (("category", "sanity_check_cache"), ("forward_overlap", "none")),
            (("category", "idle"), ("forward_overlap", "none")),
        ),
    ),
    Family(
        "sglang:dp_attention_tokens",
        "counter",
        "Tokens of MLP-sync steps on this DP rank. kind=scheduled: tokens this rank ran; kind=imbalance: tokens the busiest rank ran beyond this rank, i.e. capacity lost to DP imbalance on this rank. On speculative-decode steps the unit is batch rows (requests).",
        "sched",
        extra=((("kind", "scheduled"),), (("kind", "imbalance"),)),
    ),
    Family(
        "sglang:dp_attention_steps",
        "counter",
        "MLP-sync steps on this DP rank. rank_state=idle: this rank had no tokens and only ran to keep the DP collectives in lockstep.",
        "sched",
        extra=((("rank_state", "active"),), (("rank_state", "idle"),)),
    ),
    Family(
        "sglang:dp_attention_pairs",
        "counter",
        "Causal (query, key) pairs attended by MLP-sync steps on this DP rank, pricing every layer as full attention: a decode row reads its sequence, a prefill chunk its prefix plus the pairs within the chunk. kind=scheduled: this rank; kind=imbalance: the busiest rank's excess over this rank. The context-length counterpart of sglang:dp_attention_tokens_total; like it, speculative-decode steps count one query per row. Sliding-window layers execute fewer pairs than counted, so on hybrid-SWA models long rows are overstated.",
        "sched",
        extra=((("kind", "scheduled"),), (("kind", "imbalance"),)),
    ),
    Family(
        "sglang:cuda_graph_passes",
        "counter",
        "Total number of forward passes categorized by CUDA graph.",
        "sched",
        extra=((("mode", "decode_cuda_graph"),),),
    ),
    Family(
        "sglang:realtime_tokens",
        "counter",
        "Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.",
        "sched",
        extra=((("mode", "prefill_compute"),), (("mode", "prefill_cache"),), (("mode", "decode"),)),
    ),
    Family("sglang:num_retracted_requests", "counter", "Total number of retracted requests.", "sched"),
    Family(
        "sglang:num_retracted_input_tokens", "counter", "Total number of retracted input tokens.", "sched"
    ),
    Family(
        "sglang:num_retracted_output_tokens", "counter", "Total number of retracted output tokens.", "sched"
    ),
)

# PD-only families. Bucket lists of latency_ms and speed_gb_s are SGLang's; total_mb, bootstrap_ms and
# alloc_ms follow the documented ranges (1 ... 10000, 1 ... 2500) with the latency list's 1-2-5 steps.
_PD = ("prefill", "decode")
_PREFILL = ("prefill",)
PD_FAMILIES: tuple[Family, ...] = (
    Family(
        "sglang:num_bootstrap_failed_reqs",
        "counter",
        "The number of bootstrap failed requests.",
        "sched",
        roles=_PD,
    ),
    Family(
        "sglang:num_transfer_failed_reqs",
        "counter",
        "The number of transfer failed requests.",
        "sched",
        roles=_PD,
    ),
    Family(
        "sglang:kv_transfer_speed_gb_s",
        "histogram",
        "Histogram of KV cache transfer speed in GB/s.",
        "sched",
        buckets=(0.1, 0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0),
        roles=_PREFILL,
    ),
    Family(
        "sglang:kv_transfer_latency_ms",
        "histogram",
        "Histogram of KV cache transfer latency in ms.",
        "sched",
        buckets=(1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0),
        roles=_PREFILL,
    ),
    Family(
        "sglang:kv_transfer_bootstrap_ms",
        "histogram",
        "Histogram of KV transfer bootstrap time in ms.",
        "sched",
        buckets=(1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0),
        roles=_PREFILL,
    ),
    Family(
        "sglang:kv_transfer_alloc_ms",
        "histogram",
        "Histogram of KV transfer allocation waiting time in ms.",
        "sched",
        buckets=(1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0),
        roles=_PREFILL,
    ),
    Family(
        "sglang:kv_transfer_total_mb",
        "histogram",
        "Histogram of KV cache transfer size in MB.",
        "sched",
        buckets=(1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0),
        roles=_PREFILL,
    ),
)
# An SLI record on a family SGLang 0.5.23 does not print (a new SGLang's histogram): after the real server's.
_PRINTED = {f.name for f in FAMILIES}
FAMILIES += tuple(sli_family(s.family) for s in SLI_RECORDS if s.family not in _PRINTED)
ALL_FAMILIES: tuple[Family, ...] = FAMILIES + PD_FAMILIES
BY_NAME: dict[str, Family] = {f.name: f for f in ALL_FAMILIES}
