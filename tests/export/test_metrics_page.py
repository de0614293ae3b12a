"""/metrics is rendered at most once per scrape cycle (and format), off the event loop, and served as bytes
(gzip when asked): however many requests come, /healthz and the scrapes do not wait behind renders."""

from __future__ import annotations

import asyncio
import gzip
import time

import aiohttp
import pytest
from prometheus_client.exposition import generate_latest

from bench.expositions import fixture_text
from monitor.config import parse_config
from monitor.export import prometheus
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.sidecar import Sidecar
from tests.export.test_http_server import _exchange, _get

T0 = 1_800_000_000.0


def _deployments(n: int, url: str = "http://127.0.0.1:1/metrics") -> list[dict]:
    return [{"name": f"dep-{i:04d}", "tpot_target_seconds": 0.05, "ttft_target_seconds": 2.0,
             "targets": [{"role": "server", "url": url}]} for i in range(n)]


def _fed(n: int, cycles: int = 2) -> tuple[Sidecar, list[float]]:
    """A sidecar of `n` deployments whose windows hold `cycles` snapshots of the real SGLang exposition."""
    clock = [T0]
    sc = Sidecar(parse_config({"deployments": _deployments(n)}), clock=lambda: clock[0])
    expo = parse(fixture_text().encode(), engine_wanted(), count_families=False)  # the real SGLang exposition
    for step in range(cycles):
        clock[0] += 5.0
        scaled = expo._replace(selected=[s._replace(value=s.value * (1 + step * 0.01)) for s in expo.selected])
        for engine in sc.observations.engines.values():
            engine.observe(engine.deployment.targets[0], scaled, clock[0])
            engine.snapshot(clock[0])
    return sc, clock


