"""The request endpoints of an emulated SGLang server: what clients and gateways send traffic to.

    POST /generate               native; `data: {...}` chunks with cumulative text, then `data: [DONE]`
    POST /v1/completions         OpenAI text completions (streamed or not; usage per stream_options)
    POST /v1/chat/completions    OpenAI chat completions
    GET/POST /flush_cache        empties the ranks' prefix caches (bench_serving --flush-cache)

A request joins the deployment's scheduler (`EmulatedDeployment.submit`) and its answer follows the
scheduler's clock: the handler sleeps until the next token is due, syncs the emulated clock and sends
what was produced (one chunk per wake, coalesced when it woke late, as SGLang's tokenizer does). A PD
prefill server answers once its KV left; the decode server streams. A client that hangs up is aborted
2 s later (SGLang's create_abort_task); a server that restarts or goes down drops its connections.

The endpoints read the emulator's clock as `EmulatorClock`: server.py's `Emulator` adds these routes, so
naming that class here would close an import cycle.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from aiohttp import web

from monitor.emulate import wire
from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.ingress import SubmitError
from monitor.emulate.sim import Req, ServerSim

log = logging.getLogger(__name__)
IDLE_POLL_SECONDS = 1.0  # longest sleep without a due token (disconnects and a frozen clock are seen by then)
SERVER_KEY = web.AppKey("server", ServerSim)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class EmulatorClock(Protocol):
    """What a request handler needs of the emulator's clock (server.Emulator)."""

    def sync(self) -> None: ...  # run every deployment's events up to now

    def poke(self) -> None: ...  # new events were scheduled: the clock task recomputes its sleep

    def wall_seconds(self, emulated: float | None, longest: float) -> float: ...


class Dropped(Exception):
    """The serving process died or became unreachable under the request: its connection is cut."""


