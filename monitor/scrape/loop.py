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
from monitor.parse.exposition import Exposition, ParseError, parse
from monitor.parse.families import HistogramError, engine_wanted
from monitor.parse.gateway import ROUTER_WANTED, router_summary, split_workers, worker_address
from monitor.scrape.http import fetch
from monitor.scrape.shard import shard_of
from monitor.scrape.status import TargetStatus
from monitor.slo.engine import DeploymentEngine

log = logging.getLogger(__name__)

HTTP_SGLANG_SOURCES = frozenset({"sglang", "router-engine-metrics"})
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
        # router-engine-metrics: the per-worker targets each one fed last time, and the workers each
        # deployment scrapes directly (those are read from their own target only, never twice).
        self._worker_targets: dict[tuple[str, str], list[Target]] = {}
        self._direct: dict[str, set[str]] = {
            d.name: {worker_address(t.url) for t in d.targets if t.source == "sglang" and t.url}
            for d in config.deployments
        }
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
                              bearer_token=target.bearer_token)
        engine = self.engines[dep.name]
        if not res.ok:
            status.record_failure(ts, explain_http_error(target, res.error or "failed"), res.duration_seconds)
            self._target_down(dep, target)
            return
        note = None
        try:
            if target.source == "router":
                expo = parse(res.text or "", ROUTER_WANTED, content_type=res.content_type)
                status.detail = router_summary(expo.selected)
            elif target.source == "router-engine-metrics":
                expo = parse(res.text or "", self.wanted, content_type=res.content_type, count_families=False)
                note = self._observe_workers(dep, target, expo, status)
            else:
                expo = parse(res.text or "", self.wanted, content_type=res.content_type, count_families=False)
                status.resets += engine.observe(target, expo)
        except (ParseError, HistogramError) as err:
            # Rejected whole, like Prometheus does: the windows keep their last good state.
            status.record_failure(ts, f"malformed exposition: {err}", res.duration_seconds)
            self._target_down(dep, target)
            return
        status.record_success(ts, res.duration_seconds, expo.samples, res.bytes, expo.format)
        status.last_error = note

    def _observe_workers(self, dep: Deployment, target: Target, expo: Exposition, status: TargetStatus) -> str | None:
        """Feed a gateway's /engine_metrics to the engine one worker at a time, each with the role its
        engine_type label names (the target's role only for series without one). A worker the deployment
        also scrapes directly is left out: its requests would count twice. Returns a note saying so."""
        engine = self.engines[dep.name]
        fed: list[Target] = []
        direct: list[str] = []
        for addr, (role, samples) in sorted(split_workers(expo.selected).items()):
            if addr and addr in self._direct[dep.name]:
                direct.append(addr)
                continue
            part = target.model_copy(update={"role": role or target.role, "name": f"{target.id} worker {addr}"})
            status.resets += engine.observe(part, expo._replace(selected=samples))
            fed.append(part)
        key = (dep.name, target.id)
        now = {t.id for t in fed}
        for gone in self._worker_targets.get(key, []):  # a worker no longer in the merge: its gauges are stale
            if gone.id not in now:
                engine.target_down(gone)
        self._worker_targets[key] = fed
        status.detail = {"workers": float(len(fed) + len(direct)), "workers_scraped_directly": float(len(direct))}
        if not direct:
            return None
        return (f"note: {len(direct)} of {len(fed) + len(direct)} workers are also scraped directly "
                f"({', '.join(direct)}): read from their own targets only, so no request counts twice")

    def _target_down(self, dep: Deployment, target: Target) -> None:
        engine = self.engines[dep.name]
        engine.target_down(target)
        for part in self._worker_targets.pop((dep.name, target.id), []):
            engine.target_down(part)

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
