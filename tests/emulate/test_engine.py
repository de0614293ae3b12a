"""The latency model and incidents move the numbers the expected way, on an injected clock."""

from __future__ import annotations

import pytest

from monitor.conventions.slis import SLI_FAMILIES
from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.exposition import npu_chip_values
from monitor.emulate.incidents import Incident, parse_spec
from monitor.emulate.ingress import client_patience
from monitor.emulate.loadgen import LoadShape
from monitor.emulate.request_log import read_records
from tests.emulate.closed_loop import ClosedLoop

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


def test_tpot_regression_raises_mean_tpot_by_the_factor_at_fixed_concurrency(config):
    """bench_serving's shape (a closed loop): the batch stays the same, so TPOT moves by the factor alone."""
    def run(incident):
        dep = EmulatedDeployment(config.deployment("mixed"), seed=4, rate=0)
        if incident:
            dep.add_incident(Incident("mixed", "tpot_regression", factor=2.0))
        ClosedLoop(dep, LoadShape(12, 3500, 300))
        dep.advance(1800)
        return mean(dep.servers[0].store, TPOT)

    assert 1.9 < run(True) / run(False) < 2.1


def test_tpot_regression_under_open_loop_load_also_grows_the_batch(config):
    """With arrivals that do not wait for answers, slower decode keeps more requests in flight, and a
    bigger batch makes every step slower still: TPOT rises by more than the factor."""
    base = EmulatedDeployment(config.deployment("mixed"), seed=4)
    base.advance(1800)
    slow = EmulatedDeployment(config.deployment("mixed"), seed=4)
    slow.add_incident(Incident("mixed", "tpot_regression", factor=2.0))
    slow.advance(1800)
    ratio = mean(slow.servers[0].store, TPOT) / mean(base.servers[0].store, TPOT)
    assert 2.2 < ratio < 3.5


def gauges(dep: EmulatedDeployment, name: str) -> float:
    srv = answering(dep)[0]
    return sum(dep.rank_gauges(srv, r)[name] for r in srv.ranks)


def test_tpot_x3_gauges_follow_the_scheduler_at_fixed_concurrency(config):
    """Closed loop: the same requests in flight take 3x longer, so the tokens produced per second fall to a
    third while running requests and the KV they hold stay where they were."""
    dep = EmulatedDeployment(config.deployment("mixed"), seed=5, rate=0)
    loop = ClosedLoop(dep, LoadShape(12, 3500, 300))
    dep.advance(600)
    before = {g: gauges(dep, g) for g in ("sglang:gen_throughput", "sglang:num_running_reqs", "sglang:token_usage")}
    done = len(loop.done)
    dep.add_incident(Incident("mixed", "tpot_regression", factor=3.0, start=dep.now))
    dep.advance(600)  # several request lifetimes at the slower rate
    after = {g: gauges(dep, g) for g in before}
    assert 0.25 < after["sglang:gen_throughput"] / before["sglang:gen_throughput"] < 0.42
    assert 11 <= after["sglang:num_running_reqs"] <= 12 and 11 <= before["sglang:num_running_reqs"] <= 12
    assert 0.8 < after["sglang:token_usage"] / before["sglang:token_usage"] < 1.25
    # Throughput is what the requests actually produced: finished requests per second fell to a third too.
    rate_before, rate_after = done / 600, (len(loop.done) - done) / 600
    assert rate_after / rate_before < 0.5


