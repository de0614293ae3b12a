"""The small parsers: shell lines, tables, values, bucket advice."""

from __future__ import annotations

import pytest

from monitor.recipes.buckets import tpot_advice
from monitor.recipes.commands import scan
from monitor.recipes.shell import logical_lines, split_words
from monitor.recipes.table import find_tables
from monitor.recipes.values import parse_dataset, parse_mode, parse_seconds, token_counts


def test_continuations_join_and_keep_the_first_line_number():
    lines = ["a \\", "  b \\", "  c", "d"]
    got = [(ll.line, ll.text, ll.end_line) for ll in logical_lines(lines, first_line=10)]
    assert got == [(10, "a b c", 12), (13, "d", 13)]


def test_placeholders_with_spaces_stay_one_word():
    assert split_words("--prefill http://<your prefill ip>:8000 8998") == [
        "--prefill", "http://<your prefill ip>:8000", "8998"]
    assert split_words("--dist-init-addr <<first node>>:30143 # note") == ["--dist-init-addr", "<<first node>>:30143"]


def test_arrays_loops_and_exports_resolve_like_a_reader_would():
    script = """
MODEL_PATH=/m
export PORT=31000
P_IP=('<your prefill ip>' '<second>')
for i in "${!P_IP[@]}";
do
    python3 -m sglang.launch_server --model-path ${MODEL_PATH} --host ${P_IP[$i]} --port $PORT \\
      --node-rank $i --dist-init-addr ${P_IP[0]}:5000 --rank-var $NODE_RANK
done
""".splitlines()
    (cmd,) = scan(script, 1, "s.sh")
    assert cmd.kind == "server" and cmd.line == 7
    assert cmd.value("--model-path") == "/m"
    assert cmd.value("--host") == "<your prefill ip>"
    assert cmd.int("--port") == 31000
    assert cmd.value("--node-rank") == "0"
    assert cmd.value("--dist-init-addr") == "<your prefill ip>:5000"
    assert cmd.value("--rank-var") == "$NODE_RANK"  # unknown: left visible
    assert cmd.host_array == ["<your prefill ip>", "<second>"]


def test_command_kinds_and_repeatable_options():
    lines = [
        "python -m sglang_router.launch_router --pd-disaggregation --prefill http://a:1 8998 --prefill http://b:1 none",
        "python -m sglang.bench_serving --dataset-name random --random-input-len 10",
        "sglang serve --port 5 --cuda-graph-bs 1 2 4 --chunked-prefill-size -1",
        "echo python3 -m sglang.launch_server",
    ]
    router, bench, server = scan(lines, 1, "x")
    assert (router.kind, bench.kind, server.kind) == ("router", "bench", "server")
    assert router.values("--prefill") == [["http://a:1", "8998"], ["http://b:1", "none"]]
    assert server.values("--cuda-graph-bs") == [["1", "2", "4"]]
    assert server.int("--chunked-prefill-size") == -1


def test_markdown_and_tab_tables():
    md = ["Group", "", "| Model | Cards | Deploy Mode | Dataset | TPOT |", "|---|---|---|---|---|",
          "| M | 2 | PD Mixed | 1K+1K | 40ms |"]
    (table,) = find_tables(md, "t.md")
    assert table.is_deployments and table.group == "Group"
    assert table.rows[0].line == 5 and table.rows[0].cells["Cards"] == "2"
    (metrics,) = find_tables(["Metric\tValue", "Mean TPOT\t23 ms"], "t")
    assert metrics.is_metrics


@pytest.mark.parametrize(("text", "seconds"), [("20ms", 0.02), ("100ms", 0.1), ("5604.54 ms", 5.60454),
                                                ("1.5s", 1.5), ("50", 0.05), ("fast", None)])
def test_parse_seconds(text, seconds):
    assert parse_seconds(text) == seconds


def test_values():
    assert token_counts("3.5K") == (3500, 3584)
    assert token_counts("256") == (256,)
    assert parse_mode("PD Disaggregation") == "pd-disaggregated"
    assert parse_mode("PD Mixed") == "pd-mixed"
    shape = parse_dataset("64K+1.5K (90% prefix cache hit rate)")
    assert shape and shape.prefix_cache_hit == 0.9 and shape.input_tokens == (64000, 65536)
    shape = parse_dataset("1080p_30+256")
    assert shape and shape.image_resolution == "1920x1080" and shape.input_tokens == (30,)
    assert parse_dataset("lots of tokens") is None


def test_bucket_advice_only_for_non_edges():
    assert tpot_advice(0.02) is None and tpot_advice(0.1) is None
    edges, flag = tpot_advice(0.05)
    assert 0.05 in edges and edges == sorted(edges) and len(edges) == 24
    assert flag.startswith("--bucket-inter-token-latency 0.002 ") and " 0.04 0.05 0.06 " in flag
