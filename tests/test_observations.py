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
        obs.apply(ok(SERVER, 70, exposition(tpot=[0.03])))  # a minute apart: not flapping
        obs.apply(ok(SERVER, 75, exposition(tpot=[0.03])))
        obs.apply(ScrapeResult("d", SERVER, 140, 3.0, error="HTTP 503"))
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


def test_a_flapping_target_is_said_at_once_then_summarised_once_a_minute_and_its_status_stays_exact(caplog):
    obs = Observations(CFG)
    with caplog.at_level(logging.INFO, logger="monitor.observations"):
        obs.apply(ok(SERVER, 0, exposition(tpot=[0.03])))
        for i in range(1, 121):  # 10 minutes of 5 s scrapes, every other one failing: 120 changes
            if i % 2:
                obs.apply(ScrapeResult("d", SERVER, 5 * i, 3.0, error=f"HTTP 503 #{i}"))
            else:
                obs.apply(ok(SERVER, 5 * i, exposition(tpot=[0.03])))
        assert obs.statuses[("d", SERVER.id)].up  # the last scrape (i = 120) succeeded
        obs.apply(ScrapeResult("d", SERVER, 605, 3.0, error="HTTP 503 last"))
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    name = f"d {SERVER.id}"
    assert said[:2] == [(logging.WARNING, f"{name}: down: HTTP 503 #1"), (logging.INFO, f"{name}: up again")]
    summaries = said[2:]
    assert len(summaries) == 10, said  # one per minute, not one per change
    assert summaries[0] == (logging.WARNING, f"{name}: flapped 13 times in the last 60 s, now down: HTTP 503 #13")
    assert summaries[-1] == (logging.WARNING, f"{name}: flapped 12 times in the last 60 s, now down: HTTP 503 last")
    assert sum(int(m.split("flapped ")[1].split()[0]) for _, m in summaries) == 121  # every change counted
    status = obs.statuses[("d", SERVER.id)]
    assert (status.up, status.last_error, status.scrapes, status.errors) == (False, "HTTP 503 last", 122, 61)


def test_a_target_that_stops_flapping_is_said_at_once_again_after_a_quiet_minute(caplog):
    obs = Observations(CFG)
    with caplog.at_level(logging.INFO, logger="monitor.observations"):
        obs.apply(ScrapeResult("d", SERVER, 0, 3.0, error="refused"))
        obs.apply(ok(SERVER, 5, exposition(tpot=[0.03])))  # its recovery: said too
        obs.apply(ScrapeResult("d", SERVER, 10, 3.0, error="HTTP 503"))  # counted
        obs.apply(ScrapeResult("d", SERVER, 60, 3.0, error="HTTP 503"))  # the minute is over: one summary
        obs.apply(ok(SERVER, 120, exposition(tpot=[0.03])))  # closes a quiet minute and is said at once
    said = [r.getMessage() for r in caplog.records]
    name = f"d {SERVER.id}"
    assert said == [f"{name}: down: refused", f"{name}: up again",
                    f"{name}: flapped 3 times in the last 60 s, now down: HTTP 503", f"{name}: up again"], said


def test_forty_flapping_targets_with_a_warning_write_a_few_lines_each_not_one_per_change(caplog):
    """Issue 24 item 12: 40 targets flapping for 10 minutes wrote a line per change (16.6k lines)."""
    servers = [{"role": "server", "url": f"http://s{i}:1/metrics"} for i in range(40)]
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": servers}]})
    targets = cfg.deployments[0].targets
    no_sum = "".join(line + "\n" for line in exposition(tpot=[0.03]).splitlines() if "_sum" not in line)
    obs = Observations(cfg)
    with caplog.at_level(logging.INFO, logger="monitor.observations"):
        for i in range(120):  # 10 minutes of 5 s scrapes, every other one failing
            for t in targets:
                if i % 2:
                    obs.apply(ScrapeResult("d", t, 5 * i, 3.0, error="HTTP 503"))
                else:
                    obs.apply(ok(t, 5 * i, no_sum))
    said = [r.getMessage() for r in caplog.records]
    per_target = {t.id: [m for m in said if m.startswith(f"d {t.id}: ")] for t in targets}
    for lines in per_target.values():
        # its warning once, down and up once, then one summary a minute
        assert len([m for m in lines if "_sum" in m]) == 1, lines
        assert len(lines) <= 1 + 2 + 10, lines
    assert len(said) <= 40 * 13
    assert all(obs.statuses[("d", t.id)].up is False for t in targets)  # the last scrape failed: exact


def test_changes_only_counted_when_the_sidecar_stops_are_said_then(caplog):
    obs = Observations(CFG)
    with caplog.at_level(logging.INFO, logger="monitor.observations"):
        for i, error in enumerate(["refused", None, "HTTP 503", None, "HTTP 503"]):
            obs.apply(ScrapeResult("d", SERVER, 5 * i, 3.0, error=error) if error else ok(SERVER, 5 * i, exposition()))
        obs.say_pending_flaps(22.0)
    said = [r.getMessage() for r in caplog.records]
    assert said[-1] == f"d {SERVER.id}: flapped 5 times in the last 22 s, now down: HTTP 503", said
