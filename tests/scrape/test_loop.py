"""A scrape cycle over real and broken targets: status per target, one never delays another."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
import pytest
from aiohttp import web

from monitor.config import parse_config
from monitor.observations import Observations
from monitor.scrape.loop import Scraper
from tests.conftest import GATEWAY_FIXTURES, REAL_TEXT, ROUTER_500, ROUTER_METRICS, free_port, serve_routes
from tests.slo.helpers import exposition


def test_cycle_records_status_per_target_and_slow_ones_do_not_delay_fast_ones():
    async def good(request):
        return web.Response(text=REAL_TEXT.read_text())

    async def slow(request):
        await asyncio.sleep(5)
        return web.Response(text="")

    async def garbage(request):
        return web.Response(text="this is not an exposition\n")

    async def router(request):
        return web.Response(text=ROUTER_METRICS.read_text())

    async def engine500(request):
        return web.Response(status=500, text=ROUTER_500.read_text())

    async def go():
        runner, u = await serve_routes({"/good": good, "/slow": slow, "/garbage": garbage, "/router": router,
                                        "/engine": engine500})
        cfg = parse_config({
            "sidecar": {"scrape_interval_seconds": 2, "scrape_timeout_seconds": 1},
            "deployments": [{
                "name": "d", "tpot_target_seconds": 0.04,
                "targets": [
                    {"role": "server", "url": f"{u}/good"},
                    {"role": "decode", "url": f"{u}/slow"},
                    {"role": "decode", "url": f"{u}/garbage"},
                    {"role": "prefill", "url": f"http://127.0.0.1:{free_port()}/metrics"},
                    {"role": "router", "url": f"{u}/router"},
                    {"role": "decode", "source": "router-engine-metrics", "url": f"{u}/engine"},
                    {"role": "decode", "url": "http://<your decode ip>:8001/metrics"},
                ],
            }],
        })
        scraper = Scraper(cfg, Observations(cfg))
        try:
            async with aiohttp.ClientSession() as s:
                t0 = time.perf_counter()
                await scraper.cycle(s)
                took = time.perf_counter() - t0
        finally:
            await runner.cleanup()
        return scraper, took

    scraper, took = asyncio.run(go())
    st = {k[1].split("@")[1].rsplit("/", 1)[-1]: v for k, v in scraper.sink.statuses.items() if not v.placeholder}
    assert st["good"].up and st["good"].samples == 545
    assert not st["slow"].up and "timed out" in st["slow"].last_error
    assert not st["garbage"].up and "malformed exposition" in st["garbage"].last_error
    assert not st["metrics"].up and "connection failed" in st["metrics"].last_error
    assert st["router"].up and st["router"].detail["workers"] >= 1
    assert not st["engine"].up and "smg-project/smg#805" in st["engine"].last_error
    placeholder = [v for v in scraper.sink.statuses.values() if v.placeholder]
    assert placeholder and placeholder[0].scrapes == 0 and "placeholder" in placeholder[0].last_error
    assert took < 3  # bounded by the 1 s timeout, not the 5 s slow target


def test_staggered_run_scrapes_each_deployment_once_per_interval_at_its_own_phase():
    hits: dict[str, list[float]] = {}

    def handler_for(name):
        async def handler(request):
            hits.setdefault(name, []).append(time.monotonic())
            return web.Response(text=REAL_TEXT.read_text())
        return handler

    names = [f"dep-{i}" for i in range(6)]

    async def go():
        runner, u = await serve_routes({f"/{n}": handler_for(n) for n in names})
        cfg = parse_config({
            "sidecar": {"scrape_interval_seconds": 1, "scrape_timeout_seconds": 1},
            "deployments": [{"name": n, "tpot_target_seconds": 0.04,
                             "targets": [{"role": "server", "url": f"{u}/{n}"}]} for n in names],
        })
        scraper = Scraper(cfg, Observations(cfg))
        stop = asyncio.Event()
        cycles = []
        task = asyncio.create_task(scraper.run(stop, on_cycle=cycles.append))
        await asyncio.sleep(3.5)
        stop.set()
        await task
        await runner.cleanup()
        return scraper, cycles

    scraper, cycles = asyncio.run(go())
    offsets = sorted(scraper.offset(d) for d in scraper.config.deployments)
    assert all(0 <= o < 1 for o in offsets) and len(set(offsets)) == len(offsets)
    assert len(cycles) == 3 and scraper.cycles == 3
    for n in names:
        assert 2 <= len(hits[n]) <= 4, (n, hits[n])
        gaps = [b - a for a, b in zip(hits[n], hits[n][1:])]
        assert all(0.8 < g < 1.5 for g in gaps), gaps
        assert len(scraper.sink.engines[n].store) >= 2


TPOT = "sglang:request_time_per_output_token_seconds"
TPOT_SERIES = '{engine_type="unified",is_streaming="true",model_name="m"}'


def _scrape_sequence(texts: list[str]):
    """One target serving `texts` in turn, one cycle each (15 s apart); returns the scraper."""
    state = {"n": 0}

    async def handler(request):
        return web.Response(text=texts[min(state["n"], len(texts) - 1)])

    async def go():
        runner, u = await serve_routes({"/metrics": handler})
        cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04,
                                             "targets": [{"role": "server", "url": f"{u}/metrics"}]}]})
        clock = {"t": 1000.0}
        scraper = Scraper(cfg, Observations(cfg), clock=lambda: clock["t"])
        try:
            async with aiohttp.ClientSession() as s:
                for n in range(len(texts)):
                    state["n"] = n
                    clock["t"] = 1000.0 + 15 * n
                    await scraper.cycle(s)
        finally:
            await runner.cleanup()
        return scraper

    return asyncio.run(go())


def _bad(kind: str) -> str:
    good = exposition(tpot=[0.03] * 20)
    if kind == "nan-edge":
        return good.replace(f'{TPOT}_bucket{{{TPOT_SERIES[1:-1]},le="0.04"}}',
                            f'{TPOT}_bucket{{{TPOT_SERIES[1:-1]},le="NaN"}}')
    if kind == "inf-bucket":
        return good.replace(f'{TPOT}_bucket{{{TPOT_SERIES[1:-1]},le="+Inf"}} 20.0',
                            f'{TPOT}_bucket{{{TPOT_SERIES[1:-1]},le="+Inf"}} +Inf')
    if kind == "inf-count":
        return good.replace(f"{TPOT}_count{TPOT_SERIES} 20.0", f"{TPOT}_count{TPOT_SERIES} +Inf")
    assert kind == "empty"
    return ""


@pytest.mark.parametrize("kind, reason", [
    ("nan-edge", 'le="NaN" is not a bucket edge'),
    ("inf-bucket", "bucket count +Inf is not a finite"),
    ("inf-count", "_count +Inf is not a finite"),
    ("empty", "empty exposition"),
])
def test_a_rejected_scrape_fails_the_target_with_the_reason_and_keeps_the_windows(kind, reason):
    bad = _bad(kind)
    assert bad != exposition(tpot=[0.03] * 20)
    scraper = _scrape_sequence([exposition(tpot=[0.03] * 10), exposition(tpot=[0.03] * 20), bad, bad, bad])
    (status,) = scraper.sink.statuses.values()
    assert not status.up and reason in status.last_error, status.last_error
    assert status.errors == 3 and status.resets == 0
    w = scraper.sink.engines["d"].state(1060.0).slis["tpot"].windows["5m"]
    assert w.events == 10 and w.good_ratio == 1.0 and w.burn_rate == 0.0  # the last good state, no phantoms


def test_a_usable_but_inconsistent_histogram_is_scraped_and_flagged():
    text = exposition(tpot=[0.03] * 20).replace(f"{TPOT}_count{TPOT_SERIES} 20.0", f"{TPOT}_count{TPOT_SERIES} 25.0")
    no_sum = "\n".join(line for line in text.splitlines() if not line.startswith(f"{TPOT}_sum")) + "\n"
    scraper = _scrape_sequence([exposition(tpot=[0.03] * 10), no_sum])
    (status,) = scraper.sink.statuses.values()
    assert status.up and status.last_error is None
    assert any("_count 25 disagrees with the +Inf bucket 20" in w for w in status.warnings)
    assert any("no _sum: no mean reported" in w for w in status.warnings)
    w = scraper.sink.engines["d"].state(1015.0).slis["tpot"].windows["5m"]
    assert w.events == 10 and w.mean is None
    # The next clean scrape clears the flags.
    scraper = _scrape_sequence([no_sum, exposition(tpot=[0.03] * 30)])
    assert next(iter(scraper.sink.statuses.values())).warnings == []


def test_a_target_redirecting_elsewhere_is_down_without_the_other_answer_and_follow_redirects_is_per_target():
    async def other(request):
        return web.Response(status=404, text="SECRET of a host nobody configured")

    async def go():
        other_runner, other_base = await serve_routes({"/secret": other})

        async def away(request):
            return web.Response(status=302, headers={"Location": f"{other_base}/secret"})

        async def moved(request):
            return web.Response(status=301, headers={"Location": "/real"})

        async def real(request):
            return web.Response(text=REAL_TEXT.read_text())

        runner, u = await serve_routes({"/away": away, "/moved": moved, "/real": real})
        cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
            {"role": "server", "url": f"{u}/away", "follow_redirects": True},
            {"role": "decode", "url": f"{u}/moved"},
            {"role": "decode", "url": f"{u}/moved", "name": "moved-followed", "follow_redirects": True},
        ]}]})
        scraper = Scraper(cfg, Observations(cfg))
        try:
            async with aiohttp.ClientSession() as s:
                await scraper.cycle(s)
        finally:
            await runner.cleanup()
            await other_runner.cleanup()
        return {k[1].rsplit("/", 1)[-1]: v for k, v in scraper.sink.statuses.items()}

    st = asyncio.run(go())
    assert not st["away"].up and "redirect to another host or port" in st["away"].last_error
    assert "SECRET" not in st["away"].last_error
    assert not st["moved"].up and "not followed" in st["moved"].last_error
    assert st["moved-followed"].up and st["moved-followed"].samples == 545


def test_the_flagged_target_is_logged_once_without_its_credentials(caplog):
    text = exposition(tpot=[0.03] * 20).replace(f"{TPOT}_count{TPOT_SERIES} 20.0", f"{TPOT}_count{TPOT_SERIES} 25.0")

    async def handler(request):
        return web.Response(text=text)

    async def go():
        runner, u = await serve_routes({"/metrics": handler})
        url = u.replace("http://", "http://user:s3cret@") + "/metrics"
        cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04,
                                             "targets": [{"role": "server", "url": url}]}]})
        scraper = Scraper(cfg, Observations(cfg))
        try:
            async with aiohttp.ClientSession() as s:
                for _ in range(3):
                    await scraper.cycle(s)
        finally:
            await runner.cleanup()

    with caplog.at_level("INFO", logger="monitor.observations"):
        asyncio.run(go())
    flagged = [r.getMessage() for r in caplog.records if "disagrees" in r.getMessage()]
    assert len(flagged) == 1 and "s3cret" not in flagged[0] and "***@" in flagged[0]


GATEWAY_LISTENERS = {  # fixture -> (workers, healthy, circuit open) the capture ended with
    "smg_1.13.0_regular_metrics.txt": (2, 1, 0),
    "smg_1.13.0_pd_metrics.txt": (2, 2, 2),
    "sglang_router_0.3.2_regular_metrics.txt": (2, 1, 0),
    "sglang_router_0.3.2_pd_metrics.txt": (2, 2, 2),
}


SMG_PD_ENGINE = GATEWAY_FIXTURES / "smg_1.13.0_pd_engine_metrics.txt"


def run_cycles(routes: dict, targets, cycles: int = 1, sink=Observations):
    """Serve `routes`, scrape one deployment with `targets(base_url)` `cycles` times into `sink(config)`;
    return the scraper."""
    async def go():
        runner, u = await serve_routes(routes)
        cfg = parse_config({"sidecar": {"scrape_interval_seconds": 2, "scrape_timeout_seconds": 2},
                            "deployments": [{"name": "d", "tpot_target_seconds": 0.04, "ttft_target_seconds": 2,
                                             "targets": targets(u)}]})
        scraper = Scraper(cfg, sink(cfg))
        try:
            async with aiohttp.ClientSession() as s:
                for _ in range(cycles):
                    await scraper.cycle(s)
        finally:
            await runner.cleanup()
        return scraper

    return asyncio.run(go())


def scraped_totals(engine) -> tuple[float, float]:
    """(requests, TTFT observations) as scraped: the raw values behind the engine's accumulators (its
    windows count from a series' first sight, so one cycle adds nothing to them)."""
    requests = sum(a.last_raw or 0.0 for k, a in engine.book.scalars.items() if k[1] == "sglang:num_requests_total")
    ttft = sum(a.last_raw.total for k, a in engine.book.hists.items()
               if k[1] == "sglang:time_to_first_token_seconds" and a.last_raw)
    return requests, ttft


