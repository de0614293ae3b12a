"""The latency model and incidents move the numbers the expected way, on an injected clock."""

from __future__ import annotations

from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.incidents import Incident
from monitor.emulate.request_log import read_records

TPOT = "sglang:request_time_per_output_token_seconds"
TTFT = "sglang:time_to_first_token_seconds"


def mean(store, family: str) -> float:
    s, c = store.histogram_totals(family)
    return s / c


def answering(dep: EmulatedDeployment):
    return [s for s in dep.servers if s.spec.role != "prefill"]


def test_same_seed_same_numbers_however_time_is_cut(config):
    a = EmulatedDeployment(config.deployment("mixed"), seed=7)
    b = EmulatedDeployment(config.deployment("mixed"), seed=7)
    a.advance(1200)
    for _ in range(12):
        b.advance(100)
    assert a.servers[0].store.counters == b.servers[0].store.counters
    assert mean(a.servers[0].store, TPOT) == mean(b.servers[0].store, TPOT)


def test_healthy_tpot_sits_under_the_target_and_rarely_exceeds_it(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=1)
    dep.advance(4 * 3600)
    hist = next(h for (n, _), h in dep.servers[0].store.histograms.items() if n == TPOT)
    target = config.deployment("mixed").tpot_target_seconds
    assert 0.6 * target < mean(dep.servers[0].store, TPOT) < 0.85 * target
    over = sum(c for edge, c in zip((*hist.edges, float("inf")), hist.counts) if edge > target)
    assert hist.count > 500
    assert over / hist.count < 0.01  # well inside a 99 % objective


def test_ground_truth_mean_tpot_matches_the_histogram(config, tmp_path):
    dep = EmulatedDeployment(config.deployment("pd"), seed=2, request_log_dir=tmp_path)
    dep.advance(1800)
    dep.close()
    records = read_records(tmp_path)
    tpots = [1 / r["decode_throughput"] for r in records if "decode_throughput" in r]
    ttfts = [r["first_token_latency"] for r in records]
    assert len(tpots) > 100
    assert records[0]["request_parameters"].startswith("{")
    s = c = ts = tc = 0.0
    for srv in answering(dep):
        a, b = srv.store.histogram_totals(TPOT)
        s, c = s + a, c + b
        a, b = srv.store.histogram_totals(TTFT)
        ts, tc = ts + a, tc + b
    assert c == len(tpots)
    assert abs(s / c - sum(tpots) / len(tpots)) / (s / c) < 0.005
    assert abs(ts / tc - sum(ttfts) / len(ttfts)) / (ts / tc) < 0.005


def test_tpot_regression_raises_mean_tpot_by_about_the_factor(config):
    base = EmulatedDeployment(config.deployment("mixed"), seed=4)
    base.advance(1800)
    slow = EmulatedDeployment(config.deployment("mixed"), seed=4)
    slow.add_incident(Incident("mixed", "tpot_regression", factor=2.0))
    slow.advance(1800)
    ratio = mean(slow.servers[0].store, TPOT) / mean(base.servers[0].store, TPOT)
    assert 1.7 < ratio < 2.5


def test_ttft_spike_raises_ttft(config):
    base = EmulatedDeployment(config.deployment("mixed"), seed=4)
    base.advance(900)
    spiky = EmulatedDeployment(config.deployment("mixed"), seed=4)
    spiky.add_incident(Incident("mixed", "ttft_spike", factor=4.0))
    spiky.advance(900)
    assert mean(spiky.servers[0].store, TTFT) > 2.5 * mean(base.servers[0].store, TTFT)


