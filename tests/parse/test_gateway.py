"""The real gateway captures (smg 1.13.0, sglang-router 0.3.2): parsed exactly like prometheus_client parses
them, read by the router summary and the per-worker split, and showing the differences docs/gateways.md
lists, measured on the real binaries (tests/fixtures/gateway/measurements.json)."""

from __future__ import annotations

import json
import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.conventions import names as N
from monitor.conventions.names import DROPPED_LABELS, canonical_name
from monitor.parse.exposition import ParseError, parse
from monitor.parse.gateway import router_summary, split_workers, worker_address
from tests.conftest import GATEWAY_500, GATEWAY_EXPOSITIONS, GATEWAY_FIXTURES, GATEWAY_MEASUREMENTS

SMG = {"regular": GATEWAY_FIXTURES / "smg_1.13.0_regular_metrics.txt",
       "pd": GATEWAY_FIXTURES / "smg_1.13.0_pd_metrics.txt"}
OLD = {"regular": GATEWAY_FIXTURES / "sglang_router_0.3.2_regular_metrics.txt",
       "pd": GATEWAY_FIXTURES / "sglang_router_0.3.2_pd_metrics.txt"}
SMG_ENGINE = {"regular": GATEWAY_FIXTURES / "smg_1.13.0_regular_engine_metrics.txt",
              "pd": GATEWAY_FIXTURES / "smg_1.13.0_pd_engine_metrics.txt"}
OLD_ENGINE = GATEWAY_FIXTURES / "sglang_router_0.3.2_regular_engine_metrics.txt"
# Families of smg 1.13 in conventions that no capture shows, and why (their descriptions are in the binary).
NOT_IN_CAPTURES = {
    "smg_pd_decode_ttft_seconds": "not emitted by the HTTP PD router",
    "smg_pd_kv_transfer_duration_seconds": "sequential dispatch only; the HTTP PD router dispatches in parallel",
    "smg_pd_bootstrap_failures_total": "gRPC path / bootstrap injection failures",
    "smg_pd_kv_transfer_failures_total": "missing connector params at decode handoff (vLLM connectors)",
    "smg_pd_admission_waits_total": "only when the decode running window is full",
    "smg_pd_admission_sheds_total": "idem",
    "smg_pd_prefill_admission_inflight": "only with --prefill-max-inflight-requests-per-worker",
    "smg_pd_prefill_admission_queued": "idem",
    "smg_pd_prefill_admission_wait_seconds": "idem",
    "smg_pd_prefill_admission_rejections_total": "idem",
    "smg_workers_overloaded": "only while a worker is over the overload thresholds",
    "smg_worker_stalled": "only while the liveness veto is set",
}
# The listeners of smg 1.13 after every probe: the main captures, workers down, admission shedding.
SMG_LISTENERS = sorted(p for p in GATEWAY_FIXTURES.glob("smg_1.13.0_*metrics.txt") if "engine_metrics" not in p.name)
OLD_LISTENERS = sorted(p for p in GATEWAY_FIXTURES.glob("sglang_router_0.3.2_*metrics.txt")
                       if "engine_metrics" not in p.name)


def families_in(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text)} | {
        s.name for f in text_string_to_metric_families(text) for s in f.samples}


def measurements() -> dict:
    return json.loads(GATEWAY_MEASUREMENTS.read_text())


def probe(run: str, name: str) -> dict:
    return next(p for p in measurements()[run]["probes"] if p["name"] == name)


def observed(p: dict, family: str) -> float:
    """What one probe added to a histogram family's _sum (one observation in each probe used here)."""
    counts = sum(v for k, v in p["changes"].items() if k.startswith(family + "_count{"))
    assert counts == 1, (p["name"], family, counts)
    return sum(v for k, v in p["changes"].items() if k.startswith(family + "_sum{"))


@pytest.mark.parametrize("path", GATEWAY_EXPOSITIONS, ids=lambda p: p.name)
def test_every_gateway_capture_parses_like_prometheus_client_sample_for_sample(path):
    text = path.read_text()
    ours = sorted((s.name, s.labels, s.value) for s in parse(text).selected)
    theirs = sorted(
        (canonical_name(s.name), tuple(sorted((k, v) for k, v in s.labels.items() if k not in DROPPED_LABELS)),
         s.value)
        for fam in text_string_to_metric_families(text) for s in fam.samples)
    assert len(ours) > 50 and ours == theirs  # the smallest, 0.3.2 after one admission probe, has 88