def fixture_handler(text: str):
    async def handler(request):
        return web.Response(text=text)
    return handler


def test_router_targets_read_worker_health_from_both_real_gateways():
    routes = {f"/{name}": fixture_handler((GATEWAY_FIXTURES / name).read_text()) for name in GATEWAY_LISTENERS}
    scraper = run_cycles(routes, lambda u: [{"role": "router", "url": f"{u}/{n}"} for n in GATEWAY_LISTENERS])
    for status in scraper.sink.statuses.values():
        workers, healthy, cb_open = GATEWAY_LISTENERS[status.url.rsplit("/", 1)[1]]
        assert status.up and status.samples > 200, status.url
        assert (status.detail["workers"], status.detail["workers_healthy"],
                status.detail["workers_circuit_open"]) == (workers, healthy, cb_open), status.url
        assert status.detail["requests_total"] > 20


def test_smg_engine_metrics_feed_each_worker_with_its_role_so_a_pd_request_counts_once():
    scraper = run_cycles({"/engine_metrics": fixture_handler(SMG_PD_ENGINE.read_text())},
                         lambda u: [{"role": "decode", "source": "router-engine-metrics",
                                     "url": f"{u}/engine_metrics"}])
    (status,) = scraper.sink.statuses.values()
    assert status.up and status.last_error is None
    assert status.detail == {"workers": 2.0, "workers_scraped_directly": 0.0}
    # Each worker serves the real exposition (196 requests, 200 TTFT observations): counted from decode only.
    assert scraped_totals(scraper.sink.engines["d"]) == (196, 200)
    snap = scraper.sink.engines["d"].store.latest()
    load = scraper.sink.engines["d"].state(snap.ts).load
    assert {"prefill", "decode"} <= set(load)  # gauges from both workers, each under its own role