def test_queue_buildup_grows_the_queue_and_raises_ttft_and_tpot(config):
    base = EmulatedDeployment(config.deployment("mixed"), seed=5)
    base.advance(1800)
    busy = EmulatedDeployment(config.deployment("mixed"), seed=5)
    busy.add_incident(Incident("mixed", "queue_buildup", factor=3.0))
    busy.advance(1800)
    srv = busy.servers[0]
    gauges = busy.rank_gauges(srv, srv.ranks[0])
    assert gauges["sglang:num_queue_reqs"] > 10
    assert gauges["sglang:num_running_reqs"] == srv.ranks[0].capacity
    assert mean(srv.store, TTFT) > 3 * mean(base.servers[0].store, TTFT)
    assert mean(srv.store, TPOT) > 1.3 * mean(base.servers[0].store, TPOT)


def test_restart_resets_counters_and_changes_pid(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=6)
    dep.advance(1200)
    srv = dep.servers[0]
    before, pid = srv.store.counter_value("sglang:num_requests"), srv.pid
    assert before > 50
    dep.add_incident(Incident("mixed", "restart", start=dep.now))
    dep.advance(1)
    assert srv.store.counter_value("sglang:num_requests") < before
    assert srv.pid != pid
    dep.advance(600)
    assert 0 < srv.store.counter_value("sglang:num_requests") < before


def test_down_and_metrics_disabled_are_flags_for_the_listeners(config):
    dep = EmulatedDeployment(config.deployment("pd"), seed=1)
    dep.add_incident(Incident("pd", "down", start=10, duration=20, role="decode"))
    dep.add_incident(Incident("pd", "metrics_disabled", start=0, duration=5))
    assert dep.effects("prefill").metrics_disabled and not dep.effects("decode").down
    dep.advance(15)
    assert dep.effects("decode").down and not dep.effects("prefill").down
    dep.advance(20)
    assert not dep.effects("decode").down and not dep.effects("prefill").metrics_disabled


def test_hbm_full_raises_token_usage(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=8)
    dep.advance(600)
    srv = dep.servers[0]
    assert dep.rank_gauges(srv, srv.ranks[0])["sglang:token_usage"] < 0.9
    dep.add_incident(Incident("mixed", "hbm_full", start=dep.now))
    dep.advance(60)
    assert dep.rank_gauges(srv, srv.ranks[0])["sglang:token_usage"] >= 0.97


def test_speculative_decoding_reports_accept_length(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=9)
    dep.advance(600)
    g = dep.rank_gauges(dep.servers[0], dep.servers[0].ranks[0])
    assert 1.0 < g["sglang:spec_accept_length"] <= 4.0
    assert dep.servers[0].store.counter_value("sglang:spec_verify_calls") > 0


def test_kv_transfer_failure_counts_on_both_pd_sides_and_aborts_the_request(config, tmp_path):
    dep = EmulatedDeployment(config.deployment("pd"), seed=9, request_log_dir=tmp_path)
    dep.advance(300)
    prefill, decode = (next(s for s in dep.servers if s.spec.role == r) for r in ("prefill", "decode"))

    def failed(srv) -> float:
        return sum(r.store.counter_value("sglang:num_transfer_failed_reqs") for r in srv.ranks)

    assert failed(prefill) == failed(decode) == 0  # healthy PD pair
    aborted = decode.store.counter_value("sglang:num_aborted_requests")
    dep.add_incident(Incident("pd", "kv_transfer_failure", factor=0.5, start=dep.now, duration=120))
    dep.advance(300)
    # Each DP-attention scheduler of the decode server counts its own; the prefill server has one group.
    assert failed(prefill) > 5 and failed(decode) == failed(prefill)
    assert decode.store.counter_value("sglang:num_aborted_requests") - aborted == failed(prefill)
    logged = [r for r in read_records(tmp_path) if r["finish_reason"].get("message") == "KV transfer failed"]
    assert len(logged) == failed(prefill) and all("first_token_latency" not in r for r in logged)
    after = failed(prefill)
    dep.advance(300)  # the incident ended: transfers succeed again
    assert failed(prefill) == after


def test_kv_transfer_failure_share_must_be_a_probability():
    import pytest

    with pytest.raises(ValueError, match="share of transfers"):
        Incident("pd", "kv_transfer_failure", factor=3)
