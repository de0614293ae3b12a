"""The running sidecar: scrape loop + state + HTTP endpoints, wired together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from monitor.config import Config
from monitor.export.http_server import build_app
from monitor.export.prometheus import SidecarCollector
from monitor.export.status_model import StatusResponse, deployment_status, sidecar_status
from monitor.scrape.loop import Scraper

log = logging.getLogger(__name__)


class Sidecar:
    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.started_at = clock()
        self.scraper = Scraper(config, clock=clock)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SidecarCollector(self.status, self._accelerator_families))
        self.runner: web.AppRunner | None = None
        self.port: int | None = None
        self._stop = asyncio.Event()

    def status(self) -> StatusResponse:
        now = self.clock()
        deps = []
        for dep in self.config.deployments:
            engine = self.scraper.engines[dep.name]
            targets = [self.scraper.statuses[(dep.name, t.id)] for t in dep.targets]
            deps.append(deployment_status(dep, engine.state(now), targets))
        side = sidecar_status(self.started_at, now, self.config.sidecar.scrape_interval_seconds,
                              self.scraper.cycles, self.scraper.last_cycle_seconds)
        return StatusResponse(sidecar=side, deployments=deps)

    def _accelerator_families(self) -> Iterator[Metric]:
        if not self.scraper.telemetry:
            return iter(())
        from monitor.telemetry.export import accelerator_families

        return iter(accelerator_families(self.scraper.telemetry))

    async def start_http(self, host: str | None = None, port: int | None = None) -> int:
        app = build_app(self.registry, self.status, api_token=self.config.sidecar.api_bearer_token)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host or self.config.sidecar.listen_host,
                           self.config.sidecar.listen_port if port is None else port)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.port = sock.getsockname()[1]
        return self.port

    async def run(self, *, once: bool = False) -> None:
        if once:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                await self.scraper.cycle(session)
            return
        await self.scraper.run(self._stop)

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        self.stop()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


async def serve(config: Config, *, host: str | None = None, port: int | None = None) -> None:
    """Run until SIGINT/SIGTERM."""
    sidecar = Sidecar(config)
    bound = await sidecar.start_http(host, port)
    log.info("serving /metrics, /healthz and /api/v1/status on http://%s:%d",
             host or config.sidecar.listen_host, bound)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, sidecar.stop)
    try:
        await sidecar.run()
    finally:
        await sidecar.close()
