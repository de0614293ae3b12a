"""The engine over time: resets, gaps, merging servers, empty windows, off-edge targets, load."""

from __future__ import annotations

import math

import pytest

from monitor.config import parse_config
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.slo.engine import DeploymentEngine
from tests.slo.helpers import exposition

W = engine_wanted()


def make(mode="pd-mixed", roles=("server",), tpot=0.04, ttft=None, objective=0.99):
    dep = {"name": "d", "mode": mode, "tpot_target_seconds": tpot, "objective": objective,
           "targets": [{"role": r, "url": f"http://127.0.0.1:{9000 + i}/metrics"} for i, r in enumerate(roles)]}
    if ttft:
        dep["ttft_target_seconds"] = ttft
    cfg = parse_config({"deployments": [dep]})
    d = cfg.deployments[0]
    return DeploymentEngine(d), d.targets


def feed(engine, target, t, text):
    engine.observe(target, parse(text, W))
    engine.snapshot(t)


def test_window_delta_over_two_scrapes():
    eng, (srv,) = make()
    feed(eng, srv, 0, exposition(tpot=[0.03] * 10))
    feed(eng, srv, 60, exposition(tpot=[0.03] * 10 + [0.03] * 98 + [0.05] * 2))
    w = eng.state(60).slis["tpot"].windows["5m"]
    assert w.events == 100 and math.isclose(w.good_ratio, 0.98)
    assert math.isclose(w.burn_rate, 2.0)  # 2 % bad against a 1 % budget


def test_counter_reset_mid_window_loses_nothing_and_counts_once():
    eng, (srv,) = make()
    feed(eng, srv, 0, exposition(tpot=[0.03] * 50))
    feed(eng, srv, 30, exposition(tpot=[0.03] * 80))
    feed(eng, srv, 60, exposition(tpot=[0.03] * 5 + [0.05] * 5))  # restarted: fresh counters
    feed(eng, srv, 90, exposition(tpot=[0.03] * 15 + [0.05] * 5))
    w = eng.state(90).slis["tpot"].windows["5m"]
    assert w.events == 30 + 10 + 10 and math.isclose(w.good_ratio, (30 + 5 + 10) / 50)
    assert eng.resets[srv.id] == 1


def test_target_missing_for_a_while_then_back():
    eng, (srv,) = make()
    feed(eng, srv, 0, exposition(tpot=[0.03] * 10))
    for t in (30, 60, 90):
        eng.target_down(srv)
        eng.snapshot(t)
    feed(eng, srv, 120, exposition(tpot=[0.03] * 30))
    assert eng.state(120).slis["tpot"].windows["5m"].events == 20
    assert not eng.resets


def test_two_decode_servers_merge_and_prefill_is_ignored():
    eng, (pre, d1, d2) = make(mode="pd-disaggregated", roles=("prefill", "decode", "decode"))
    for t, n in ((0, 0), (60, 1)):
        eng.observe(pre, parse(exposition(tpot=[0.5] * 100 * n, engine="prefill"), W))
        eng.observe(d1, parse(exposition(tpot=[0.03] * 40 * n, engine="decode"), W))
        eng.observe(d2, parse(exposition(tpot=[0.03] * 9 * n + [0.05] * n, engine="decode"), W))
        eng.snapshot(t)
    w = eng.state(60).slis["tpot"].windows["5m"]
    assert w.events == 50 and math.isclose(w.good_ratio, 49 / 50)


def test_empty_window_exports_no_sli_and_zero_burn():
    eng, (srv,) = make()
    feed(eng, srv, 0, exposition(tpot=[0.03] * 10))
    feed(eng, srv, 60, exposition(tpot=[0.03] * 10))
    w = eng.state(60).slis["tpot"].windows["5m"]
    assert w.events == 0 and w.good_ratio is None and w.burn_rate == 0.0
    assert all(v is None for v in w.quantiles.values()) and w.mean is None


def test_target_off_bucket_edges_is_flagged_with_the_fixing_flag():
    eng, (srv,) = make(tpot=0.05)
    feed(eng, srv, 0, exposition())
    feed(eng, srv, 60, exposition(tpot=[0.045] * 10))
    s = eng.state(60).slis["tpot"]
    assert not s.exact
    assert s.fix_flag.startswith("--bucket-inter-token-latency ") and " 0.05 " in s.fix_flag
    w = s.windows["5m"]
    assert w.good_ratio_lower == 0.0 and w.good_ratio_upper == 1.0 and math.isclose(w.good_ratio, 0.5)


