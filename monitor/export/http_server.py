"""The sidecar's HTTP endpoints: /metrics, /healthz, /api/v1/status (optionally bearer-protected).

The port faces whatever can reach it, so the server is hardened at its edges: a connection must
deliver a complete request within `header_timeout` of opening (or of its previous response) or it
is closed, so half-sent requests cannot hold connections forever; a malformed request is one log
line at INFO, not an ERROR with a traceback; an Authorization header that is not UTF-8 is a 401. At most
`max_connections` are open at once: the excess is shed at accept (monitor/export/connections.py), and
what floods the port is logged once per interval, not per connection. /metrics is served from a page
rendered at most once per scrape cycle off the event loop (monitor/export/render_cache.py).
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from monitor.export.connections import ConnectionGuard, ThrottledLog, accept_error_handler
from monitor.export.render_cache import MetricsPage, accepts_gzip
from monitor.export.status_query import (
    AsyncStatusSource,
    QueryError,
    StatusSource,
    awaitable_status,
    dump,
    parse_query,
    select,
)
from monitor.redaction import redact_str

log = logging.getLogger(__name__)

HEADER_TIMEOUT_SECONDS = 10.0


def bearer_matches(header: str, token: str) -> bool:
    """`Authorization: Bearer <token>`, the scheme in any case (RFC 7235). Header bytes that are not
    UTF-8 (aiohttp keeps them as surrogates) cannot be the token: no match, never an error."""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    try:
        given = value.strip().encode("utf-8")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(given, token.encode("utf-8"))


class RequestDeadlines:
    """One timer per connection, from its opening until its first request reaches the app; later
    requests on a kept-alive connection are bounded by aiohttp's keep-alive timeout (set equal)."""

    def __init__(self, timeout: float, throttled: ThrottledLog | None = None) -> None:
        self.timeout = timeout
        self._timers: dict[asyncio.BaseTransport, asyncio.TimerHandle] = {}
        self.throttled = throttled or ThrottledLog(log)

    def arm(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        self._timers[transport] = loop.call_later(self.timeout, self._expire, transport)

    def disarm(self, transport: asyncio.BaseTransport | None) -> None:
        timer = self._timers.pop(transport, None) if transport is not None else None
        if timer is not None:
            timer.cancel()

    def _expire(self, transport: asyncio.BaseTransport) -> None:
        self._timers.pop(transport, None)
        peer = transport.get_extra_info("peername")
        # Once per interval, not per connection: a flood of idle connections was ~7,000 lines a minute.
        self.throttled.say("deadline", logging.INFO, "closed a connection from %s: no complete request within %gs",
                           peer, self.timeout,
                           summary="closed %d more connections that sent no complete request in time, in the last %gs")
        transport.close()


class _Deadlined(asyncio.Protocol):
    """aiohttp's protocol for one connection, with the connection's request deadline around it; past the
    connection cap, nothing: the connection is shed before aiohttp's protocol is even made."""

    def __init__(self, make_inner: Callable[[], Any], deadlines: RequestDeadlines, guard: ConnectionGuard) -> None:
        self._make_inner = make_inner
        self._inner: Any = None
        self._deadlines = deadlines
        self._guard = guard
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._guard.admit(transport):
            return
        self._transport = transport
        self._inner = self._make_inner()
        self._deadlines.arm(transport)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is None:  # shed: never counted, nothing to tell aiohttp
            return
        self._guard.release()
        self._deadlines.disarm(self._transport)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class _BadRequestLog(logging.LoggerAdapter):
    """aiohttp logs a request it cannot parse with logger.exception (ERROR + traceback; DEBUG +
    traceback for a bad method), and anyone can send one: such a request is one line, INFO (DEBUG
    for a bad method, e.g. TLS to this plain port); a failure in our own handlers stays an ERROR."""

    def exception(self, msg: object, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        if not self._one_line(logging.INFO, args, exc_info):
            self.logger.error(msg, *args, exc_info=exc_info, **kwargs)

    def debug(self, msg: object, *args: Any, exc_info: Any = None, **kwargs: Any) -> None:
        if not self._one_line(logging.DEBUG, args, exc_info):
            self.logger.debug(msg, *args, exc_info=exc_info, **kwargs)

    def _one_line(self, level: int, args: tuple[Any, ...], exc_info: Any) -> bool:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1] if exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return False
        reason = redact_str(" ".join(str(exc).split()))[:200]  # it may quote an Authorization header
        self.logger.log(level, "bad request from %s: %s", args[0] if args else "?", reason)
        return True


class _Site(web.BaseSite):
    """A TCP site whose connections carry a request deadline (aiohttp's TCPSite has none)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, deadlines: RequestDeadlines,
                 guard: ConnectionGuard) -> None:
        super().__init__(runner)
        self._host, self._port, self._deadlines, self._guard = host, port, deadlines, guard
        self._handler: Callable[..., None] | None = None

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        # A failed accept (out of descriptors) was a traceback per attempt: counted and said once per interval.
        self._handler = accept_error_handler(self._guard, loop)
        loop.set_exception_handler(self._handler)
        self._server = await loop.create_server(
            lambda: _Deadlined(server, self._deadlines, self._guard), self._host, self._port, reuse_address=True)

    async def stop(self) -> None:
        await super().stop()
        loop = asyncio.get_running_loop()
        if self._handler is not None and loop.get_exception_handler() is self._handler:
            loop.set_exception_handler(self._handler.previous)  # type: ignore[attr-defined]

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]


DEADLINES = web.AppKey("request_deadlines", RequestDeadlines)
GUARD = web.AppKey("connection_guard", ConnectionGuard)
DEFAULT_MAX_CONNECTIONS = 1024
# POST /-/reload while sidecar.enable_lifecycle is off: Prometheus's 403 and words, with where to turn it on.
LIFECYCLE_OFF = ("Lifecycle API is not enabled: set sidecar.enable_lifecycle: true (and restart) for POST /-/reload, "
                 "or send the process SIGHUP")


def build_app(metrics_page: MetricsPage, status: StatusSource, *,
              api_token: str | None | Callable[[], str | None] = None,
              header_timeout: float = HEADER_TIMEOUT_SECONDS,
              problems: Callable[[], list[str]] | None = None,
              degraded: Callable[[], list[str]] | None = None,
              reload: Callable[[], str | None | Awaitable[str | None]] | None = None, lifecycle: bool = True,
              deployment_names: Callable[[], list[str]] | None = None,
              guard: ConnectionGuard | None = None,
              status_async: AsyncStatusSource | None = None) -> web.Application:
    """`problems()` says what makes the sidecar unhealthy (e.g. a stuck loop): /healthz answers 503 with
    them, 200 when there are none. `degraded()` says what works less than it should while the SLO state
    is served (e.g. the recording cannot be written): 200 with status "degraded" and the reasons, so a
    liveness probe does not restart what a restart would not fix. `reload()` reloads the config for
    `POST /-/reload` (None when it worked, else why not) when `lifecycle` is on (else a 403); `api_token` may be a callable (read per request,
    so a reload can change it). `deployment_names()` lists the deployments in order, so that a page of
    /api/v1/status builds only its own (without it they are read from a whole `status()`). `metrics_page`
    serves /metrics; `guard` caps the port's connections (default: 1024) and logs its overload.
    `status_async` builds /api/v1/status answers without holding the event loop (else `status` does)."""
    names = deployment_names or (lambda: [d.name for d in status().deployments])
    guard = guard or ConnectionGuard(DEFAULT_MAX_CONNECTIONS)
    deadlines = RequestDeadlines(header_timeout, guard.throttled)

    @web.middleware
    async def request_arrived(request: web.Request, handler):  # type: ignore[no-untyped-def]
        deadlines.disarm(request.transport)
        return await handler(request)

    @web.middleware
    async def auth(request: web.Request, handler):  # type: ignore[no-untyped-def]
        # Only /api/* carries detail worth protecting (and /-/reload acts); /metrics and /healthz stay
        # open for Prometheus and probes, as SGLang itself does for /metrics and /health.
        token = api_token() if callable(api_token) else api_token
        if (token and (request.path.startswith("/api/") or request.path.startswith("/-/"))
                and not bearer_matches(request.headers.get("Authorization", ""), token)):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        return await handler(request)

    async def metrics(request: web.Request) -> web.Response:
        page = await metrics_page.get(request.headers.get("Accept", ""))
        headers = {"Content-Type": page.content_type, "Vary": "Accept, Accept-Encoding"}
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            headers["Content-Encoding"] = "gzip"
            return web.Response(body=page.gzipped, headers=headers)
        return web.Response(body=page.body, headers=headers)

    async def healthz(request: web.Request) -> web.Response:
        found = problems() if problems is not None else []
        less = degraded() if degraded is not None else []
        if found:
            return web.json_response({"status": "unhealthy", "problems": found + less}, status=503)
        if less:
            return web.json_response({"status": "degraded", "problems": less})
        return web.json_response({"status": "ok"})

    async def api_status(request: web.Request) -> web.Response:
        # Filters and paging: monitor/export/status_query.py. A bad query is a 400 saying why.
        try:
            answer = await select(parse_query(list(request.query.items())), status_async or awaitable_status(status), names)
        except QueryError as err:
            return web.json_response({"error": str(err)}, status=400)
        return web.Response(text=dump(answer), content_type="application/json")

    async def reload_config(request: web.Request) -> web.Response:
        # As Prometheus's /-/reload: 200 when the new config runs, 500 with why when the old one stays.
        if not lifecycle:
            return web.json_response({"status": "error", "error": LIFECYCLE_OFF}, status=403)
        error = reload() if reload is not None else "this server has no config to reload"
        if inspect.isawaitable(error):  # the sidecar reads the file in a thread (Sidecar.reload_async)
            error = await error
        if error is not None:
            return web.json_response({"status": "error", "error": error}, status=500)
        return web.json_response({"status": "success"})

    app = web.Application(middlewares=[request_arrived, auth])
    app[DEADLINES] = deadlines
    app[GUARD] = guard
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/v1/status", api_status)
    app.router.add_post("/-/reload", reload_config)
    return app


async def start_server(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve `app` (from build_app) on host:port; returns the runner (cleanup() stops it) and the port."""
    deadlines = app[DEADLINES]
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=deadlines.timeout,
                           logger=_BadRequestLog(logging.getLogger("aiohttp.server"), {}))
    await runner.setup()
    site = _Site(runner, host, port, deadlines, app[GUARD])
    await site.start()
    return runner, site.port