def test_the_0_3_2_engine_metrics_500_body_is_refused_on_its_first_line():
    with pytest.raises(ParseError, match=r"^line 1: "):
        parse(GATEWAY_500.read_text())
    assert "Label names should agree" in GATEWAY_500.read_text()


@pytest.mark.parametrize("gateway", [SMG, OLD], ids=["smg-1.13", "sglang-router-0.3.2"])
def test_router_summary_counts_workers_health_breakers_and_requests(gateway):
    for mode, path in gateway.items():
        text = path.read_text()
        summary = router_summary(parse(text).selected)
        requests = sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                       if s.name == "smg_router_requests_total")
        assert summary["workers"] == 2 and summary["requests_total"] == requests > 20, mode
        if mode == "regular":  # the capture ends with one worker failing its health checks
            assert summary["workers_healthy"] == 1 and summary["workers_circuit_open"] == 0
    # In PD mode smg 1.13 retries a failing pair 5 times: two failures in a row open both breakers.
    assert router_summary(parse(SMG["pd"].read_text()).selected)["workers_circuit_open"] == 2


def test_a_removed_worker_is_not_counted():
    text = 'smg_worker_health{worker="a"} 1\nsmg_worker_health{worker="b"} -1\nsmg_worker_health{worker="c"} 0\n'
    assert router_summary(parse(text).selected) == {"workers": 2.0, "workers_healthy": 1.0,
                                                    "workers_circuit_open": 0.0, "requests_total": 0.0}


def test_smg_1_13_engine_metrics_keep_colon_names_and_split_by_worker_with_the_role_engine_type_names():
    text = SMG_ENGINE["pd"].read_text()
    assert "\nsglang_" not in text and "\nsglang:" in text  # names kept (0.3.2 renamed them)
    parts = split_workers(parse(text).selected)
    assert sorted(role for role, _ in parts.values()) == ["decode", "prefill"]
    assert all(addr.startswith("http://127.0.0.1:") for addr in parts)
    regular = split_workers(parse(SMG_ENGINE["regular"].read_text()).selected)
    assert [role for role, _ in regular.values()] == ["server", "server"]


def test_smg_1_13_pads_a_label_one_worker_lacks_where_0_3_2_answers_500():
    text = SMG_ENGINE["pd"].read_text()
    prefill = [line for line in text.splitlines() if 'engine_type="prefill"' in line and "tp_rank=" in line]
    decode = [line for line in text.splitlines() if 'engine_type="decode"' in line and "tp_rank=" in line]
    assert prefill and all('dp_rank=""' in line for line in prefill)
    assert decode and all('dp_rank="0"' in line for line in decode)
    assert GATEWAY_500.read_text().startswith("Failed to aggregate metrics: Label names should agree")


def test_0_3_2_engine_metrics_rename_to_underscores_and_split_the_same_way():
    text = OLD_ENGINE.read_text()
    assert "\nsglang:" not in text and "\nsglang_" in text
    parts = split_workers(parse(text).selected)
    assert len(parts) == 2 and all(role == "server" for role, _ in parts.values())
    assert all(s.name.startswith("sglang:") for _, own in parts.values() for s in own)  # canonicalised


def test_samples_without_worker_addr_come_back_under_the_empty_address():
    parts = split_workers(parse('sglang:num_requests_total{engine_type="decode"} 3\n').selected)
    assert list(parts) == [""] and parts[""][0] == "decode"


def test_worker_address_matches_a_target_url_to_its_worker_addr():
    assert worker_address("http://10.0.0.2:8001/metrics") == "http://10.0.0.2:8001"
    assert worker_address("HTTP://Host:30000") == "http://host:30000"


def test_the_1_13_families_in_conventions_exist_in_the_captures_and_not_in_0_3_2():
    smg = set().union(*(families_in(p.read_text()) for p in SMG_LISTENERS))
    old = set().union(*(families_in(p.read_text()) for p in OLD_LISTENERS))
    assert len(SMG_LISTENERS) == 5 and len(OLD_LISTENERS) == 5
    new = [*N.SMG_PD_FAMILIES, *N.SMG_ENGINE_FAMILIES, *N.SMG_WORKER_FAMILIES, *N.SMG_ADMISSION_FAMILIES]
    missing = [f for f in new if f not in smg and f not in NOT_IN_CAPTURES]
    assert not missing, missing
    assert not [f for f in new if f in old]
    assert set(NOT_IN_CAPTURES) <= set(new)  # the exceptions name real conventions entries ...
    assert not [f for f in NOT_IN_CAPTURES if f in smg]  # ... that the captures indeed lack