class Waiter:
    """Sleep until a deadline or until the scheduler calls `wake` (a request's listener)."""

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None

    def wake(self) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)

    async def wait(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._fut = loop.create_future()
        handle = loop.call_later(max(seconds, 0.0), self.wake)
        try:
            await self._fut
        finally:
            handle.cancel()
            self._fut = None


class ServingEndpoints:
    """The request routes of one emulated server."""

    def __init__(self, emulator: EmulatorClock, dep: EmulatedDeployment, srv: ServerSim,
                 guard: Callable[[web.Request], None]) -> None:
        self.emu = emulator
        self.dep = dep
        self.srv = srv
        self.guard = guard

    def add_routes(self, app: web.Application) -> None:
        for path in wire.PARSERS:
            app.router.add_route("POST", path, self.handle)
        app.router.add_route("PUT", "/generate", self.handle)
        app.router.add_route("*", "/flush_cache", self.flush_cache)

    async def flush_cache(self, request: web.Request) -> web.Response:
        self.guard(request)
        for rank in self.srv.ranks:
            rank.cache = type(rank.cache)(rank.max_total_tokens)
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n")

    # --- one request ---------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.guard(request)
        endpoint = request.path
        openai = endpoint.startswith("/v1/")
        try:
            body = await request.json(loads=json.loads)
        except ValueError as err:
            return _error(openai, f"the body is not JSON: {err}")
        try:
            client = wire.PARSERS[endpoint](body)
            self.emu.sync()
            req = self.dep.submit(self.srv, client)
        except (wire.WireError, SubmitError) as err:
            return _error(openai, str(err))
        self.emu.poke()  # its first events are due within milliseconds: the clock must not oversleep them
        prefill_side = self.srv.spec.role == "prefill"
        model = client.model or self.srv.spec.model_name
        try:
            if client.stream:
                return await self._stream(request, req, client, model, prefill_side)
            return await self._whole(request, req, client, model, prefill_side)
        except Dropped:
            if request.transport is not None:
                request.transport.close()  # the process is gone: the connection just ends
            return web.Response(status=503)  # never reaches the client

    async def _progress(self, request: web.Request, req: Req, prefill_side: bool) -> AsyncIterator[int]:
        """Token counts as they grow, and the last one when the request ends (PD prefill: 1 at its end)."""
        waiter = Waiter()
        req.listeners.append(waiter.wake)
        sent = 0
        try:
            while True:
                self.emu.sync()
                if req.killed or self.dep.effects(self.srv.spec.role).down:
                    raise Dropped()
                if prefill_side:
                    if req.prefill_done:
                        yield 1 if not req.abort_message else 0
                        return
                    due = None
                else:
                    n = req.tokens(self.dep.now)
                    if req.finished:
                        yield n
                        return
                    if n > sent:
                        sent = n
                        yield n
                    t = req.next_token_time(n)
                    due = None if t is None else t - self.dep.now
                if request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError("client went away")
                await waiter.wait(self.emu.wall_seconds(due, IDLE_POLL_SECONDS))
        finally:
            req.listeners.remove(waiter.wake)

    def _snapshot(self, req: Req, n: int, prefill_side: bool) -> wire.Progress:
        done = req.prefill_done if prefill_side else req.finished
        finish = None
        if done:
            finish = "abort" if req.abort_message else ("length" if prefill_side else req.shape.finish_reason)
        timing: dict[str, float] = {}
        if done and not prefill_side:
            timing = self._timing(req)
        return wire.Progress(rid=req.client.rid if req.client else req.rid, prompt_tokens=req.shape.prompt_tokens,
                             completion_tokens=n, cached_tokens=req.shape.cached_tokens, finish=finish,
                             abort_message=req.abort_message, abort_status=req.abort_status, timing=timing,
                             finish_length=0 if prefill_side else None)

    def _timing(self, req: Req) -> dict[str, float]:
        """meta_info's latencies at the finish (SGLang with --enable-metrics)."""
        wall = self.dep.wall_start
        out: dict[str, float] = {"queue_time": req.queue_time, "request_received_ts": wall + req.created,
                                 "e2e_latency": req.t_end - req.created if req.t_end else self.dep.now - req.created}
        if req.t_first and req.produced:
            out["first_token_latency"] = req.t_first - req.created
        end = wall + (req.t_end or self.dep.now)
        out["request_finished_ts"] = out["response_sent_to_client_ts"] = end
        tpot = self.dep.request_tpot(req)
        if tpot:
            out["decode_throughput"] = 1.0 / tpot
        return out

    async def _whole(self, request: web.Request, req: Req, client: wire.ClientRequest, model: str,
                     prefill_side: bool) -> web.StreamResponse:
        last = 0
        try:
            async for n in self._progress(request, req, prefill_side):
                last = n
        except ConnectionResetError:
            self._gone(req)
            return web.Response(status=499)  # nobody is listening any more
        except asyncio.CancelledError:
            self._gone(req)
            raise
        p = self._snapshot(req, last, prefill_side)
        if p.finish == "abort" and p.abort_status:
            return _error(client.endpoint.startswith("/v1/"), p.abort_message, p.abort_status)
        if client.endpoint == "/generate":
            return _json(wire.native_chunk(p))
        if client.endpoint == "/v1/completions":
            return _json(wire.completion_response(client, p, model))
        return _json(wire.chat_response(client, p, model))

    async def _stream(self, request: web.Request, req: Req, client: wire.ClientRequest, model: str,
                      prefill_side: bool) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await resp.prepare(request)
        write = _Writer(client, model)
        try:
            async for n in self._progress(request, req, prefill_side):
                p = self._snapshot(req, n, prefill_side)
                for chunk in write.chunks(p):
                    await resp.write(chunk)
            await resp.write(wire.DONE)
            await resp.write_eof()
        except ConnectionResetError:  # the client (or the gateway) hung up mid-stream
            self._gone(req)
        except asyncio.CancelledError:
            self._gone(req)
            raise
        return resp

    def _gone(self, req: Req) -> None:
        self.emu.sync()
        self.dep.client_gone(req)


class _Writer:
    """The SSE chunks one streamed response sends, per endpoint (state: what the client already has)."""

    def __init__(self, client: wire.ClientRequest, model: str) -> None:
        self.client = client
        self.model = model
        self.sent = 0
        self.role_sent = False

    def chunks(self, p: wire.Progress) -> list[bytes]:
        c = self.client
        if p.finish == "abort" and p.abort_status:  # a system error: one error chunk
            self.sent = p.completion_tokens
            err = wire.openai_error(p.abort_message, p.abort_status) if c.endpoint != "/generate" else \
                wire.native_error(p.abort_message, p.abort_status)
            return [wire.sse(err)]
        if c.endpoint == "/generate":
            return [wire.sse(wire.native_chunk(p))]
        out: list[bytes] = []
        if c.endpoint == "/v1/completions":
            out.append(wire.sse(wire.completion_chunk(c, p, self.sent, self.model)))
            if p.finish and c.include_usage:
                out.append(wire.sse(wire.completion_usage_chunk(c, p, self.model)))
        else:
            if not self.role_sent:
                self.role_sent = True
                out.append(wire.sse(wire.chat_chunk(c, p, self.model, role=True, content="")))
            delta = wire.delta_text(self.sent, p.completion_tokens)
            if delta:
                out.append(wire.sse(wire.chat_chunk(c, p, self.model, content=delta)))
            if p.finish:
                out.append(wire.sse(wire.chat_chunk(c, p, self.model, finish=p.finish)))
                if c.include_usage:
                    out.append(wire.sse(wire.chat_usage_chunk(c, p, self.model)))
        self.sent = p.completion_tokens
        return out


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(obj, separators=(",", ":")).encode(), status=status,
                        content_type="application/json")


def _error(openai: bool, message: str, status: int = 400) -> web.Response:
    return _json(wire.openai_error(message, status) if openai else wire.native_error(message, status), status)


@web.middleware
async def count_http(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """SGLang's HTTP middleware: sglang:http_requests_total / http_responses_total per route and status."""
    srv = request.app[SERVER_KEY]
    labels = {"endpoint": request.path, "method": request.method}
    srv.store.inc("sglang:http_requests", labels)
    try:
        resp = await handler(request)
    except web.HTTPException as exc:
        srv.store.inc("sglang:http_responses", {**labels, "status_code": str(exc.status)})
        raise
    srv.store.inc("sglang:http_responses", {**labels, "status_code": str(resp.status)})
    return resp
