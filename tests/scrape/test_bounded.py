"""Bounded work per scrape: sample and series limits, gzip only where asked, big bodies parsed off the loop."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp import web

from monitor.config import parse_config
from monitor.fetch import is_loopback
from monitor.observations import Observations
from monitor.scrape.loop import Scraper
from monitor.sidecar import Sidecar
from tests.conftest import serve_routes
from tests.slo.helpers import exposition


def scrape_sequence(texts: list[str], **target) -> Scraper:
    """One target (with `target` settings) serving `texts` in turn, one cycle each (15 s apart)."""
    state = {"n": 0}

    async def handler(request):
        return web.Response(text=texts[state["n"]])

    async def go():
        runner, u = await serve_routes({"/metrics": handler})
        cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
            {"role": "server", "url": f"{u}/metrics", **target}]}]})
        clock = {"t": 1000.0}
        scraper = Scraper(cfg, Observations(cfg), clock=lambda: clock["t"])
        try:
            async with aiohttp.ClientSession() as s:
                for n in range(len(texts)):
                    state["n"], clock["t"] = n, 1000.0 + 15 * n
                    await scraper.cycle(s)
        finally:
            scraper.close()
            await runner.cleanup()
        return scraper

    return asyncio.run(go())


def with_ranks(tpot: list[float], ranks: int) -> str:
    return exposition(tpot=tpot, running=1, dp_ranks=ranks)


@pytest.mark.parametrize("limit, small, big, reason", [
    ({"sample_limit": 100}, 1, 100, "sample limit exceeded: more than 100 samples (sample_limit 100)"),
    ({"series_limit": 80}, 1, 100, "series limit exceeded: more than 80 series"),
])
def test_over_a_limit_the_scrape_fails_with_the_reason_and_the_target_keeps_its_previous_state(limit, small, big, reason):
    texts = [with_ranks([0.03] * 10, small), with_ranks([0.03] * 20, small),
             with_ranks([0.03] * 20 + [0.5] * 50, big),  # over the limit: its 50 slow requests are not taken
             with_ranks([0.03] * 20 + [0.5] * 50, small)]  # back under: its new requests count from the last good state
    scraper = scrape_sequence(texts[:3], **limit)
    (status,) = scraper.sink.statuses.values()
    assert not status.up and reason in (status.last_error or ""), status.last_error
    w = scraper.sink.engines["d"].state(1030.0).slis["tpot"].windows["5m"]
    assert w.events == 10 and w.good_ratio == 1.0
    scraper = scrape_sequence(texts, **limit)
    (status,) = scraper.sink.statuses.values()
    assert status.up and status.errors == 1
    assert scraper.sink.engines["d"].state(1045.0).slis["tpot"].windows["5m"].events == 60


def test_gzip_is_asked_for_only_where_configured_or_off_loopback():
    seen = []

    async def handler(request):
        seen.append(request.headers.get("Accept-Encoding"))
        return web.Response(text=exposition(tpot=[0.03]))

    async def go():
        runner, u = await serve_routes({"/metrics": handler})
        cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
            {"role": "server", "url": f"{u}/metrics"},
            {"role": "server", "url": f"{u}/metrics", "name": "gz", "enable_compression": True}]}]})
        scraper = Scraper(cfg, Observations(cfg))
        try:
            async with aiohttp.ClientSession() as s:
                await scraper.cycle(s)
        finally:
            await runner.cleanup()

    asyncio.run(go())
    assert sorted(seen) == ["gzip", "identity"]
    assert is_loopback("http://127.0.0.1:30000/metrics") and is_loopback("http://[::1]:1/m")
    assert is_loopback("http://localhost:1/m") and not is_loopback("http://10.0.0.7:30000/metrics")
    assert not is_loopback("http://sglang-0.sglang:30000/metrics")


def big_ungrouped_exposition(megabytes: float) -> bytes:
    """An exporter without HELP/TYPE lines: nothing to skip, every line goes through the full scan."""
    line = 'vllm_like_metric{model_name="meta-llama/Llama-3.1-8B-Instruct",engine_type="unified",idx="%d"} 1.0\n'
    n = int(megabytes * 1e6 / len(line % 100000))
    return (exposition(tpot=[0.03] * 10, running=2) + "".join(line % i for i in range(n))).encode()


def test_healthz_keeps_answering_while_a_50_mb_target_is_parsed():
    body = big_ungrouped_exposition(51)
    assert len(body) > 50e6

    async def big(request):
        return web.Response(body=body)

    async def go():
        runner, u = await serve_routes({"/metrics": big})
        cfg = parse_config({"sidecar": {"scrape_interval_seconds": 30, "scrape_timeout_seconds": 30},
                            "deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
                                {"role": "server", "url": f"{u}/metrics"}]}]})
        sidecar = Sidecar(cfg)
        port = await sidecar.start_http("127.0.0.1", 0)
        latencies = []
        try:
            async with aiohttp.ClientSession() as s:
                scrape = asyncio.create_task(sidecar.scraper.cycle(s))
                while not scrape.done():
                    t0 = time.perf_counter()
                    async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                        assert r.status == 200
                    latencies.append(time.perf_counter() - t0)
                    await asyncio.sleep(0.02)
                await scrape
        finally:
            await sidecar.close()
            await runner.cleanup()
        return sidecar, latencies

    sidecar, latencies = asyncio.run(go())
    (status,) = sidecar.observations.statuses.values()
    assert status.up and status.samples > 400_000, status.last_error
    assert sidecar.scraper.parser.offloaded == 1  # parsed in a worker process, not on the event loop
    assert len(latencies) >= 5 and max(latencies) < 1.0, latencies  # a generous bound for a noisy machine
