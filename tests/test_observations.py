"""Scrape results applied to the sidecar's state: statuses, engine input, telemetry. No network."""

from __future__ import annotations

import logging

from monitor.config import parse_config
from monitor.observations import Observations
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.scrape.result import ScrapeResult
from monitor.telemetry.model import TelemetryResult
from tests.slo.helpers import exposition

CFG = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
    {"role": "server", "url": "http://s:1/metrics"}, {"role": "router", "url": "http://r:1/metrics"},
    {"role": "npu", "node": "n"}, {"role": "server", "url": "http://<fill-me>:1/metrics"}]}]})
SERVER, ROUTER, NPU, PLACEHOLDER = CFG.deployments[0].targets


def ok(target, ts, text, wanted=None):
    return ScrapeResult("d", target, ts, 0.01, len(text), exposition=parse(text, wanted or engine_wanted()))


def test_a_successful_scrape_feeds_the_engine_and_marks_the_target_up():
    obs = Observations(CFG)
    obs.apply(ok(SERVER, 0, exposition(tpot=[0.03] * 2)))
    obs.snapshot("d", 0)
    obs.apply(ok(SERVER, 60, exposition(tpot=[0.03] * 2 + [0.5] * 2)))
    obs.snapshot("d", 60)
    st = obs.statuses[("d", SERVER.id)]
    assert st.up and st.scrapes == 2 and st.samples > 0
    w = obs.engines["d"].state(60).slis["tpot"].windows["5m"]
    assert (w.events, w.good_ratio) == (2, 0.0)  # what happened after the first sight: two slow ones


def test_a_failed_scrape_keeps_the_windows_and_says_why():
    obs = Observations(CFG)
    obs.apply(ok(SERVER, 0, exposition(tpot=[0.03] * 2, running=3)))
    obs.apply(ScrapeResult("d", SERVER, 5, 3.0, error="timed out after 3s"))
    st = obs.statuses[("d", SERVER.id)]
    assert not st.up and st.last_error == "timed out after 3s" and st.errors == 1
    assert len(obs.engines["d"].book.hists) > 0  # accumulators kept
    assert obs.engines["d"].state(5).load == {}  # stale load gauges dropped


def test_a_histogram_the_engine_refuses_fails_the_scrape():
    bad = exposition(tpot=[0.03]).replace('le="+Inf"} 1.0', 'le="+Inf"} 0.0')  # +Inf below a lower bucket
    obs = Observations(CFG)
    obs.apply(ok(SERVER, 0, bad))
    st = obs.statuses[("d", SERVER.id)]
    assert not st.up and st.last_error.startswith("malformed exposition")


def test_router_scrapes_are_summarised_not_fed_to_the_engine():
    text = 'smg_worker_health{worker="a"} 1\nsmg_worker_health{worker="b"} 0\nsmg_router_requests_total{route="x"} 7\n'
    obs = Observations(CFG)
    obs.apply(ok(ROUTER, 0, text, wanted={"smg_worker_health", "smg_router_requests_total"}))
    st = obs.statuses[("d", ROUTER.id)]
    assert st.up and st.detail == {"workers": 2.0, "workers_healthy": 1.0, "workers_circuit_open": 0.0,
                                   "requests_total": 7.0}
    assert not obs.engines["d"].book.hists


def test_telemetry_results_are_kept_and_a_partial_answer_is_flagged():
    obs = Observations(CFG)
    tele = TelemetryResult(source="npu-smi", node="n", up=True, target=NPU.id, warnings=("ecc: no chip", "x"))
    obs.apply(ScrapeResult("d", NPU, 0, 0.1, telemetry=tele))
    st = obs.statuses[("d", NPU.id)]
    assert st.up and st.last_error == "partial: ecc: no chip (+1 more)"
    assert obs.readings_by_deployment() == {"d": [tele]}


def test_placeholder_targets_start_with_the_reason():
    st = Observations(CFG).statuses[("d", PLACEHOLDER.id)]
    assert st.placeholder and "placeholder" in st.last_error


