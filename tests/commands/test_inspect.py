"""`slo-monitor inspect --json` on every real fixture, numbers checked against hand-computed ones."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.inspect_exposition import inspect_text
from tests.conftest import (
    DOCS_SAMPLE,
    GATEWAY_500,
    GATEWAY_EXPOSITIONS,
    GATEWAY_FIXTURES,
    REAL_FIXTURES,
    REAL_OM,
    REAL_TEXT,
    ROUTER_500,
    ROUTER_ENGINE,
    ROUTER_METRICS,
    ROUTER_PD,
    strict_json,
)

# Hand-computed from sglang_0.5.23_server_metrics.txt (both is_streaming series added):
# TTFT count 141+59, sum 156.87213684644667+73.16132975597544; TPOT count 137+59,
# sum 5.262832129764626+2.171207572295766, cumulative 82 at le=0.035 and 99 at le=0.04.
TTFT_SUM = 156.87213684644667 + 73.16132975597544
TPOT_SUM = 5.262832129764626 + 2.171207572295766


def test_real_fixture_numbers(real_text):
    out = inspect_text(real_text)
    assert out["format"] == "prometheus-text" and out["families"] == 87 and out["samples"] == 545
    ttft, tpot = out["latency"]["ttft"], out["latency"]["tpot"]
    assert ttft["count"] == 200 and math.isclose(ttft["sum"], TTFT_SUM)
    assert tpot["count"] == 196 and math.isclose(tpot["sum"], TPOT_SUM)
    assert math.isclose(tpot["mean"], TPOT_SUM / 196)
    # p50: rank 98 falls in (0.035, 0.04] holding 17 -> 0.035 + 0.005 * 16/17
    assert math.isclose(tpot["p50"], 0.035 + 0.005 * 16 / 17)
    # p99: rank 194.04 in (0.04, 0.06] holding 96 above 99
    assert math.isclose(tpot["p99"], 0.04 + 0.02 * (194.04 - 99) / 96)
    assert tpot["buckets"][-1] == ["+Inf", 196] and [0.04, 99] in tpot["buckets"]
    assert out["latency"]["itl"]["count"] == 32721
    assert out["counters"] == {"requests_total": 196.0, "prompt_tokens_total": 289998.0,
                               "generation_tokens_total": 46531.0, "aborted_requests_total": 4.0}
    assert out["gauges"]["num_running_reqs"] == 13.0 and out["gauges"]["num_queue_reqs"] == 0.0


def test_both_formats_give_the_same_summary(real_text, real_openmetrics):
    a, b = inspect_text(real_text), inspect_text(real_openmetrics)
    assert a.pop("format") == "prometheus-text" and b.pop("format") == "openmetrics"
    assert a == b


def test_docs_sample_has_no_tpot_family():
    out = inspect_text(DOCS_SAMPLE.read_text())
    assert out["latency"]["tpot"] is None and out["latency"]["ttft"]["count"] == 11008
    assert out["counters"]["requests_total"] is None


def test_router_engine_metrics_sum_both_workers():
    out = inspect_text(ROUTER_ENGINE.read_text())
    assert out["latency"]["ttft"]["count"] == 2 * 11008


@pytest.mark.parametrize("path", [ROUTER_METRICS, ROUTER_PD], ids=lambda p: p.name)
def test_router_listener_has_no_sglang_families(path):
    out = inspect_text(path.read_text())
    assert all(v is None for v in out["latency"].values()) and out["samples"] > 100


def test_cli_reads_file_and_stdin(tmp_path):
    cmd = [sys.executable, "-m", "monitor", "inspect", str(REAL_OM), "--json"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    assert out["format"] == "openmetrics" and out["latency"]["tpot"]["count"] == 196
    cmd = [sys.executable, "-m", "monitor", "inspect", "-", "--json"]
    res = subprocess.run(cmd, input=REAL_TEXT.read_text(), check=True, capture_output=True, text=True)
    assert json.loads(res.stdout)["samples"] == 545


@pytest.mark.parametrize("path", [ROUTER_500, GATEWAY_500], ids=lambda p: p.name)
def test_cli_reports_the_router_500_body_as_a_clear_error(path):
    cmd = [sys.executable, "-m", "monitor", "inspect", str(path), "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 2 and "line 1" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("path", sorted(REAL_FIXTURES.glob("*.txt")), ids=lambda p: p.name)
def test_every_shared_fixture_is_summarised_or_refused_with_the_line(path):
    """Every exposition in tests/fixtures/real parses; the two that are not expositions (the router's
    500 body, the npu-exporter doc sample that elides lines with '...') fail on their first line."""
    text = path.read_text()
    if path.name in ("sglang_router_0.3.2_engine_metrics_label_mismatch_error.txt", "npu_exporter_sample.txt"):
        with pytest.raises(ValueError, match=r"^line 1: "):
            inspect_text(text)
        return
    out = inspect_text(text)
    assert out["samples"] > 0 and out["families"] > 0
    assert out["samples"] == sum(len(f.samples) for f in text_string_to_metric_families(text))


def test_cli_prints_strict_json_for_nan_and_inf_values():
    tpot = "sglang:request_time_per_output_token_seconds"
    text = (f'{tpot}_bucket{{le="0.04"}} 1\n{tpot}_bucket{{le="+Inf"}} 2\n{tpot}_count 3\n{tpot}_sum NaN\n'
            "sglang:num_running_reqs NaN\nsglang:token_usage +Inf\nsglang:gen_throughput -Inf\n")
    cmd = [sys.executable, "-m", "monitor", "inspect", "-", "--json"]
    res = subprocess.run(cmd, input=text, check=True, capture_output=True, text=True)
    out = strict_json(res.stdout)
    assert out["latency"]["tpot"]["mean"] is None and out["latency"]["tpot"]["sum"] == "NaN"
    assert out["gauges"] == {"num_running_reqs": "NaN", "token_usage": "+Inf", "gen_throughput": "-Inf",
                             "num_queue_reqs": None}
    assert any("_count 3 disagrees with the +Inf bucket 2" in w for w in out["latency"]["tpot"]["warnings"])


def test_cli_refuses_an_infinite_count_with_one_clear_line():
    tpot = "sglang:request_time_per_output_token_seconds"
    text = f'{tpot}_bucket{{le="0.04"}} 1\n{tpot}_bucket{{le="+Inf"}} +Inf\n{tpot}_count +Inf\n{tpot}_sum 1\n'
    res = subprocess.run([sys.executable, "-m", "monitor", "inspect", "-", "--json"], input=text,
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stdout == ""
    assert f"{tpot}{{}}: bucket count +Inf is not a finite" in res.stderr


@pytest.mark.parametrize("path", GATEWAY_EXPOSITIONS, ids=lambda p: p.name)
def test_every_gateway_capture_is_summarised(path):
    text = path.read_text()
    out = inspect_text(text)
    assert out["samples"] == sum(len(f.samples) for f in text_string_to_metric_families(text)) > 50
    if "engine_metrics" in path.name:  # the workers' merge: the real SGLang exposition once per worker
        assert [w["role"] for w in out["workers"]] in (["server", "server"], ["prefill", "decode"])
        assert "gateway" not in out
    else:  # the gateway's own listener: no SGLang family, a gateway summary
        assert all(v is None for v in out["latency"].values())
        # The failure captures (availability.json) send a few requests each; the main ones 20 and more.
        few = "workers_down" in path.name or "admission" in path.name
        assert out["gateway"]["workers"] == 2 and out["gateway"]["requests_total"] > (0 if few else 20)
        assert out["gateway_version"] == ("smg-1.13" if path.name.startswith("smg_") else "sglang-router-0.3.2")


def test_gateway_engine_metrics_count_a_pd_request_once_and_both_mixed_workers():
    # Each worker serves the real exposition: 200 TTFT observations and 196 requests per worker.
    pd = inspect_text((GATEWAY_FIXTURES / "smg_1.13.0_pd_engine_metrics.txt").read_text())
    assert pd["latency"]["ttft"]["count"] == 200 and pd["counters"]["requests_total"] == 196  # decode only
    assert pd["gauges"]["num_running_reqs"] == 2 * 13  # load: every worker
    for name in ("smg_1.13.0_regular_engine_metrics.txt", "sglang_router_0.3.2_regular_engine_metrics.txt"):
        mixed = inspect_text((GATEWAY_FIXTURES / name).read_text())
        assert mixed["latency"]["ttft"]["count"] == 400 and mixed["counters"]["requests_total"] == 392
