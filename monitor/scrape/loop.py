"""The scrape cycle: every target concurrently, each bounded by its own timeout.

Each result goes to the sink as it arrives, so a slow or dead target costs the others nothing; a
deployment's cycle is closed once all its targets have answered or timed out (the timeout never
exceeds the interval, so cycles never pile up). The loop does I/O and parsing only: the state the
results feed belongs to the sink (`monitor.observations`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

import aiohttp

from monitor.config import Config, Deployment, Target
from monitor.conventions.names import LOOP_SCRAPE, LOOP_SIDECAR, TELEMETRY_SOURCES
from monitor.feeds import target_wanted
from monitor.fetch import fetch, is_loopback
from monitor.parse.exposition import LimitExceeded, Limits, ParseError
from monitor.parse.gateway import ROUTER_WANTED
from monitor.scrape.parsing import ParserDied, ParserPool
from monitor.scrape.result import ScrapeResult
from monitor.scrape.shard import shard_of
from monitor.scrape.supervise import LoopHealth, supervise
from monitor.scrape.supervise import sleep as _sleep
from monitor.telemetry.collect import DetailCache, collect

log = logging.getLogger(__name__)


def steady_clock() -> float:
    """CLOCK_BOOTTIME where there is one (Linux): it counts a suspend, as the wall clock does, so a suspended
    machine is no clock step; else the monotonic clock."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)

# The sidecar settings a Scraper is built on: a reload that changes one replaces the scraper (every loop starts
# again); any other reload updates it in place (`Scraper.update`).
SCRAPER_BOUND = ("scrape_interval_seconds", "stagger_scrapes", "max_concurrent_scrapes", "parse_inline_max_bytes",
                 "parse_process_min_bytes", "parse_workers")


def explain_http_error(target: Target, error: str) -> str:
    if target.source == "router-engine-metrics" and "Label names should agree" in error:
        return (error + " — the router's /engine_metrics merges workers and fails when their label sets "
                "differ (e.g. only decode has dp_rank, smg-project/smg#805); scrape the workers directly")
    if error.startswith("HTTP 404") and target.source == "sglang":
        return error + " — is the server launched with --enable-metrics?"
    return error


def read_sets(config: Config) -> dict[tuple[str, str], frozenset[str]]:
    """What each SGLang target of `config` parses, by (deployment, target id)."""
    return {(d.name, t.id): target_wanted(d, t) for d in config.deployments for t in d.targets
            if t.source in ("sglang", "router-engine-metrics")}


class ResultSink(Protocol):
    """Where results go (`monitor.observations.Observations`): each as it arrives, then a deployment's
    cycle is closed once all its targets have answered or timed out."""

    def apply(self, result: ScrapeResult) -> None: ...

    def snapshot(self, deployment: str, ts: float, elapsed: float | None = None) -> None: ...