def test_target_on_custom_edges_is_exact():
    edges = [0.02, 0.04, 0.05, 0.06]
    eng, (srv,) = make(tpot=0.05)
    feed(eng, srv, 0, exposition(edges_tpot=edges))
    feed(eng, srv, 60, exposition(tpot=[0.045] * 10, edges_tpot=edges))
    s = eng.state(60).slis["tpot"]
    assert s.exact and s.fix_flag is None and s.windows["5m"].good_ratio == 1.0


def test_windows_while_history_is_short_report_coverage():
    eng, (srv,) = make()
    feed(eng, srv, 1000, exposition(tpot=[0.03]))
    feed(eng, srv, 1100, exposition(tpot=[0.03] * 3))
    w = eng.state(1100).slis["tpot"].windows["1h"]
    assert w.covered_seconds == 100 and w.events == 2


def test_six_hour_window_uses_thinned_history():
    eng, (srv,) = make()
    for n, t in enumerate(range(0, 7 * 3600, 15), 1):
        feed(eng, srv, t, exposition(tpot=[0.03] * n))
    assert len(eng.store) < 7 * 3600 / 15 / 4  # 1680 scrapes kept as ~390 snapshots (1/min past 7 min)
    now = 7 * 3600 - 15
    w6 = eng.state(now).slis["tpot"].windows["6h"]
    assert abs(w6.events - 6 * 3600 / 15) <= 60 / 15  # within one coarse step


def test_error_budget_over_the_history():
    eng, (srv,) = make(objective=0.9)
    feed(eng, srv, 0, exposition())
    feed(eng, srv, 600, exposition(tpot=[0.03] * 95 + [0.05] * 5))
    s = eng.state(600).slis["tpot"]
    assert math.isclose(s.budget_remaining, 0.5)  # 5 % bad of a 10 % budget


@pytest.mark.parametrize("tp_ranks", [1, 4])
def test_load_gauges_sum_dp_ranks_and_never_tp_ranks(tp_ranks):
    eng, (srv,) = make()
    eng.observe(srv, parse(exposition(running=3, dp_ranks=4, tp_ranks=tp_ranks), W))
    assert eng.state(0).load["all"]["num_running_reqs"] == 12


def test_request_rate_over_five_minutes():
    eng, (srv,) = make()
    feed(eng, srv, 0, exposition(requests=100))
    feed(eng, srv, 100, exposition(requests=150))
    assert math.isclose(eng.state(100).rates["requests_total"], 0.5)


def test_a_pd_prefill_server_feeds_no_request_number():
    """Its E2E covers its part only and its requests are the decode server's too (SLI_ROLES)."""
    eng, (prefill, decode) = make(mode="pd-disaggregated", roles=("prefill", "decode"))
    for t, n in ((0, 0), (60, 10)):
        eng.observe(prefill, parse(exposition(tpot=[0.5] * n, engine="prefill", requests=n), W))
        eng.observe(decode, parse(exposition(tpot=[0.03] * n, engine="decode", requests=n), W))
        eng.snapshot(t)
    state = eng.state(60)
    assert state.slis["tpot"].windows["5m"].events == 10 and state.slis["tpot"].windows["5m"].good_ratio == 1.0
    assert math.isclose(state.rates["requests_total"], 10 / 60)


def test_a_counter_born_inside_the_window_has_a_rate_from_its_first_sighting():
    """SGLang creates num_requests_total at the first request: the rate must not wait ~5 minutes."""
    eng, (srv,) = make()
    feed(eng, srv, 0, exposition())  # the server answers, no request yet: no counter
    feed(eng, srv, 10, exposition(tpot=[0.03] * 5, requests=5))
    feed(eng, srv, 20, exposition(tpot=[0.03] * 15, requests=15))
    assert math.isclose(eng.state(20).rates["requests_total"], 15 / 20)


def test_a_target_first_scraped_late_adds_only_what_happens_after_it_is_seen():
    """Its history from before the sidecar looked is not one window's events (Prometheus's rate agrees)."""
    eng, (a, b) = make(roles=("server", "server"))
    feed(eng, a, 0, exposition(tpot=[0.03] * 10, requests=10))  # b is down
    eng.observe(a, parse(exposition(tpot=[0.03] * 20, requests=20), W))
    eng.observe(b, parse(exposition(tpot=[0.5] * 5000, requests=5000), W))  # b comes up with a long past
    eng.snapshot(60)
    eng.observe(a, parse(exposition(tpot=[0.03] * 30, requests=30), W))
    eng.observe(b, parse(exposition(tpot=[0.5] * 5000 + [0.03] * 10, requests=5010), W))
    eng.snapshot(120)
    w = eng.state(120).slis["tpot"].windows["5m"]
    assert w.events == 30 and w.good_ratio == 1.0  # 20 from a, 10 from b; none of b's 5000 old ones
    assert math.isclose(eng.state(120).rates["requests_total"], 30 / 120)