def test_a_worker_also_scraped_directly_is_read_from_its_own_target_only():
    async def direct(request):  # the decode worker's own /metrics
        return web.Response(text=REAL_TEXT.read_text().replace('engine_type="unified"', 'engine_type="decode"'))

    engine_text = SMG_PD_ENGINE.read_text()
    decode_addr = next(line.split('worker_addr="')[1].split('"')[0] for line in engine_text.splitlines()
                       if 'engine_type="decode"' in line and "worker_addr=" in line)

    def targets(u):
        return [{"role": "decode", "url": f"{u}/metrics"},
                {"role": "decode", "source": "router-engine-metrics", "url": f"{u}/engine_metrics"}]

    async def engine(request):  # the gateway's merge, the decode worker named as the direct target names it
        base = f"http://{request.host}"
        return web.Response(text=engine_text.replace(decode_addr, base))

    scraper = run_cycles({"/metrics": direct, "/engine_metrics": engine}, targets)
    merged = next(s for s in scraper.sink.statuses.values() if s.source == "router-engine-metrics")
    assert merged.up and merged.detail == {"workers": 2.0, "workers_scraped_directly": 1.0}
    assert "also scraped directly" in merged.last_error and "counts twice" in merged.last_error
    assert scraped_totals(scraper.sink.engines["d"]) == (196, 200)  # not 392 / 400