class Scraper:
    """Scrapes every target on its schedule and hands each result to the sink; holds no SLO state."""

    def __init__(self, config: Config, sink: ResultSink, *, clock: Callable[[], float] = time.time,
                 steady: Callable[[], float] | None = None) -> None:
        """`steady`: a clock that neither steps nor stops in a suspend, read beside `clock` at each cycle so the
        sink can tell a wall clock that stepped forward; by default `steady_clock` with the real wall clock,
        none with another (a test's clock that jumps is no step)."""
        self.config = config
        self.sink = sink
        self.clock = clock
        self.steady = steady if steady is not None else (steady_clock if clock is time.time else None)
        self.npu_details: dict[tuple[str, str], DetailCache] = {}  # collection memo per npu-smi target
        # What each SGLang target's scrapes parse (its deployment's readers, `monitor.feeds.target_wanted`):
        # computed once per config, so a reload that changes a deployment recomputes its targets' sets.
        self.wanted = read_sets(config)
        self.cycles = 0
        self.last_cycle_seconds = 0.0
        self.deployment_cycle_seconds: dict[str, float] = {}
        # Each deployment's scrape loop, and the loop that closes every interval (`on_cycle`).
        self.loops: dict[str, LoopHealth] = {d.name: LoopHealth(LOOP_SCRAPE, d.name) for d in config.deployments}
        self.cycle_loop = LoopHealth(LOOP_SIDECAR)
        self._sem = asyncio.Semaphore(config.sidecar.max_concurrent_scrapes)
        # The internal error last logged per (deployment, target): its traceback is logged once, and the
        # same error at every later scrape is one line (a bug that persists was 30 lines per scrape).
        self._said: dict[tuple[str, str], str] = {}
        self.parser = ParserPool(config.sidecar)
        # While `run` runs (staggered): its session and stop event, and each deployment's scrape loop task, so
        # that a reload can replace the loops of the deployments it changed and leave the others on schedule.
        self._session: aiohttp.ClientSession | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def can_update(self, new: Config) -> bool:
        """Whether `new` can run in this scraper, its unchanged deployments' loops going on: the settings it
        is built on (`SCRAPER_BOUND`: the interval and phases, the connection pool, the parser) are the same."""
        return all(getattr(new.sidecar, name) == getattr(self.config.sidecar, name) for name in SCRAPER_BOUND)

    def update(self, config: Config, sink: ResultSink, kept: Collection[str]) -> None:
        """Run `config` from now (a reload; `can_update(config)` holds). The deployments in `kept` (unchanged)
        keep their loops, phase and health: a reload, even one a second, never delays their scrapes or the
        cycle tick. The others' loops stop; changed and new ones start, a changed one scraped when its next
        scrape was due (at once if that has passed), so reloading never starves a deployment either."""
        keep = set(kept)
        self.config, self.sink = config, sink
        self.wanted = read_sets(config)
        self.npu_details = {k: v for k, v in self.npu_details.items() if k[0] in keep}
        self._said = {k: v for k, v in self._said.items() if k[0] in keep}
        for name in [n for n in self._tasks if n not in keep]:
            self._tasks.pop(name).cancel()
        # A changed deployment keeps its health record: its loop age runs on, so a deployment that reloads keep
        # from being scraped is stale on /healthz, not healthy with an age that restarts at each reload.
        self.loops = {d.name: self.loops.get(d.name) or LoopHealth(LOOP_SCRAPE, d.name) for d in config.deployments}
        self.deployment_cycle_seconds = {k: v for k, v in self.deployment_cycle_seconds.items() if k in keep}
        if self._session is None or self._stop is None:
            return  # not running yet (or not staggered): `run` starts every deployment's loop itself
        interval = config.sidecar.scrape_interval_seconds
        for dep in config.deployments:
            if dep.name in keep and dep.name in self._tasks:
                continue
            health = self.loops[dep.name]
            last = health.last_cycle_monotonic
            delay = self.offset(dep) if last is None else max(0.0, last + interval - time.monotonic())
            self._tasks[dep.name] = asyncio.create_task(self._deployment_loop(self._session, dep, self._stop, delay))

    def close(self) -> None:
        """Stop the parser's worker processes (if any were started)."""
        self.parser.close()

    def limits(self, target: Target) -> Limits:
        side = self.config.sidecar
        return Limits(target.sample_limit or side.sample_limit, target.series_limit or side.series_limit)

    @staticmethod
    def compression(target: Target) -> bool:
        """Whether to ask `target` for gzip: as configured, else only over a network (see monitor.fetch)."""
        if target.enable_compression is not None:
            return target.enable_compression
        return not is_loopback(target.url or "")

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
                              bearer_token=target.bearer_token, follow_redirects=target.follow_redirects,
                              compression=self.compression(target))
        if not res.ok:
            return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes,
                                error=explain_http_error(target, res.error or "failed"))
        wanted = ROUTER_WANTED if target.source == "router" else self.wanted.get((dep.name, target.id))
        if wanted is None:  # a target this scraper's read sets do not know (built in code): its own set, now
            wanted = target_wanted(dep, target)
        try:
            expo = await self.parser.parse(res.body or b"", wanted, content_type=res.content_type,
                                           count_families=target.source == "router", limits=self.limits(target))
        except ParseError as err:
            # Rejected whole, as Prometheus rejects a scrape it cannot parse: the windows keep their last good state.
            return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes,
                                error=f"malformed exposition: {err}")
        except (LimitExceeded, ParserDied) as err:  # the same: failed whole, previous state kept
            return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes, error=str(err))
        if expo.samples == 0:  # nothing to compute from: a failure, not `up` with zero samples
            return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes,
                                error="empty exposition (HTTP 200 with no samples)")
        return ScrapeResult(dep.name, target, ts, res.duration_seconds, res.bytes, exposition=expo)

    async def _scrape_into_sink(self, session: aiohttp.ClientSession, dep: Deployment, target: Target) -> None:
        result = await self.scrape(session, dep, target)
        if result is not None:
            self.sink.apply(result)

    async def _scrape_all(self, session: aiohttp.ClientSession, deps: list[Deployment]) -> None:
        pairs = [(dep, t) for dep in deps for t in dep.targets]
        results = await asyncio.gather(*(self._scrape_into_sink(session, dep, t) for dep, t in pairs),
                                       return_exceptions=True)
        for (dep, target), r in zip(pairs, results):
            if isinstance(r, Exception):  # a bug must not stop the loop: say where, and fail the scrape
                self._say_internal_error(dep, target, r)
                self._internal_error(dep, target, r)

    def _say_internal_error(self, dep: Deployment, target: Target, err: Exception) -> None:
        text = f"{type(err).__name__}: {err}"
        first = self._said.get((dep.name, target.id)) != text
        self._said[(dep.name, target.id)] = text
        log.error("%s %s: a scrape failed on an internal error: %s%s", dep.name, target.role, text,
                  "" if first else " (again; its traceback above)", exc_info=err if first else None)

    def _internal_error(self, dep: Deployment, target: Target, err: Exception) -> None:
        """The target's scrape counts as failed with the error as its reason (counted, shown, logged)."""
        try:
            self.sink.apply(ScrapeResult(dep.name, target, self.clock(), 0.0,
                                         error=f"internal error: {type(err).__name__}: {err}"))
        except Exception as again:
            text = f"{type(again).__name__}: {again}"
            first = self._said.get((dep.name, "")) != text  # "": the deployment's own, beside its targets'
            self._said[(dep.name, "")] = text
            log.error("%s: could not mark the target's scrape as failed either: %s", dep.name, text,
                      exc_info=again if first else None)

    async def cycle(self, session: aiohttp.ClientSession) -> float:
        """Scrape every target once, then close every deployment's cycle (tests, `--once`, no stagger)."""
        started = time.perf_counter()
        await self._scrape_all(session, self.config.deployments)
        now, elapsed = self.clock(), self._steady_now()
        for dep in self.config.deployments:
            self.sink.snapshot(dep.name, now, elapsed)
            self.loops[dep.name].completed(now)
        self.cycles += 1
        self.last_cycle_seconds = time.perf_counter() - started
        return now

    def _steady_now(self) -> float | None:
        return self.steady() if self.steady is not None else None

    def offset(self, dep: Deployment) -> float:
        """Stable phase of a deployment within the interval (Prometheus offsets targets the same
        way): with many deployments, scrapes and their CPU spread over the interval instead of
        queueing at its start."""
        interval = self.config.sidecar.scrape_interval_seconds
        return shard_of(dep.name, 10_000) / 10_000 * interval

    async def _deployment_loop(self, session: aiohttp.ClientSession, dep: Deployment, stop: asyncio.Event,
                               delay: float) -> None:
        await _sleep(stop, delay)
        await supervise(lambda: self._deployment_cycles(session, dep, stop), self.loops[dep.name], stop,
                        self.config.sidecar.scrape_interval_seconds)

    async def _deployment_cycles(self, session: aiohttp.ClientSession, dep: Deployment, stop: asyncio.Event) -> None:
        interval = self.config.sidecar.scrape_interval_seconds
        while not stop.is_set():
            begun = time.monotonic()
            await self._scrape_all(session, [dep])
            ts = self.clock()
            self.sink.snapshot(dep.name, ts, self._steady_now())
            self.loops[dep.name].completed(ts)
            took = time.monotonic() - begun
            self.deployment_cycle_seconds[dep.name] = took
            await _sleep(stop, interval - took)

    async def run(self, stop: asyncio.Event, on_cycle: Callable[[float], Any] | None = None) -> None:
        """Scrape on schedule until `stop`; `on_cycle(now)` once per interval. Every loop is supervised."""
        interval = self.config.sidecar.scrape_interval_seconds
        for health in (*self.loops.values(), self.cycle_loop):
            health.start()
        connector = aiohttp.TCPConnector(limit=self.config.sidecar.max_concurrent_scrapes)
        async with aiohttp.ClientSession(connector=connector) as session:
            if not self.config.sidecar.stagger_scrapes:
                async def cycles() -> None:
                    while not stop.is_set():
                        begun = time.monotonic()
                        now = await self.cycle(session)
                        if on_cycle is not None:
                            on_cycle(now)
                        self.cycle_loop.completed(now)
                        await _sleep(stop, interval - (time.monotonic() - begun))

                await supervise(cycles, self.cycle_loop, stop, interval)
                return

            async def ticks() -> None:
                while not stop.is_set():
                    await _sleep(stop, interval)
                    if stop.is_set():
                        break
                    # One "cycle" = one interval in which every deployment was scraped once.
                    self.cycles += 1
                    self.last_cycle_seconds = max(self.deployment_cycle_seconds.values(), default=0.0)
                    now = self.clock()
                    if on_cycle is not None:
                        on_cycle(now)
                    self.cycle_loop.completed(now)

            self._session, self._stop = session, stop
            self._tasks = {d.name: asyncio.create_task(self._deployment_loop(session, d, stop, self.offset(d)))
                           for d in self.config.deployments}
            try:
                await supervise(ticks, self.cycle_loop, stop, interval)
            finally:
                self._session = self._stop = None
                tasks, self._tasks = list(self._tasks.values()), {}
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
