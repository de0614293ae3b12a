"""A scrape cycle over real and broken targets: status per target, one never delays another."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

from monitor.config import parse_config
from monitor.observations import Observations
from monitor.scrape.loop import Scraper
from tests.conftest import REAL_TEXT, ROUTER_500, ROUTER_METRICS, free_port, serve_routes


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