def test_tpot_x3_gauges_follow_the_scheduler_under_open_loop_load(config):
    """Open loop (synthetic arrivals at a fixed rate): the same tokens per second still get produced, by more
    requests at once, which hold more KV."""
    dep = EmulatedDeployment(config.deployment("mixed"), seed=5)
    dep.advance(900)
    before = {g: gauges(dep, g) for g in ("sglang:gen_throughput", "sglang:num_running_reqs", "sglang:token_usage")}
    dep.add_incident(Incident("mixed", "tpot_regression", factor=3.0, start=dep.now))
    dep.advance(300)  # the slower requests fill the batch

    def avg(name: str, seconds: int = 300) -> float:
        vals = []
        for _ in range(seconds // 10):
            dep.advance(10)
            vals.append(gauges(dep, name))
        return sum(vals) / len(vals)

    running = avg("sglang:num_running_reqs")
    assert running > 2.0 * before["sglang:num_running_reqs"]
    assert gauges(dep, "sglang:token_usage") > 1.5 * before["sglang:token_usage"]
    # Until the slots run out, arrivals decide the throughput: it stays near what it was.
    assert 0.6 < avg("sglang:gen_throughput") / before["sglang:gen_throughput"] < 1.4


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
    rank = srv.ranks[0]
    gauges = busy.rank_gauges(srv, rank)
    assert gauges["sglang:num_queue_reqs"] > 10
    assert len(rank.running) == rank.capacity  # every slot taken; running counts those in decode
    assert gauges["sglang:num_running_reqs"] == len(rank.decoding) >= rank.capacity - 3
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


def test_hbm_full_counts_the_tokens_lost_as_used_and_admits_fewer(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=8)
    dep.advance(600)
    srv = dep.servers[0]
    rank = srv.ranks[0]
    before = dep.rank_gauges(srv, rank)["sglang:token_usage"]
    running = len(rank.running)
    assert 0.05 < before < 0.6
    dep.add_incident(Incident("mixed", "hbm_full", factor=0.15, start=dep.now))  # room for about 6 requests left
    waiting, most = 0, 0
    for _ in range(60):
        dep.advance(1)
        held = dep.kv.held(rank)
        assert held <= rank.max_total_tokens * 0.15 + len(rank.decoding)  # never more than is left
        waiting, most = max(waiting, len(rank.waiting)), max(most, len(rank.running))
    g = dep.rank_gauges(srv, rank)
    assert before + 0.6 < g["sglang:token_usage"] <= 1.0  # SGLang counts every token not free as used
    assert g["sglang:num_used_tokens"] >= rank.max_total_tokens * 0.85
    assert most < running and waiting > 0  # admitted by tokens: the rest wait
    hbm = npu_chip_values(dep, 0)["npu_chip_info_hbm_used_memory"]
    dep.clear_incidents()
    assert npu_chip_values(dep, 0)["npu_chip_info_hbm_used_memory"] == hbm  # preallocated: the chip never sees it


def retracted(srv) -> float:
    return sum(r.store.counter_value("sglang:num_retracted_requests") for r in srv.ranks)


def test_hbm_full_retracts_what_no_longer_fits_and_the_retracted_requests_resume(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=8)
    dep.advance(300)
    srv = dep.servers[0]
    rank = srv.ranks[0]
    running = len(rank.running)
    assert retracted(srv) == 0 and running > 4
    finished = dep.finished
    dep.add_incident(Incident("mixed", "hbm_full", factor=0.05, start=dep.now, duration=120))  # ~2 requests' room
    dep.advance(0.001)
    assert retracted(srv) == len(rank.retracted) > 0
    held = dep.kv.held(rank)
    assert held <= rank.max_total_tokens * 0.05 + len(rank.decoding) or len(rank.decoding) == 1  # the rest fit
    assert dep.rank_gauges(srv, rank)["sglang:num_retracted_reqs"] == len(rank.retracted)
    tokens = rank.store.counter_value("sglang:num_retracted_output_tokens")
    assert tokens >= len(rank.retracted)  # each had produced at least its first token
    dep.advance(60)
    assert len(rank.waiting) > 0  # fewer fit: the rest queue
    dep.advance(600)
    assert not rank.retracted and not rank.waiting and dep.finished > finished  # all resumed and finished
    assert Incident("mixed", "hbm_full").factor == 1.0 and parse_spec("mixed:hbm_full").factor == 0.7
    with pytest.raises(ValueError, match="share of the KV pool"):
        Incident("mixed", "hbm_full", factor=2)


def test_speculative_decoding_reports_accept_length(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=9)
    dep.advance(600)
    g = dep.rank_gauges(dep.servers[0], dep.servers[0].ranks[0])
    assert 1.0 < g["sglang:spec_accept_length"] <= 4.0
    assert dep.servers[0].store.counter_value("sglang:spec_verify_calls") > 0


def test_spec_accept_drop_lowers_the_accept_length_and_slows_decode_by_as_much(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=9)
    dep.advance(300)
    srv, rank = dep.servers[0], dep.servers[0].ranks[0]
    before = dep.rank_gauges(srv, rank)["sglang:spec_accept_length"]
    rates = {r: r.rate for r in rank.decoding}
    dep.add_incident(Incident("mixed", "spec_accept_drop", factor=2.0, start=dep.now))
    dep.advance(0.001)
    after = dep.rank_gauges(srv, rank)["sglang:spec_accept_length"]
    assert 1.0 <= after < before * 0.6  # accept 2.8 -> 1.4 (never below the token a step makes)
    slower = [r.rate / rates[r] for r in rank.decoding if r in rates]
    assert slower and all(1.7 < x < 2.3 for x in slower)  # seconds per token up with the lost acceptance
    with pytest.raises(ValueError, match="accept length falls"):
        Incident("mixed", "spec_accept_drop", factor=0.5)


def test_kv_transfer_failure_counts_on_both_pd_sides_and_aborts_the_request(config, tmp_path):
    dep = EmulatedDeployment(config.deployment("pd"), seed=9, request_log_dir=tmp_path)
    dep.advance(300)
    prefill, decode = (next(s for s in dep.servers if s.spec.role == r) for r in ("prefill", "decode"))

    def failed(srv) -> float:
        return sum(r.store.counter_value("sglang:num_transfer_failed_reqs") for r in srv.ranks)

    assert failed(prefill) == failed(decode) == 0  # healthy PD pair
    aborted = decode.store.counter_value("sglang:num_aborted_requests")
    client_aborts = len([r for r in read_records(tmp_path) if r["finish_reason"]["type"] == "abort"])
    dep.add_incident(Incident("pd", "kv_transfer_failure", factor=0.5, start=dep.now, duration=120))
    dep.advance(300)
    # Each DP-attention scheduler of the decode server counts its own; the prefill server has one group.
    assert failed(prefill) > 5 and failed(decode) == failed(prefill)
    records = read_records(tmp_path)
    logged = [r for r in records if r["finish_reason"].get("message") == "KV transfer failed"]
    assert len(logged) == failed(prefill) and all("first_token_latency" not in r for r in logged)
    # Every abort the decode server counted is in its request log: the failed transfers plus the few
    # synthetic clients that hang up on their own.
    client_aborts = len([r for r in records if r["finish_reason"]["type"] == "abort"]) - client_aborts - len(logged)
    assert decode.store.counter_value("sglang:num_aborted_requests") - aborted == failed(prefill) + client_aborts
    after = failed(prefill)
    dep.advance(300)  # the incident ended: transfers succeed again
    assert failed(prefill) == after


def test_kv_transfer_failure_share_must_be_a_probability():
    with pytest.raises(ValueError, match="share of transfers"):
        Incident("pd", "kv_transfer_failure", factor=3)


def stage_means(srv) -> dict[str, float]:
    """Mean seconds per `per_stage_req_latency_seconds` stage over the server's ranks."""
    out: dict[str, list[float]] = {}
    for rank in srv.ranks:
        for (name, key), h in rank.store.histograms.items():
            if name == "sglang:per_stage_req_latency_seconds":
                acc = out.setdefault(dict(key)["stage"], [0.0, 0.0])
                acc[0] += h.sum
                acc[1] += h.count
    return {k: s / c for k, (s, c) in out.items() if c}


def test_pd_stages_are_the_ones_sglang_observes_and_add_up_to_ttft(config):
    dep = EmulatedDeployment(config.deployment("pd"), seed=3)
    dep.advance(600)
    prefill, decode = (next(s for s in dep.servers if s.spec.role == r) for r in ("prefill", "decode"))
    p, d = stage_means(prefill), stage_means(decode)
    assert set(p) == {"prefill_bootstrap", "prefill_forward", "prefill_transfer_kv_cache"}
    assert set(d) == {"decode_bootstrap", "decode_transferred", "decode_waiting"}
    queue = {srv.spec.role: sum(r.store.histogram_totals("sglang:queue_time_seconds")[0] for r in srv.ranks)
             / sum(r.store.histogram_totals("sglang:queue_time_seconds")[1] for r in srv.ranks)
             for srv in (prefill, decode)}
    # bootstrap (with the decode-side preallocation) + prefill queue + prefill + KV transfer + decode queue
    # + the first decode step is the TTFT the decode server observed.
    parts = p["prefill_bootstrap"] + queue["prefill"] + p["prefill_forward"] + p["prefill_transfer_kv_cache"]
    parts += d["decode_waiting"]
    assert queue["decode"] == pytest.approx(d["decode_waiting"])
    ttft = mean(decode.store, TTFT)
    assert 0.9 * ttft < parts <= ttft, (parts, ttft)


def test_unified_server_observes_prefill_forward_and_no_prefill_waiting(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=3)
    dep.advance(120)
    assert set(stage_means(dep.servers[0])) == {"prefill_forward"}


def _e2e_buckets(srv) -> list[float]:
    """The server's E2E latency histogram, per bucket, summed over its children."""
    out: list[float] = []
    for (name, _), h in srv.store.histograms.items():
        if name == SLI_FAMILIES["e2e"]:
            out = [a + b for a, b in zip(out, h.counts)] if out else list(h.counts)
    return out


def test_clients_timeouts_spread_around_the_incidents_and_are_the_same_on_a_rerun():
    waits = sorted(client_patience(10.0, f"d-{i:08x}", 0.15) for i in range(2000))
    assert waits == sorted(client_patience(10.0, f"d-{i:08x}", 0.15) for i in range(2000))
    assert 9.8 < waits[1000] < 10.2  # the median client waits the timeout
    assert 8.3 < waits[320] < 8.9 and 11.2 < waits[1680] < 11.9  # one spread (15 %) either side of it
    # The lab's clients share one timeout (see CLIENT_PATIENCE_SPREAD for why).
    assert {client_patience(10.0, f"d-{i:08x}") for i in range(100)} == {10.0}


def test_client_timeout_aborts_what_is_still_unanswered_at_one_age(config):
    dep = EmulatedDeployment(config.deployment("mixed"), seed=5)
    dep.advance(300)
    srv = next(s for s in dep.servers if s.spec.role == "server")
    dep.add_incident(Incident("mixed", "client_timeout", factor=2.0, start=dep.now, duration=300))
    dep.advance(60)  # the requests sent before it (answers of up to ~40 s here) have finished
    aborted, before = srv.store.counter_value("sglang:num_aborted_requests"), _e2e_buckets(srv)
    dep.advance(240)
    gave_up = srv.store.counter_value("sglang:num_aborted_requests") - aborted
    during = [b - a for a, b in zip(before, _e2e_buckets(srv))]
    # Every request unanswered 2 s after it was sent is abandoned, and SGLang aborts it 2 s later: they
    # finish at 4 s of age, all in the E2E bucket (2, 4] s (SGLang counts an aborted request's E2E latency).
    edges = list(dep.buckets["e2e"])
    at = edges.index(4.0)
    assert gave_up > 50 and during[at] >= gave_up * 0.9, (gave_up, during)
    assert sum(during[at + 1:]) < 0.1 * gave_up  # nothing older: nobody waits past the timeout
    aborted = srv.store.counter_value("sglang:num_aborted_requests")
    dep.advance(300)  # the incident ended: only the few clients that hang up on their own
    assert srv.store.counter_value("sglang:num_aborted_requests") - aborted < 0.1 * gave_up