def test_an_engine_metrics_target_that_fails_drops_its_workers_load():
    answers = [SMG_PD_ENGINE.read_text(), None]

    async def engine(request):
        text = answers.pop(0)
        return web.Response(text=text) if text is not None else web.Response(status=503, text="down")

    scraper = run_cycles({"/engine_metrics": engine},
                         lambda u: [{"role": "decode", "source": "router-engine-metrics",
                                     "url": f"{u}/engine_metrics"}], cycles=2)
    (status,) = scraper.sink.statuses.values()
    assert not status.up and "HTTP 503" in status.last_error
    eng = scraper.sink.engines["d"]
    assert eng.state(eng.store.latest().ts).load == {}  # no stale gauges from either worker
    assert scraped_totals(eng) == (196, 200)  # the counts seen stay


def test_a_deployment_loop_survives_the_wall_clock_stepping_back_and_says_so_once(caplog):
    offset = {"s": 0.0}

    async def good(request):
        return web.Response(text=exposition(tpot=[0.03] * 10))

    async def go():
        runner, u = await serve_routes({"/metrics": good})
        cfg = parse_config({"sidecar": {"scrape_interval_seconds": 0.2, "scrape_timeout_seconds": 0.2},
                            "deployments": [{"name": "d", "tpot_target_seconds": 0.04,
                                             "targets": [{"role": "server", "url": f"{u}/metrics"}]}]})
        obs = Observations(cfg)
        scraper = Scraper(cfg, obs, clock=lambda: time.time() + offset["s"])
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        await asyncio.sleep(1.2)
        before = len(obs.engines["d"].store)
        offset["s"] = -3600.0  # NTP steps the clock back an hour
        await asyncio.sleep(1.5)
        stop.set()
        await asyncio.wait_for(task, 10)
        await runner.cleanup()
        return obs, scraper, before

    with caplog.at_level(logging.INFO):
        obs, scraper, before = asyncio.run(go())
    store = obs.engines["d"].store
    assert len(store) >= before + 3  # the loop went on after the step
    assert abs(store.latest().ts - (time.time() - 3600.0)) < 5  # in the new time line
    stamps = [s.ts for s in store.snapshots()]
    assert stamps == sorted(stamps)
    steps = [r for r in caplog.records if "clock" in r.getMessage()]
    assert len(steps) == 1 and steps[0].levelno == logging.WARNING, [r.getMessage() for r in steps]
    assert "d" in steps[0].getMessage() and "back" in steps[0].getMessage()
    assert scraper.loops["d"].restarts == 0


