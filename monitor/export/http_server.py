"""The sidecar's HTTP endpoints: /metrics, /healthz, /api/v1/status (optionally bearer-protected)."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from monitor.state import StatusResponse


def build_app(registry: CollectorRegistry, status: Callable[[], StatusResponse], *,
              api_token: str | None = None) -> web.Application:
    @web.middleware
    async def auth(request: web.Request, handler):  # type: ignore[no-untyped-def]
        # Only /api/* carries detail worth protecting; /metrics and /healthz stay open for
        # Prometheus and probes, as SGLang itself does for /metrics and /health.
        if api_token and request.path.startswith("/api/"):
            header = request.headers.get("Authorization", "")
            if not hmac.compare_digest(header.encode(), f"Bearer {api_token}".encode()):
                return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        return await handler(request)

    async def metrics(request: web.Request) -> web.Response:
        encoder, ctype = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(registry)
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def api_status(request: web.Request) -> web.Response:
        return web.Response(text=status().model_dump_json(), content_type="application/json")

    app = web.Application(middlewares=[auth])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/v1/status", api_status)
    return app