def test_request_duration_has_29_buckets_up_to_7200_s_in_1_13_and_20_up_to_240_s_in_0_3_2():
    def edges(path):
        les = {s.labels["le"] for f in text_string_to_metric_families(path.read_text()) for s in f.samples
               if s.name == "smg_router_request_duration_seconds_bucket"}
        return sorted(float(x) for x in les if x != "+Inf")

    new, old = edges(SMG["regular"]), edges(OLD["regular"])
    assert (len(new), new[-1]) == (29, 7200.0) and (len(old), old[-1]) == (20, 240.0)
    assert new[:20] == old  # the same first 20 edges, then 300 … 7200


def test_retry_backoff_became_a_histogram_in_1_13():
    def kind(path):
        return next(f.type for f in text_string_to_metric_families(path.read_text())
                    if f.name == "smg_worker_retry_backoff_seconds")

    assert kind(SMG["pd"]) == "histogram" and kind(OLD["pd"]) == "summary"


def test_measured_pd_ttft_is_the_decode_response_head_not_the_first_token():
    # Decode sends its head at once (as SGLang's Starlette StreamingResponse does) and the first token at 2 s.
    p = probe("smg-1.13 pd", "pd-ttft-stream-head-first")
    assert p["client"]["first_data"] > 1.9
    assert observed(p, "smg_pd_ttft_seconds") < 0.1
    # Decode head at 0.8 s, first token at 2.0 s: the histogram follows the head.
    p = probe("smg-1.13 pd", "pd-ttft-stream")
    decode = next(w for w in p["workers"] if w["role"] == "decode")
    assert math.isclose(observed(p, "smg_pd_ttft_seconds"), decode["head"], abs_tol=0.1)
    assert decode["first_token"] - decode["head"] > 1.0
    # Not streamed, the decode head is the whole answer: then it is the decode leg's full duration.
    p = probe("smg-1.13 pd", "pd-ttft-nonstream")
    assert math.isclose(observed(p, "smg_pd_ttft_seconds"), p["client"]["end"], abs_tol=0.1)


@pytest.mark.parametrize("run", ["smg-1.13 regular", "sglang-router-0.3.2 regular"])
def test_measured_request_duration_of_a_stream_is_the_time_to_its_head(run):
    p = probe(run, "stream-head-first")
    assert observed(p, "smg_router_request_duration_seconds") < 0.1 < 1.9 < p["client"]["first_data"]
    p = probe(run, "stream-timing")  # head 0.3 s, first token 1.8 s, end 3.0 s
    assert math.isclose(observed(p, "smg_router_request_duration_seconds"), p["client"]["head"], abs_tol=0.1)


def test_measured_http_responses_count_at_the_last_frame_in_1_13_and_at_the_head_in_0_3_2():
    def moved_mid_stream(run):
        (first, _) = probe(run, "stream-timing")["client"]["mid"]  # 1 s after the head, before the first token
        return any(k.startswith("smg_http_responses_total") for k in first["changes"])

    assert not moved_mid_stream("smg-1.13 regular") and moved_mid_stream("sglang-router-0.3.2 regular")


def test_measured_client_disconnect_is_499_client_closed_request_in_1_13_only():
    def responses(run):
        return {k: v for k, v in probe(run, "client-disconnect")["changes"].items()
                if k.startswith("smg_http_responses_total")}

    for run in ("smg-1.13 regular", "smg-1.13 pd"):
        (key,) = responses(run)
        assert 'status_code="499"' in key and 'error_code="client_closed_request"' in key
    (key,) = responses("sglang-router-0.3.2 regular")
    assert 'status_code="200"' in key


def test_measured_broken_stream_ends_with_an_sse_error_frame_status_200_and_a_backend_error():
    for run in ("smg-1.13 regular", "smg-1.13 pd"):
        p = probe(run, "stream-broken")
        assert p["client"]["done_marker"] and '"type":"stream_error"' in p["client"]["last_frames"][0]
        keys = list(p["changes"])
        assert any(k.startswith("smg_http_responses_total") and 'status_code="200"' in k
                   and 'error_code=""' in k for k in keys)  # not error_code="stream_error"
        assert any(k.startswith("smg_router_request_errors_total") and "backend_error" in k for k in keys)
    old = probe("sglang-router-0.3.2 regular", "stream-broken")
    assert "body_error" in old["client"] and not old["client"]["done_marker"]  # passed through, cut
