"""The real Kimi-K2.6 Ascend page: 11 rows, matched to their sections by the Model line."""

from __future__ import annotations

from collections import Counter

import pytest

from monitor.conventions.slis import DEFAULT_BUCKETS
from monitor.recipes import import_recipe

NAMES = [
    "kimi-k2.6-w4a8-8p-in3k5-out1k5-20ms",
    "kimi-k2.6-w4a8-16p-in64k-out1k-100ms",
    "kimi-k2.6-w4a8-1p1d-16p-in128k-out1k-100ms",
    "kimi-k2.6-w4a8-1p1d-16p-in128k-out1k-prefix90-100ms",
    "kimi-k2.6-w4a8-1p1d-16p-in64k-out1k5-100ms",
    "kimi-k2.6-w4a8-1p1d-16p-in64k-out1k5-prefix90-100ms",
    "kimi-k2.6-w4a8-1p1d-24p-in128k-out1k-prefix90-100ms",
    "kimi-k2.6-w4a8-1p1d-24p-in64k-out1k5-prefix90-100ms",
    "kimi-k2.6-w4a8-8p-in1024x1024-30-out1024-50ms",
    "kimi-k2.6-w4a8-8p-in1080p-30-out256-50ms",
    "kimi-k2.6-w4a8-8p-in3k5-out1k5-50ms",
]


@pytest.fixture(scope="module")
def result(k26_path):
    return import_recipe(k26_path)


@pytest.fixture(scope="module")
def by_name(result):
    return {d.name: d for d in result.deployments}


def test_yields_exactly_the_eleven_table_rows_in_table_order(result):
    assert [d.name for d in result.deployments] == NAMES


def test_row_counts_by_tpot_mode_and_cards(result):
    ds = result.deployments
    assert Counter(d.tpot_target_seconds for d in ds) == {0.02: 1, 0.05: 3, 0.1: 7}
    assert Counter(d.mode for d in ds) == {"pd-mixed": 5, "pd-disaggregated": 6}
    assert Counter(d.cards for d in ds) == {8: 4, 16: 5, 24: 2}
    assert {d.model for d in ds} == {"Kimi-K2.6"}
    assert {d.hardware for d in ds} == {"Atlas 800I A3"}
    assert {d.quantization for d in ds} == {"W4A8 INT8"}
    assert all(d.ttft_target_seconds is None for d in ds)


def test_pd_mixed_rows_have_one_server_target_on_the_launch_port(result):
    for d in (d for d in result.deployments if d.mode == "pd-mixed"):
        assert [(t.role, t.url) for t in d.targets] == [("server", "http://127.0.0.1:6688/metrics")], d.name


def test_pd_rows_have_prefill_decode_and_router_targets(result):
    for d in (d for d in result.deployments if d.mode == "pd-disaggregated"):
        roles = {t.role: t.url for t in d.targets}
        assert roles["prefill"] == "http://<your prefill ip>:8000/metrics"
        decode_ip = "<your decode ip1>" if d.cards == 24 else "<your decode ip>"
        assert roles["decode"] == f"http://{decode_ip}:8001/metrics"
        # The router's own metrics: its Prometheus listener, default port 29000, on its --host.
        assert roles["router"] == "http://127.0.0.1:29000/metrics"
        assert all(t.has_placeholder for t in d.targets if t.role != "router")
        assert d.launch["router"]["pd"] == "1P1D"
        assert d.launch["router"]["prefill"][0]["bootstrap_port"] == 8998
        assert d.launch["router"]["port"] == 6688
        assert d.launch["router"]["policy"] == "cache_aware"
        prefill = next(s for s in d.launch["servers"] if s["role"] == "prefill")
        assert prefill["disaggregation_bootstrap_port"] == 8998


def test_sections_are_matched_by_their_model_line_not_by_position(by_name):
    low_latency = by_name["kimi-k2.6-w4a8-8p-in3k5-out1k5-20ms"]  # first table row, tenth section
    assert low_latency.launch["source"].endswith(":1364")
    assert low_latency.launch["group"] == "Low Latency"
    assert low_latency.launch["servers"][0]["max_running_requests"] == 80
    assert low_latency.launch["bench"]["max_concurrency"] == 64
    # The first section is the 16-card PD Mixed row: TP32 over two nodes.
    mixed16 = by_name["kimi-k2.6-w4a8-16p-in64k-out1k-100ms"]
    assert mixed16.launch["source"].endswith(":26")
    server = mixed16.launch["servers"][0]
    assert (server["tp_size"], server["nnodes"], server["dp_size"]) == (32, 2, 32)
    assert server["context_length"] == 75000
    assert server["speculative_algorithm"] == "EAGLE3"
    assert server["speculative_num_draft_tokens"] == 4


