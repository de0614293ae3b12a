"""A `/metrics` endpoint on its own event loop thread, for tests where a real Prometheus scrapes a made-up target."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web

from tests.conftest import free_port


class ThreadedMetricsServer:
    """Subclasses answer `_metrics`; `with Server(...) as s:` serves on 127.0.0.1:`s.port` until the block ends."""

    def __init__(self) -> None:
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        raise NotImplementedError

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    def __enter__(self):  # noqa: ANN204 - the subclass
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.runner:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