class _Failing(Observations):
    """Observations whose snapshot of some deployments raises: `always` every time, `once` the first time."""

    def __init__(self, cfg, always=(), once=()):
        super().__init__(cfg)
        self.always, self.once = set(always), set(once)

    def snapshot(self, deployment, ts, elapsed=None):
        if deployment in self.always:
            raise RuntimeError(f"bug closing {deployment}")
        if deployment in self.once:
            self.once.discard(deployment)
            raise KeyError("transient")
        super().snapshot(deployment, ts)


def test_an_unexpected_error_is_logged_counted_and_the_loop_restarted_with_a_bounded_backoff(caplog):
    async def good(request):
        return web.Response(text=exposition(tpot=[0.03] * 10))

    async def go():
        runner, u = await serve_routes({"/metrics": good})
        cfg = parse_config({"sidecar": {"scrape_interval_seconds": 0.1, "scrape_timeout_seconds": 0.1},
                            "deployments": [{"name": n, "tpot_target_seconds": 0.04,
                                             "targets": [{"role": "server", "url": f"{u}/metrics"}]}
                                            for n in ("broken", "flaky", "fine")]})
        sink = _Failing(cfg, always={"broken"}, once={"flaky"})
        scraper = Scraper(cfg, sink)
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        await asyncio.sleep(3.0)
        stop.set()
        await asyncio.wait_for(task, 10)
        await runner.cleanup()
        return sink, scraper

    with caplog.at_level(logging.INFO):
        sink, scraper = asyncio.run(go())
    broken, flaky, fine = (scraper.loops[n] for n in ("broken", "flaky", "fine"))
    # A persistent bug restarts the loop with a growing pause, not thirty times a second.
    assert 2 <= broken.restarts <= 8, broken.restarts
    assert broken.last_cycle_ts is None and "bug closing broken" in broken.last_error
    assert flaky.restarts == 1 and flaky.last_cycle_ts is not None and len(sink.engines["flaky"].store) >= 5
    assert fine.restarts == 0 and len(sink.engines["fine"].store) >= 10  # the others never noticed
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and "broken" in r.getMessage()]
    assert errors and errors[0].exc_info is not None  # the traceback, once
    assert sum(1 for r in errors if r.exc_info) == 1  # the same error again is one line each
    assert any("flaky" in r.getMessage() and "restart" in r.getMessage() for r in caplog.records)