def _merged(*workers: tuple[str, str, int]) -> str:
    """A gateway's /engine_metrics: each worker's exposition with its worker_addr."""
    out = []
    for addr, engine, n in workers:
        text = exposition(tpot=[0.03 if engine != "prefill" else 0.5] * n, engine=engine, requests=n)
        out += [ln.replace("{", f'{{worker_addr="{addr}",', 1) for ln in text.splitlines() if not ln.startswith("#")]
    return "\n".join(out) + "\n"


def test_a_gateway_merge_feeds_each_worker_with_its_role_so_a_pd_request_counts_once():
    cfg = parse_config({"deployments": [{"name": "d", "mode": "pd-disaggregated", "tpot_target_seconds": 0.04,
                                         "targets": [{"role": "router", "source": "router-engine-metrics",
                                                      "url": "http://r:1/engine_metrics"}]}]})
    (gw,) = cfg.deployments[0].targets
    obs = Observations(cfg)
    for t, n in ((0, 0), (60, 10)):
        obs.apply(ok(gw, t, _merged(("http://p:1", "prefill", n), ("http://d:1", "decode", n))))
        obs.snapshot("d", t)
    state = obs.engines["d"].state(60)
    assert state.slis["tpot"].windows["5m"].events == 10 and state.slis["tpot"].windows["5m"].good_ratio == 1.0
    assert state.rates["requests_total"] == 10 / 60
    assert obs.statuses[("d", gw.id)].detail == {"workers": 2.0, "workers_scraped_directly": 0.0}


def test_a_worker_scraped_directly_is_not_read_again_from_the_gateway_merge():
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
        {"role": "server", "url": "http://s:1/metrics"},
        {"role": "router", "source": "router-engine-metrics", "url": "http://r:1/engine_metrics"}]}]})
    direct, gw = cfg.deployments[0].targets
    obs = Observations(cfg)
    for t, n in ((0, 0), (60, 10)):
        obs.apply(ok(direct, t, exposition(tpot=[0.03] * n, requests=n)))
        obs.apply(ok(gw, t, _merged(("http://s:1", "unified", n), ("http://other:1", "unified", 5 * n))))
        obs.snapshot("d", t)
    assert obs.engines["d"].state(60).slis["tpot"].windows["5m"].events == 10 + 50
    assert "also scraped directly" in obs.statuses[("d", gw.id)].last_error


def test_a_target_going_down_is_logged_once_with_its_reason_and_again_when_it_recovers(caplog):
    obs = Observations(CFG)
    with caplog.at_level(logging.INFO, logger="monitor.observations"):
        obs.apply(ScrapeResult("d", SERVER, 0, 3.0, error="connection failed: refused"))  # down from the start
        obs.apply(ScrapeResult("d", SERVER, 5, 3.0, error="timed out after 3s"))  # still down: said already
        obs.apply(ok(SERVER, 10, exposition(tpot=[0.03])))
        obs.apply(ok(SERVER, 15, exposition(tpot=[0.03])))
        obs.apply(ScrapeResult("d", SERVER, 20, 3.0, error="HTTP 503"))
        down = TelemetryResult(source="npu-smi", node="n", up=False, target=NPU.id, error="npu-smi: not found")
        obs.apply(ScrapeResult("d", NPU, 20, 0.1, telemetry=down))
        obs.apply(ScrapeResult("d", NPU, 25, 0.1, telemetry=down))
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [
        (logging.WARNING, f"d {SERVER.id}: down: connection failed: refused"),
        (logging.INFO, f"d {SERVER.id}: up again"),
        (logging.WARNING, f"d {SERVER.id}: down: HTTP 503"),
        (logging.WARNING, f"d {NPU.id}: down: npu-smi: not found"),
    ], said


def test_the_down_line_carries_no_credentials(caplog):
    cfg = parse_config({"deployments": [{"name": "d", "targets": [
        {"role": "server", "url": "http://user:s3cret@10.0.0.1:1/metrics"}]}]})
    (target,) = cfg.deployments[0].targets
    with caplog.at_level(logging.INFO, logger="monitor.observations"):
        Observations(cfg).apply(ScrapeResult("d", target, 0, 1.0, error="connection failed to http://user:s3cret@10.0.0.1:1/metrics"))
    (line,) = [r.getMessage() for r in caplog.records]
    assert "s3cret" not in line and "***@" in line
