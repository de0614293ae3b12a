"""What the monitor needs from each command: the flags that decide where metrics are and what they mean."""

from __future__ import annotations

from typing import Any

from monitor.conventions.slis import SLI_RECORDS
from monitor.recipes.commands import Command

ROUTER_PROMETHEUS_PORT = 29000  # sglang-router 0.3.2 default (--prometheus-port)
SERVER_DEFAULT_PORT = 30000
SERVER_DEFAULT_HOST = "127.0.0.1"
_WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")

# (flag, key in launch, type) for server commands.
_SERVER_FLAGS: tuple[tuple[str, str, type], ...] = (
    ("--host", "host", str),
    ("--port", "port", int),
    ("--disaggregation-mode", "disaggregation_mode", str),
    ("--disaggregation-bootstrap-port", "disaggregation_bootstrap_port", int),
    ("--disaggregation-transfer-backend", "disaggregation_transfer_backend", str),
    ("--tp-size", "tp_size", int),
    ("--dp-size", "dp_size", int),
    ("--nnodes", "nnodes", int),
    ("--node-rank", "node_rank", str),
    ("--dist-init-addr", "dist_init_addr", str),
    ("--max-running-requests", "max_running_requests", int),
    ("--context-length", "context_length", int),
    ("--max-total-tokens", "max_total_tokens", int),
    ("--chunked-prefill-size", "chunked_prefill_size", int),
    ("--quantization", "quantization", str),
    ("--speculative-algorithm", "speculative_algorithm", str),
    ("--speculative-num-steps", "speculative_num_steps", int),
    ("--speculative-num-draft-tokens", "speculative_num_draft_tokens", int),
    ("--speculative-dspark-block-size", "speculative_dspark_block_size", int),
    ("--model-path", "model_path", str),
)
_SERVER_SWITCHES = (
    ("--enable-dp-attention", "enable_dp_attention"),
    ("--disable-radix-cache", "disable_radix_cache"),
    ("--enable-metrics-for-all-schedulers", "enable_metrics_for_all_schedulers"),
)
_BUCKET_FLAGS = tuple(dict.fromkeys(s.bucket_flag for s in SLI_RECORDS if s.bucket_flag))


def _typed(cmd: Command, flag: str, kind: type) -> Any:
    value = cmd.value(flag)
    try:
        return kind(value) if value is not None and kind is not str else value
    except ValueError:
        return value  # a placeholder such as $NODE_RANK stays visible as text


def server_role(cmd: Command) -> str:
    mode = (cmd.value("--disaggregation-mode") or "null").lower()
    return mode if mode in ("prefill", "decode") else "server"


def server_launch(cmd: Command) -> dict[str, Any]:
    out: dict[str, Any] = {"role": server_role(cmd), "line": cmd.line, "command": cmd.program}
    for flag, key, kind in _SERVER_FLAGS:
        if cmd.has(flag):
            out[key] = _typed(cmd, flag, kind)
    out["enable_metrics"] = cmd.has("--enable-metrics")
    for flag, key in _SERVER_SWITCHES:
        if cmd.has(flag):
            out[key] = True
    for flag in _BUCKET_FLAGS:
        if cmd.has(flag):
            out[flag.lstrip("-").replace("-", "_")] = [float(v) for v in cmd.values(flag)[-1]]
    if cmd.host_array and len(cmd.host_array) > 1:
        out["hosts"] = list(cmd.host_array)
    return out


def scrape_host(host: str | None) -> tuple[str, bool]:
    """The address to scrape for a listen address; True when we had to substitute a wildcard."""
    if host is None:
        return SERVER_DEFAULT_HOST, False
    if host in _WILDCARD_HOSTS:
        return SERVER_DEFAULT_HOST, True
    if ":" in host and not host.startswith("[") and "<" not in host:
        return f"[{host}]", False  # IPv6 literal
    return host, False


def server_url(cmd: Command) -> tuple[str, bool]:
    host, wildcard = scrape_host(cmd.value("--host"))
    port = cmd.int("--port") or SERVER_DEFAULT_PORT
    return f"http://{host}:{port}/metrics", wildcard