class _BadApply(Observations):
    """Observations with a bug in applying one target's successful scrape."""

    def apply(self, result):
        if result.error is None and result.target.url.endswith("/bad"):
            raise ZeroDivisionError("division by zero")
        super().apply(result)


def test_a_bug_applying_one_target_fails_that_scrape_with_the_reason_and_the_cycle_goes_on(caplog):
    good = fixture_handler(exposition(tpot=[0.03] * 10))
    with caplog.at_level(logging.INFO):
        scraper = run_cycles({"/good": good, "/bad": good}, lambda u: [
            {"role": "server", "url": f"{u}/good"}, {"role": "server", "url": f"{u}/bad"}], sink=_BadApply)
    st = {k[1].rsplit("/", 1)[-1]: v for k, v in scraper.sink.statuses.items()}
    assert st["good"].up and len(scraper.sink.engines["d"].store) == 1
    assert not st["bad"].up and st["bad"].errors == 1
    assert st["bad"].last_error == "internal error: ZeroDivisionError: division by zero"
    assert any(r.exc_info and "internal error" in r.getMessage() for r in caplog.records)


def test_the_sidecar_cycle_is_restarted_after_an_unexpected_error(caplog):
    async def go():
        cfg = parse_config({"sidecar": {"scrape_interval_seconds": 0.1, "scrape_timeout_seconds": 0.1},
                            "deployments": [{"name": "d", "tpot_target_seconds": 0.04}]})
        scraper = Scraper(cfg, Observations(cfg))
        calls = []

        def on_cycle(now):
            calls.append(now)
            if len(calls) == 2:
                raise OSError("request-log directory vanished")

        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop, on_cycle=on_cycle))
        await asyncio.sleep(1.5)
        stop.set()
        await asyncio.wait_for(task, 10)
        return scraper, calls

    with caplog.at_level(logging.INFO):
        scraper, calls = asyncio.run(go())
    assert scraper.cycle_loop.restarts == 1 and len(calls) >= 5
    assert "request-log directory vanished" in scraper.cycle_loop.last_error


def test_a_persistent_internal_error_is_logged_with_its_traceback_once_then_one_line_per_scrape(caplog):
    """A bug on every scrape logged an ERROR with a 30-line traceback each time (240 lines in 8 s)."""
    good = fixture_handler(exposition(tpot=[0.03] * 10))
    with caplog.at_level(logging.INFO):
        scraper = run_cycles({"/good": good, "/bad": good}, lambda u: [
            {"role": "server", "url": f"{u}/good"}, {"role": "server", "url": f"{u}/bad"}], cycles=4, sink=_BadApply)
    errors = [r for r in caplog.records if r.name == "monitor.scrape.loop" and "internal error" in r.getMessage()]
    assert len(errors) == 4 and [bool(r.exc_info) for r in errors] == [True, False, False, False]
    assert all("ZeroDivisionError: division by zero" in r.getMessage() for r in errors)
    assert "traceback above" in errors[-1].getMessage()
    assert scraper.sink.statuses[("d", scraper.config.deployments[0].targets[1].id)].errors == 4


def test_a_target_with_prometheus_3_quoted_names_is_scraped_not_failed():
    """One `{"name",label="x"} 1` line failed the whole target with `invalid metric name ''`."""
    text = exposition(tpot=[0.03] * 10) + '# TYPE "my.requests" counter\n{"my.requests_total","my.label"="x"} 1\n'
    scraper = run_cycles({"/m": fixture_handler(text)}, lambda u: [{"role": "server", "url": f"{u}/m"}])
    (status,) = scraper.sink.statuses.values()
    assert status.up and status.last_error is None
