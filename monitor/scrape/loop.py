"""The scrape cycle: every target concurrently, each bounded by its own timeout.

Results are handled as they arrive, so a slow or dead target costs the others nothing; the
deployment snapshot is taken once all targets of the cycle have answered or timed out (the
timeout never exceeds the interval, so cycles never pile up).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from monitor.config import Config, Deployment, Target
from monitor.conventions import ROUTER_FAMILIES
from monitor.export.status_model import redact
from monitor.parse.exposition import ParseError, parse
from monitor.parse.families import HistogramError, engine_wanted
from monitor.scrape.http import fetch
from monitor.scrape.shard import shard_of
from monitor.scrape.status import TargetStatus
from monitor.slo.engine import DeploymentEngine

log = logging.getLogger(__name__)

HTTP_SGLANG_SOURCES = frozenset({"sglang", "router-engine-metrics"})
TELEMETRY_SOURCES = frozenset({"npu-smi", "npu-exporter", "dcgm", "nvml"})
ROUTER_WANTED = frozenset(
    {f + s for f in ROUTER_FAMILIES for s in ("", "_bucket", "_count", "_sum")}
)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    """Wait up to `seconds` (none when not positive), returning at once when `stop` is set."""
    if seconds > 0:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)


def router_summary(samples: list) -> dict[str, float]:
    health = [s.value for s in samples if s.name == "smg_worker_health"]
    return {
        "workers": float(sum(1 for v in health if v >= 0)),
        "workers_healthy": float(sum(1 for v in health if v == 1)),
        "requests_total": float(sum(s.value for s in samples if s.name == "smg_router_requests_total")),
    }


def explain_http_error(target: Target, error: str) -> str:
    if target.source == "router-engine-metrics" and "Label names should agree" in error:
        return (error + " — the router's /engine_metrics merges workers and fails when their label sets "
                "differ (e.g. only decode has dp_rank, smg-project/smg#805); scrape the workers directly")
    if error.startswith("HTTP 404") and target.source == "sglang":
        return error + " — is the server launched with --enable-metrics?"
    return error


class Scraper:
    """Owns the engines and target statuses; `cycle()` runs one scrape of everything."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time,
                 engines: dict[str, DeploymentEngine] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.engines = engines or {d.name: DeploymentEngine(d) for d in config.deployments}
        self.statuses: dict[tuple[str, str], TargetStatus] = {}
        self.telemetry: dict[tuple[str, str], Any] = {}  # latest TelemetryResult per target
        self.npu_details: dict[tuple[str, str], Any] = {}  # DetailCache per npu-smi target with details
        self.wanted = engine_wanted()
        self.cycles = 0
        self.last_cycle_seconds = 0.0
        self.deployment_cycle_seconds: dict[str, float] = {}
        for dep in config.deployments:
            for t in dep.targets:
                self.statuses[(dep.name, t.id)] = TargetStatus(
                    dep.name, t.id, t.role, t.source or "", t.url, placeholder=t.has_placeholder,
                    last_error="placeholder in target address: fill it in the config" if t.has_placeholder else None,
                )
        self._sem = asyncio.Semaphore(config.sidecar.max_concurrent_scrapes)

    def _timeout(self, target: Target) -> float:
        return min(target.timeout_seconds or self.config.sidecar.scrape_timeout_seconds,
                   self.config.sidecar.scrape_interval_seconds)

    async def _scrape(self, session: aiohttp.ClientSession, dep: Deployment, target: Target) -> None:
        status = self.statuses[(dep.name, target.id)]
        if status.placeholder:
            return
        async with self._sem:
            ts = self.clock()
            if target.source in TELEMETRY_SOURCES:
                await self._collect_telemetry(session, dep, target, status, ts)
                return
            if target.source == "request-log":
                return  # tailed by the request-log reader, not scraped
            res = await fetch(session, target.url or "", timeout=self._timeout(target),
                              max_bytes=self.config.sidecar.max_response_bytes,
                              bearer_token=target.bearer_token, follow_redirects=target.follow_redirects)
        engine = self.engines[dep.name]
        if not res.ok:
            status.record_failure(ts, explain_http_error(target, res.error or "failed"), res.duration_seconds)
            engine.target_down(target)
            return
        try:
            if target.source == "router":
                expo = parse(res.text or "", ROUTER_WANTED, content_type=res.content_type)
            else:
                expo = parse(res.text or "", self.wanted, content_type=res.content_type, count_families=False)
            # Nothing to compute from: a failure, not `up` with zero samples.
            error = "empty exposition (HTTP 200 with no samples)" if expo.samples == 0 else None
            if error is None and target.source == "router":
                status.detail = router_summary(expo.selected)
            elif error is None:
                status.resets += engine.observe(target, expo)
        except (ParseError, HistogramError) as err:
            # Rejected whole, like Prometheus does: the windows keep their last good state.
            error = f"malformed exposition: {err}"
        if error is not None:
            status.record_failure(ts, error, res.duration_seconds)
            engine.target_down(target)
            return
        warnings = engine.warnings.get(target.id, [])
        if status.warnings != warnings:
            log.log(logging.WARNING if warnings else logging.INFO, "%s %s: %s", dep.name, redact(target.id),
                    "; ".join(warnings) or "exposition consistent again")
        status.record_success(ts, res.duration_seconds, expo.samples, res.bytes, expo.format, warnings)

    async def _collect_telemetry(self, session: aiohttp.ClientSession, dep: Deployment, target: Target,
                                 status: TargetStatus, ts: float) -> None:
        try:
            from monitor.telemetry.collect import DetailCache, collect
        except ImportError as err:  # pragma: no cover - telemetry package always ships
            status.record_failure(ts, f"telemetry unavailable: {err}", 0.0)
            return
        details = self.npu_details.setdefault((dep.name, target.id), DetailCache()) if target.npu_smi_details else None
        result = await collect(target, timeout=self._timeout(target), session=session, details=details)
        self.telemetry[(dep.name, target.id)] = result
        if result.up:
            status.record_success(ts, result.duration_seconds, len(result.readings), 0, target.source)
            if result.warnings:  # up with what the table gave; say what is missing
                more = f" (+{len(result.warnings) - 1} more)" if len(result.warnings) > 1 else ""
                status.last_error = f"partial: {result.warnings[0]}{more}"
        else:
            status.record_failure(ts, result.error or "telemetry collection failed", result.duration_seconds)

    async def _scrape_all(self, session: aiohttp.ClientSession, deps: list[Deployment]) -> None:
        jobs = [self._scrape(session, dep, t) for dep in deps for t in dep.targets]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for r in results:
            if isinstance(r, Exception):  # a bug must not stop the loop; say where it was
                log.error("scrape task failed: %r", r, exc_info=r)

    async def cycle(self, session: aiohttp.ClientSession) -> float:
        """Scrape every target once, then snapshot every deployment (tests, `--once`, no stagger)."""
        started = time.perf_counter()
        await self._scrape_all(session, self.config.deployments)
        now = self.clock()
        for engine in self.engines.values():
            engine.snapshot(now)
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
            self.engines[dep.name].snapshot(self.clock())
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
