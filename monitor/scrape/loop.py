"""The scrape cycle: every target concurrently, each bounded by its own timeout.

Each result goes to the sink as it arrives, so a slow or dead target costs the others nothing; a
deployment's cycle is closed once all its targets have answered or timed out (the timeout never
exceeds the interval, so cycles never pile up). The loop does I/O and parsing only: the state the
results feed belongs to the sink (`monitor.observations`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp

from monitor.config import Config, Deployment, Target
from monitor.fetch import fetch
from monitor.parse.exposition import ParseError, parse
from monitor.parse.families import engine_wanted
from monitor.parse.gateway import ROUTER_WANTED
from monitor.scrape.result import ScrapeResult
from monitor.scrape.shard import shard_of
from monitor.telemetry.collect import DetailCache, collect

log = logging.getLogger(__name__)

TELEMETRY_SOURCES = frozenset({"npu-smi", "npu-exporter", "dcgm", "nvml"})


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    """Wait up to `seconds` (none when not positive), returning at once when `stop` is set."""
    if seconds > 0:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)


def explain_http_error(target: Target, error: str) -> str:
    if target.source == "router-engine-metrics" and "Label names should agree" in error:
        return (error + " — the router's /engine_metrics merges workers and fails when their label sets "
                "differ (e.g. only decode has dp_rank, smg-project/smg#805); scrape the workers directly")
    if error.startswith("HTTP 404") and target.source == "sglang":
        return error + " — is the server launched with --enable-metrics?"
    return error


class ResultSink(Protocol):
    """Where results go (`monitor.observations.Observations`): each as it arrives, then a deployment's
    cycle is closed once all its targets have answered or timed out."""

    def apply(self, result: ScrapeResult) -> None: ...

    def snapshot(self, deployment: str, ts: float) -> None: ...


class Scraper:
    """Scrapes every target on its schedule and hands each result to the sink; holds no SLO state."""

    def __init__(self, config: Config, sink: ResultSink, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.sink = sink
        self.clock = clock
        self.npu_details: dict[tuple[str, str], DetailCache] = {}  # collection memo per npu-smi target
        self.wanted = engine_wanted()
        self.cycles = 0
        self.last_cycle_seconds = 0.0
        self.deployment_cycle_seconds: dict[str, float] = {}
        self._sem = asyncio.Semaphore(config.sidecar.max_concurrent_scrapes)

    def _timeout(self, target: Target) -> float:
        return min(target.timeout_seconds or self.config.sidecar.scrape_timeout_seconds,
                   self.config.sidecar.scrape_interval_seconds)

    async def scrape(self, session: aiohttp.ClientSession, dep: Deployment, target: Target) -> ScrapeResult | None:
        """One target once: None for what is not scraped (a placeholder address, a request log)."""
        if target.has_placeholder or target.source == "request-log":
            return None  # request logs are tailed by monitor.requestlog
        async with self._sem:
            ts = self.clock()
            if target.source in TELEMETRY_SOURCES:
                details = (self.npu_details.setdefault((dep.name, target.id), DetailCache())
                           if target.npu_smi_details else None)
                telemetry = await collect(target, timeout=self._timeout(target), session=session, details=details)
                return ScrapeResult(dep.name, target, ts, telemetry.duration_seconds, telemetry=telemetry)
            res = await fetch(session, target.url or "", timeout=self._timeout(target),
                              max_bytes=self.config.sidecar.max_response_bytes,
                              bearer_token=target.bearer_token, follow_redirects=target.follow_redirects)
        if not res.ok:
            return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes,
                                error=explain_http_error(target, res.error or "failed"))
        wanted = ROUTER_WANTED if target.source == "router" else self.wanted
        try:
            expo = parse(res.text or "", wanted, content_type=res.content_type,
                         count_families=target.source == "router")
        except ParseError as err:
            # Rejected whole, like Prometheus does: the windows keep their last good state.
            return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes,
                                error=f"malformed exposition: {err}")
        if expo.samples == 0:  # nothing to compute from: a failure, not `up` with zero samples
            return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes,
                                error="empty exposition (HTTP 200 with no samples)")
        return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes, exposition=expo)

    async def _scrape_into_sink(self, session: aiohttp.ClientSession, dep: Deployment, target: Target) -> None:
        result = await self.scrape(session, dep, target)
        if result is not None:
            self.sink.apply(result)

    async def _scrape_all(self, session: aiohttp.ClientSession, deps: list[Deployment]) -> None:
        jobs = [self._scrape_into_sink(session, dep, t) for dep in deps for t in dep.targets]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for r in results:
            if isinstance(r, Exception):  # a bug must not stop the loop; say where it was
                log.error("scrape task failed: %r", r, exc_info=r)

    async def cycle(self, session: aiohttp.ClientSession) -> float:
        """Scrape every target once, then close every deployment's cycle (tests, `--once`, no stagger)."""
        started = time.perf_counter()
        await self._scrape_all(session, self.config.deployments)
        now = self.clock()
        for dep in self.config.deployments:
            self.sink.snapshot(dep.name, now)
        self.cycles += 1
        self.last_cycle_seconds = time.perf_counter() - started
        return now

    def offset(self, dep: Deployment) -> float:
        """Stable phase of a deployment within the interval (Prometheus offsets targets the same
        way): with many deployments, scrapes and their CPU spread over the interval instead of
        queueing at its start."""
        interval = self.config.sidecar.scrape_interval_seconds
        return shard_of(dep.name, 10_000) / 10_000 * interval

    async def _deployment_loop(self, session: aiohttp.ClientSession, dep: Deployment, stop: asyncio.Event) -> None:
        interval = self.config.sidecar.scrape_interval_seconds
        await _sleep(stop, self.offset(dep))
        while not stop.is_set():
            begun = time.monotonic()
            await self._scrape_all(session, [dep])
            self.sink.snapshot(dep.name, self.clock())
            took = time.monotonic() - begun
            self.deployment_cycle_seconds[dep.name] = took
            await _sleep(stop, interval - took)

    async def run(self, stop: asyncio.Event, on_cycle: Callable[[float], Any] | None = None) -> None:
        interval = self.config.sidecar.scrape_interval_seconds
        connector = aiohttp.TCPConnector(limit=self.config.sidecar.max_concurrent_scrapes)
        async with aiohttp.ClientSession(connector=connector) as session:
            if not self.config.sidecar.stagger_scrapes:
                while not stop.is_set():
                    begun = time.monotonic()
                    now = await self.cycle(session)
                    if on_cycle is not None:
                        on_cycle(now)
                    await _sleep(stop, interval - (time.monotonic() - begun))
                return
            loops = [asyncio.create_task(self._deployment_loop(session, d, stop)) for d in self.config.deployments]
            try:
                while not stop.is_set():
                    await _sleep(stop, interval)
                    if stop.is_set():
                        break
                    # One "cycle" = one interval in which every deployment was scraped once.
                    self.cycles += 1
                    self.last_cycle_seconds = max(self.deployment_cycle_seconds.values(), default=0.0)
                    if on_cycle is not None:
                        on_cycle(self.clock())
            finally:
                for task in loops:
                    task.cancel()
                await asyncio.gather(*loops, return_exceptions=True)