def test_a_series_new_on_a_scraped_target_counts_from_zero():
    eng, (srv,) = make()
    feed(eng, srv, 0, exposition(tpot=[0.03] * 10))
    both = exposition(tpot=[0.03] * 10) + exposition(tpot=[0.5] * 4).replace('is_streaming="true"', 'is_streaming="false"')
    feed(eng, srv, 60, both)  # the non-streaming series appears with its first 4 requests
    w = eng.state(60).slis["tpot"].windows["5m"]
    assert w.events == 4 and w.good_ratio == 0.0


def test_a_rejected_family_leaves_every_family_of_the_scrape_unapplied():
    """The scrape is rejected whole: a good TTFT histogram read before a bad TPOT one must not count."""
    from monitor.parse.families import HistogramError

    eng, (srv,) = make(ttft=1.0)
    feed(eng, srv, 0, exposition(tpot=[0.03] * 10, ttft=[0.5] * 10))
    count = 'sglang:request_time_per_output_token_seconds_count{engine_type="unified",is_streaming="true",model_name="m"}'
    bad = exposition(tpot=[0.03] * 10, ttft=[0.5] * 50).replace(f"{count} 10.0", f"{count} NaN")
    assert "NaN" in bad
    with pytest.raises(HistogramError):
        eng.observe(srv, parse(bad, W))
    eng.snapshot(60)
    assert eng.state(60).slis["ttft"].windows["5m"].events == 0


def _drop_sum(text: str, family: str = "sglang:request_time_per_output_token_seconds") -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(family + "_sum")) + "\n"


def test_missing_sum_flags_the_target_and_reports_no_mean_even_merged_with_a_good_server():
    eng, (d1, d2) = make(roles=("server", "server"))
    for t, n in ((0, 1), (60, 2)):
        eng.observe(d1, parse(exposition(tpot=[0.03] * 10 * n), W))
        eng.observe(d2, parse(_drop_sum(exposition(tpot=[0.03] * 10 * n)), W))
        eng.snapshot(t)
    w = eng.state(60).slis["tpot"].windows["5m"]
    assert w.events == 20 and w.mean is None  # not 0.015 s (the good server's sum over both counts)
    assert eng.warnings[d1.id] == []
    (warning,) = eng.warnings[d2.id]
    assert "sglang:request_time_per_output_token_seconds" in warning and "no _sum" in warning


def test_count_disagreeing_with_the_inf_bucket_flags_the_target():
    eng, (srv,) = make()
    text = exposition(tpot=[0.03] * 10).replace(
        'sglang:request_time_per_output_token_seconds_count{engine_type="unified",is_streaming="true",model_name="m"} 10.0',
        'sglang:request_time_per_output_token_seconds_count{engine_type="unified",is_streaming="true",model_name="m"} 12.0')
    eng.observe(srv, parse(text, W))
    assert any("_count 12 disagrees with the +Inf bucket 10" in w for w in eng.warnings[srv.id])


def test_a_non_finite_counter_is_skipped_and_flagged():
    eng, (srv,) = make()
    eng.observe(srv, parse(exposition(requests=float("nan")), W))
    assert any("sglang:num_requests_total" in w and "NaN" in w for w in eng.warnings[srv.id])


def test_arrivals_count_only_generation_routes_of_sglangs_http_counter():
    # SGLang's HTTP middleware counts every route as a request arrives: /metrics (this scrape), /health and
    # GET requests are not arrivals.
    eng, (srv,) = make()

    def page(generate: int, chat: int, scrapes: int) -> str:
        return exposition(tpot=[0.03] * 10) + (
            "# TYPE sglang:http_requests_total counter\n"
            f'sglang:http_requests_total{{endpoint="/generate",method="POST"}} {generate}\n'
            f'sglang:http_requests_total{{endpoint="/v1/chat/completions",method="POST"}} {chat}\n'
            f'sglang:http_requests_total{{endpoint="/metrics",method="GET"}} {scrapes}\n'
            f'sglang:http_requests_total{{endpoint="/v1/chat/completions",method="GET"}} {scrapes}\n')

    feed(eng, srv, 0, page(10, 5, 100))
    feed(eng, srv, 30, page(40, 15, 200))
    # Increases since first seen: 30 on /generate and 10 on chat completions; the GET routes rose by 200.
    assert eng.store.latest().counters["arrived_total"] == 40