def test_page_warnings_name_toc_order_and_format_note(result):
    text = "\n".join(result.warnings)
    assert "table of contents" in text and "22 section titles" in text
    assert "different order" in text and "line 8" in text
    assert "Format" in text


def test_every_deployment_warns_that_enable_metrics_is_missing(result):
    for d in result.deployments:
        missing = [w for w in d.warnings if "no --enable-metrics" in w]
        assert len(missing) == len(d.launch["servers"]) >= 1, d.name
        assert all(s["enable_metrics"] is False for s in d.launch["servers"])


def test_50ms_targets_warn_with_the_default_list_plus_the_target(result):
    expected = " ".join(f"{e:g}" for e in sorted({*DEFAULT_BUCKETS["tpot"], 0.05}))
    for d in result.deployments:
        bucket = [w for w in d.warnings if "not an edge of SGLang's default TPOT/ITL buckets" in w]
        if d.tpot_target_seconds == 0.05:
            assert len(bucket) == 1 and f"--bucket-inter-token-latency {expected}" in bucket[0], d.name
            assert d.buckets == {}  # without --add-bucket-flags: default buckets
        else:
            assert bucket == [], d.name
        assert "recommended_flags" not in d.launch


def test_add_bucket_flags_writes_buckets_and_recommended_flag(k26_path):
    ds = import_recipe(k26_path, add_bucket_flags=True).deployments
    edges = sorted({*DEFAULT_BUCKETS["tpot"], 0.05})
    for d in ds:
        if d.tpot_target_seconds == 0.05:
            assert d.buckets == {"tpot": edges, "itl": edges}
            flag = next(f for f in d.launch["recommended_flags"] if f.startswith("--bucket-inter-token-latency"))
            assert flag.split()[1:] == [f"{e:g}" for e in edges]
            assert any("recommended_flags" in w for w in d.warnings)
        else:
            assert d.buckets == {}
        assert "--enable-metrics" in d.launch["recommended_flags"]


def test_dataset_shapes_come_from_the_benchmark_commands(by_name):
    d = by_name["kimi-k2.6-w4a8-1p1d-16p-in128k-out1k-prefix90-100ms"]
    assert (d.input_tokens, d.output_tokens, d.prefix_cache_hit) == (117964 + 13107, 1024, 0.9)
    assert d.dataset == "128K+1K (90% prefix cache hit rate)"
    d = by_name["kimi-k2.6-w4a8-16p-in64k-out1k-100ms"]
    assert (d.input_tokens, d.output_tokens, d.prefix_cache_hit) == (64000, 1000, None)
    d = by_name["kimi-k2.6-w4a8-8p-in1080p-30-out256-50ms"]
    assert (d.input_tokens, d.output_tokens, d.image_inputs) == (30, 256, "1 x 1920x1080")
    assert by_name["kimi-k2.6-w4a8-8p-in1024x1024-30-out1024-50ms"].image_inputs == "1 x 1024x1024"


def test_multi_node_decode_targets_node_rank_zero_and_says_so(by_name):
    d = by_name["kimi-k2.6-w4a8-1p1d-24p-in64k-out1k5-prefix90-100ms"]
    decode = next(s for s in d.launch["servers"] if s["role"] == "decode")
    assert decode["hosts"] == ["<your decode ip1>", "<your decode ip2>"]
    assert (decode["tp_size"], decode["nnodes"], decode["speculative_num_draft_tokens"]) == (32, 2, 2)
    assert any("spans 2 nodes" in w and "<your decode ip2>" in w for w in d.warnings)


def test_odd_things_on_the_page_become_warnings(by_name):
    mixed16 = by_name["kimi-k2.6-w4a8-16p-in64k-out1k-100ms"]
    assert any("without --dist-init-addr/--node-rank" in w for w in mixed16.warnings)
    unquoted = by_name["kimi-k2.6-w4a8-8p-in3k5-out1k5-50ms"]
    assert any("unquoted JSON" in w for w in unquoted.warnings)