def _count_renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the SLO families were built (once per render, whichever path renders)."""
    calls = [0]
    real = prometheus.families_from_status

    def counted(status):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return real(status)
    monkeypatch.setattr(prometheus, "families_from_status", counted)
    return calls


async def _timed_get(session: aiohttp.ClientSession, url: str) -> float:
    """Seconds to the whole answer (a 503 from /healthz counts as answered: only the wait is measured)."""
    began = time.perf_counter()
    async with session.get(url) as r:
        await r.read()
        assert r.status in (200, 503)
    return time.perf_counter() - began


def test_healthz_answers_while_30_concurrent_metrics_requests_run_against_200_deployments():
    """It waited behind every render on the event loop (30 renders in a row); now behind one slice of one
    render at most. The bound is relative to one render measured here, so a loaded machine moves both."""
    sc, _ = _fed(200)
    began = time.perf_counter()
    generate_latest(sc.registry)  # one render, as /metrics did on the event loop for each request
    one_render = time.perf_counter() - began

    async def client(base: str) -> tuple[list[float], list[float]]:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
            pages = [asyncio.create_task(_timed_get(s, base + "/metrics")) for _ in range(30)]
            await asyncio.sleep(0.05)  # the requests are in: renders (or the one render) under way
            probes = []
            while not all(p.done() for p in pages):
                probes.append(await _timed_get(s, base + "/healthz"))
                await asyncio.sleep(0.02)
            return probes, await asyncio.gather(*pages)

    async def go() -> tuple[list[float], list[float]]:
        port = await sc.start_http("127.0.0.1", 0)
        try:
            # The client on its own loop (a thread): the server's loop being blocked must not stop its clock.
            return await asyncio.to_thread(asyncio.run, client(f"http://127.0.0.1:{port}"))
        finally:
            await sc.close()

    probes, pages = asyncio.run(go())
    assert probes and max(probes) < max(0.25, 2 * one_render), (max(probes), one_render, len(probes))
    assert sc.metrics_page.renders == 1


def test_one_render_per_scrape_cycle_and_format_however_many_requests(monkeypatch):
    renders = _count_renders(monkeypatch)
    sc = Sidecar(parse_config({"sidecar": {"scrape_interval_seconds": 3600, "scrape_timeout_seconds": 1},
                               "deployments": _deployments(3)}))
    openmetrics = "application/openmetrics-text; version=1.0.0"

    async def go() -> list[int]:
        port = await sc.start_http("127.0.0.1", 0)
        url = f"http://127.0.0.1:{port}/metrics"
        seen = []
        try:
            async with aiohttp.ClientSession() as s:
                async def burst(accept: str = "") -> None:
                    await asyncio.gather(*(_timed_get_with(s, url, accept) for _ in range(20)))
                    seen.append(renders[0])
                await burst()
                await burst()
                await sc.scraper.cycle(s)  # a scrape cycle (its targets refuse): the next request renders
                await burst()
                await burst(openmetrics)  # another format: its own page, once
                await burst(openmetrics)
                await burst()
        finally:
            await sc.close()
        return seen

    assert asyncio.run(go()) == [1, 1, 2, 3, 3, 3]


async def _timed_get_with(session: aiohttp.ClientSession, url: str, accept: str) -> bytes:
    async with session.get(url, headers={"Accept": accept} if accept else {}) as r:
        assert r.status == 200
        return await r.read()


def test_gzip_is_served_when_asked_and_decompresses_to_the_same_page_and_formats_still_negotiate():
    sc, _ = _fed(5)

    async def go() -> dict[str, bytes]:
        port = await sc.start_http("127.0.0.1", 0)
        try:
            return {
                "plain": await _exchange(port, _get("/metrics")),
                "gzip": await _exchange(port, _get("/metrics", b"Accept-Encoding: deflate, gzip;q=0.8")),
                "refused": await _exchange(port, _get("/metrics", b"Accept-Encoding: gzip;q=0")),
                "om": await _exchange(port, _get("/metrics", b"Accept: application/openmetrics-text; version=1.0.0",
                                                 b"Accept-Encoding: gzip")),
            }
        finally:
            await sc.close()

    answers = asyncio.run(go())

    def split(answer: bytes) -> tuple[str, bytes]:
        head, _, body = answer.partition(b"\r\n\r\n")
        return head.decode().lower(), body

    plain_head, plain = split(answers["plain"])
    gz_head, gz = split(answers["gzip"])
    assert "content-encoding" not in plain_head and "text/plain; version=0.0.4" in plain_head
    assert "content-encoding: gzip" in gz_head and "vary: accept, accept-encoding" in gz_head
    assert gzip.decompress(gz) == plain and len(gz) < len(plain) / 5
    assert "content-encoding" not in split(answers["refused"])[0]
    om_head, om = split(answers["om"])
    assert "content-type: application/openmetrics-text; version=1.0.0" in om_head
    assert gzip.decompress(om).endswith(b"# EOF\n") and b"# EOF" not in plain


def test_after_a_reload_the_page_is_kept_no_longer_than_the_new_scrape_interval(monkeypatch):
    """A page is fresh for one scrape interval of the config running at the time of the request: a
    reload from 60 s to 2 s must not leave pages served for 60 s (an earlier attempt kept the old one)."""
    renders = _count_renders(monkeypatch)
    clock = [T0]
    config = {"sidecar": {"scrape_interval_seconds": 60, "scrape_timeout_seconds": 1},
              "deployments": _deployments(2)}
    sc = Sidecar(parse_config(config), clock=lambda: clock[0],
                 loader=lambda: parse_config(config))

    async def at(t: float) -> int:
        clock[0] = T0 + t
        await sc.metrics_page.get("")
        return renders[0]

    async def go() -> list[int]:
        try:
            seen = [await at(0), await at(30)]  # fresh for 60 s
            config["sidecar"] = {"scrape_interval_seconds": 2, "scrape_timeout_seconds": 1}
            assert sc.reload() is None
            seen += [await at(30.5), await at(31.5), await at(33)]  # a reload re-renders; then 2 s
            seen += [await at(34)]
            clock[0] = T0 + 20  # a clock stepped back: the page is stale, not fresh for longer
            seen += [await at(20)]
            return seen
        finally:
            await sc.close()

    assert asyncio.run(go()) == [1, 1, 2, 2, 3, 3, 4]


def test_a_page_is_never_older_than_one_scrape_interval_even_without_cycles(monkeypatch):
    """A stuck scraper completes no cycle: the page is still re-rendered every interval, so its loop-age
    series keep growing where Prometheus can alert on them."""
    renders = _count_renders(monkeypatch)
    clock = [T0]
    sc = Sidecar(parse_config({"sidecar": {"scrape_interval_seconds": 5, "scrape_timeout_seconds": 1},
                               "deployments": _deployments(1)}), clock=lambda: clock[0])

    async def go() -> list[int]:
        seen = []
        for t in (0, 4.9, 5.0, 9.9, 10.1):
            clock[0] = T0 + t
            await sc.metrics_page.get("")
            seen.append(renders[0])
        await sc.close()
        return seen

    assert asyncio.run(go()) == [1, 1, 2, 2, 3]