def router_launch(cmd: Command) -> dict[str, Any]:
    prefill = []
    for vals in cmd.values("--prefill"):
        entry: dict[str, Any] = {"url": vals[0] if vals else None}
        if len(vals) > 1 and vals[1].lower() != "none":
            entry["bootstrap_port"] = int(vals[1]) if vals[1].isdigit() else vals[1]
        prefill.append(entry)
    decode = [{"url": vals[0]} for vals in cmd.values("--decode") if vals]
    out: dict[str, Any] = {"line": cmd.line, "pd_disaggregation": cmd.has("--pd-disaggregation")}
    if prefill or decode:
        out["pd"] = f"{len(prefill)}P{len(decode)}D"
        out["prefill"] = prefill
        out["decode"] = decode
    for flag, key in (("--host", "host"), ("--policy", "policy"), ("--prefill-policy", "prefill_policy"),
                      ("--decode-policy", "decode_policy"), ("--prometheus-host", "prometheus_host")):
        if cmd.has(flag):
            out[key] = cmd.value(flag)
    out["port"] = cmd.int("--port") or SERVER_DEFAULT_PORT
    out["prometheus_port"] = cmd.int("--prometheus-port") or ROUTER_PROMETHEUS_PORT
    return out


def router_url(cmd: Command) -> str:
    """The router's Prometheus listener: --prometheus-host (default 0.0.0.0), else its --host."""
    host = cmd.value("--prometheus-host")
    if host is None or host in _WILDCARD_HOSTS:
        host = cmd.value("--host")
    address, _ = scrape_host(host)
    return f"http://{address}:{cmd.int('--prometheus-port') or ROUTER_PROMETHEUS_PORT}/metrics"


_BENCH_FLAGS: tuple[tuple[str, str, type], ...] = (
    ("--dataset-name", "dataset_name", str),
    ("--backend", "backend", str),
    ("--host", "host", str),
    ("--port", "port", int),
    ("--max-concurrency", "max_concurrency", int),
    ("--num-prompts", "num_prompts", int),
    ("--request-rate", "request_rate", str),
    ("--random-input-len", "random_input_len", int),
    ("--random-output-len", "random_output_len", int),
    ("--random-range-ratio", "random_range_ratio", float),
    ("--gsp-num-groups", "gsp_num_groups", int),
    ("--gsp-prompts-per-group", "gsp_prompts_per_group", int),
    ("--gsp-system-prompt-len", "gsp_system_prompt_len", int),
    ("--gsp-question-len", "gsp_question_len", int),
    ("--gsp-output-len", "gsp_output_len", int),
    ("--image-count", "image_count", int),
    ("--image-resolution", "image_resolution", str),
)


def bench_launch(cmd: Command) -> dict[str, Any]:
    out: dict[str, Any] = {"line": cmd.line}
    for flag, key, kind in _BENCH_FLAGS:
        if cmd.has(flag):
            out[key] = _typed(cmd, flag, kind)
    return out


def bench_shape(bench: dict[str, Any]) -> dict[str, Any]:
    """Input/output tokens, prefix hit rate and images as the benchmark generated them."""
    shape: dict[str, Any] = {}
    if bench.get("dataset_name") == "generated-shared-prefix" or "gsp_system_prompt_len" in bench:
        system, question = bench.get("gsp_system_prompt_len"), bench.get("gsp_question_len")
        if system is not None and question is not None and system + question > 0:
            shape["input_tokens"] = system + question
            # One group: every request after the first reuses the system prompt (SGLang's repeat_rate).
            shape["prefix_cache_hit"] = round(system / (system + question), 3)
        shape["output_tokens"] = bench.get("gsp_output_len")
    else:
        shape["input_tokens"] = bench.get("random_input_len")
        shape["output_tokens"] = bench.get("random_output_len")
    if bench.get("dataset_name") == "image" or "image_resolution" in bench:
        count = bench.get("image_count", 1)
        shape["image_inputs"] = f"{count} x {bench.get('image_resolution', 'unknown resolution')}"
    return {k: v for k, v in shape.items() if v is not None}
