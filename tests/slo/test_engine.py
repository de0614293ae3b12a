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


def test_a_merged_engine_metrics_target_feeds_request_slis_without_its_prefill_workers():
    """A router's /engine_metrics merges prefill and decode workers: only the decode series are requests."""
    cfg = parse_config({"deployments": [{"name": "d", "mode": "pd-disaggregated", "tpot_target_seconds": 0.04,
                                         "targets": [{"role": "router", "source": "router-engine-metrics",
                                                      "url": "http://r:1/engine_metrics"}]}]})
    dep = cfg.deployments[0]
    eng = DeploymentEngine(dep)

    def merged(n_decode: int, n_prefill: int) -> str:
        decode = exposition(tpot=[0.03] * n_decode, engine="decode", requests=n_decode)
        prefill = exposition(tpot=[0.5] * n_prefill, engine="prefill", requests=n_prefill)
        return decode + "\n".join(ln for ln in prefill.splitlines() if not ln.startswith("#")) + "\n"

    feed(eng, dep.targets[0], 0, merged(0, 0))
    feed(eng, dep.targets[0], 60, merged(10, 10))
    state = eng.state(60)
    assert state.slis["tpot"].windows["5m"].events == 10 and state.slis["tpot"].windows["5m"].good_ratio == 1.0
    assert state.rates["requests_total"] == 10 / 60


def test_direct_server_scrapes_win_over_a_router_engine_metrics_target():
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
        {"role": "server", "url": "http://s:1/metrics"},
        {"role": "server", "source": "router-engine-metrics", "url": "http://r:1/engine_metrics"}]}]})
    dep = cfg.deployments[0]
    eng = DeploymentEngine(dep)
    for t, n in ((0, 0), (60, 10)):
        for target in dep.targets:  # the router's merge repeats the server's series
            eng.observe(target, parse(exposition(tpot=[0.03] * n), W))
        eng.snapshot(t)
    assert eng.state(60).slis["tpot"].windows["5m"].events == 10  # counted once


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
