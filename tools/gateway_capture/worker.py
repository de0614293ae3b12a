"""A capture worker: answers a gateway the way an SGLang 0.5.23 server does, with behaviour chosen per request.

Not an emulator of an engine (no queues, no batching): it exists so that the real gateways route real
requests and record what they record. Wire formats follow SGLang 0.5.23's source:
  - `/generate` (`entrypoints/http_server.py` `serve_generate_request`): non-streamed, one JSON object
    `{"text", "output_ids", "meta_info"}`; streamed, `data: {...}\\n\\n` chunks of the same object (non-incremental
    text, the default) then `data: [DONE]\\n\\n`; `meta_info` as `tokenizer_manager.py` builds it
    (`id, finish_reason, prompt_tokens, weight_version, num_retractions, reasoning_tokens, completion_tokens,
    cached_tokens`, `e2e_latency` when finished); errors `{"error": {"message"}}`.
  - `/v1/completions`, `/v1/chat/completions` (`entrypoints/openai/protocol.py`): `text_completion` /
    `chat.completion(.chunk)` objects with `usage`, a role-only first chat delta, a usage chunk when
    `stream_options.include_usage`, then `data: [DONE]`; errors are `ErrorResponse` (`object: "error"`).
  - `/health`, `/health_generate` (200), `/get_model_info`, `/model_info`, `/get_server_info`, `/server_info`,
    `/v1/models`, `/v1/loads` (`entrypoints/v1_loads.py`, per-DP-rank loads; in-flight requests are live),
    `/metrics` (an SGLang exposition given by the caller).

Behaviour is read from markers in the prompt (`text`, `prompt` or the last chat message), because the
gateways re-serialise request bodies but pass the prompt through. `[key=value]` applies to every worker,
`[prefill.key=value]` / `[decode.key=value]` only to that role:
  status=N   answer HTTP N with SGLang's error body instead of generating
  head=S     wait S seconds before the response head (headers)
  first=S    then S more seconds before the first token (a stream's head goes out at once)
  itl=S      seconds between tokens (default 0.01)
  tokens=N   output tokens (default: max_new_tokens / max_tokens, else 8; a PD prefill worker makes 1)
  break=K    streamed: after K token chunks, end the connection without ending the body, by
  cut=HOW    abort (default: the socket is reset), close (an orderly close, no last chunk) or partial
             (half an SSE event, then reset); not streamed: the head declares the length, half the
             body follows, then a reset
  id=X       a name for the request in the worker's log
Every request is logged with its wall-clock times (arrival, head sent, first token sent, end).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

MARKER_RE = re.compile(r"\[(?:(prefill|decode|server)\.)?([a-z_]+)=([^\]]*)\]")
DEFAULT_ITL = 0.01
DEFAULT_TOKENS = 8
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "far")


class _DropHttp2Probes(logging.Filter):
    """The gateways probe gRPC over HTTP/2 on the worker's port first; aiohttp logs each refusal as a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], BadHttpMessage))


logging.getLogger("aiohttp.server").addFilter(_DropHttp2Probes())


@dataclass
class RequestLog:
    path: str
    id: str
    stream: bool
    arrived: float
    head: float | None = None
    first_token: float | None = None
    end: float | None = None
    outcome: str = ""  # ok, status=N, broken, client_gone

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CaptureWorker:
    """role: server (regular), prefill or decode; metrics: the exposition `/metrics` answers."""

    role: str
    model: str
    metrics: str
    port: int = 0
    dp_size: int = 1
    log: list[RequestLog] = field(default_factory=list)
    inflight: int = 0
    healthy: bool = True  # False: /health and /health_generate answer 503
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> CaptureWorker:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        for path in ("/health", "/health_generate"):
            app.router.add_get(path, self._health)
        for path in ("/get_model_info", "/model_info"):
            app.router.add_get(path, self._model_info)
        for path in ("/get_server_info", "/server_info"):
            app.router.add_get(path, self._server_info)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/loads", self._loads)
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- metadata --------------------------------------------------------------------------------
    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=self.metrics, content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def _health(self, _: web.Request) -> web.Response:
        return web.Response(status=200 if self.healthy else 503)

    async def _model_info(self, _: web.Request) -> web.Response:
        return web.json_response({"model_path": self.model, "tokenizer_path": self.model, "is_generation": True,
                                  "preferred_sampling_params": None, "weight_version": "default",
                                  "has_image_understanding": False, "has_audio_understanding": False,
                                  "model_type": "capture", "architectures": ["CaptureForCausalLM"]})

    async def _server_info(self, _: web.Request) -> web.Response:
        mode = {"server": "null"}.get(self.role, self.role)
        return web.json_response({
            "model_path": self.model, "tokenizer_path": self.model, "served_model_name": self.model,
            "host": "127.0.0.1", "port": self.port, "tp_size": 1, "pp_size": 1, "dp_size": self.dp_size,
            "enable_dp_attention": self.dp_size > 1, "disaggregation_mode": mode, "max_running_requests": 64,
            "enable_metrics": True, "version": "0.5.23", "internal_states": [{"last_gen_throughput": 0.0}]})

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": int(time.time()), "owned_by": "sglang",
             "root": self.model, "max_model_len": 131072}]})

    async def _loads(self, _: web.Request) -> web.Response:
        # /v1/loads (v1_loads.py): one entry per DP rank; the in-flight count is live.
        loads = [{"timestamp": time.time(), "dp_rank": r, "num_running_reqs": self.inflight if r == 0 else 0,
                  "num_waiting_reqs": 0, "num_waiting_uncached_tokens": 0, "num_used_tokens": 64 * self.inflight,
                  "num_total_tokens": 64 * self.inflight, "max_total_num_tokens": 100000,
                  "max_running_requests": 64, "token_usage": 0.00064 * self.inflight, "gen_throughput": 42.0,
                  "cache_hit_rate": 0.25, "utilization": self.inflight / 64}
                 for r in range(self.dp_size)]
        return web.json_response({"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                                  "version": "0.5.23", "accelerator": None, "num_accelerators": 1,
                                  "loads": loads})

    # --- inference --------------------------------------------------------------------------------
    def _markers(self, prompt: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for role, key, value in MARKER_RE.findall(prompt):
            if role in ("", self.role):
                out[key] = value
        return out

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body.get("text") or ""
        limit = (body.get("sampling_params") or {}).get("max_new_tokens")
        return await self._serve(request, "generate", prompt, bool(body.get("stream")), limit, body)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body.get("prompt") or ""
        prompt = prompt if isinstance(prompt, str) else json.dumps(prompt)
        return await self._serve(request, "completions", prompt, bool(body.get("stream")), body.get("max_tokens"),
                                 body)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body.get("messages") or [{}]
        content = messages[-1].get("content") or ""
        prompt = content if isinstance(content, str) else json.dumps(content)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        return await self._serve(request, "chat", prompt, bool(body.get("stream")), limit, body)

    async def _serve(self, request: web.Request, kind: str, prompt: str, stream: bool, limit: int | None,
                     body: dict[str, Any]) -> web.StreamResponse:
        m = self._markers(prompt)
        rec = RequestLog(request.path, m.get("id", ""), stream, time.time())
        self.log.append(rec)
        self.inflight += 1
        try:
            return await self._answer(request, kind, m, stream, limit, body, rec)
        except ConnectionResetError:  # the gateway closed its upstream connection (its client left)
            rec.outcome = "client_gone"
            return web.Response(status=499)  # never sent: the connection is gone
        except asyncio.CancelledError:
            rec.outcome = rec.outcome or "client_gone"
            raise
        finally:
            self.inflight -= 1
            rec.end = rec.end or time.time()

    async def _answer(self, request: web.Request, kind: str, m: dict[str, str], stream: bool, limit: int | None,
                      body: dict[str, Any], rec: RequestLog) -> web.StreamResponse:
        await asyncio.sleep(float(m.get("head", 0)))
        if "status" in m:
            code = int(m["status"])
            rec.head, rec.outcome = time.time(), f"status={code}"
            return web.json_response(_error_body(kind, code), status=code)
        n = 1 if self.role == "prefill" else int(m.get("tokens") or limit or DEFAULT_TOKENS)
        itl, first = float(m.get("itl", DEFAULT_ITL)), float(m.get("first", 0))
        rid = uuid.uuid4().hex
        created = int(time.time())
        model = body.get("model") or self.model
        t0 = time.time()
        if not stream:
            await asyncio.sleep(first + itl * (n - 1))
            rec.head = rec.first_token = time.time()
            payload = json.dumps(_final(kind, rid, model, created, n, t0)).encode()
            if "break" not in m:
                rec.outcome = "ok"
                return web.Response(body=payload, content_type="application/json")
            # The head declares the whole length; half the body follows, then the connection is reset.
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = len(payload)
            await resp.prepare(request)
            await resp.write(payload[: len(payload) // 2])
            await asyncio.sleep(0.05)
            rec.outcome = "broken (abort)"
            if request.transport is not None:
                request.transport.abort()
            return resp
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        rec.head = time.time()
        cut = int(m["break"]) if "break" in m else None
        for i in range(n):
            await asyncio.sleep(first if i == 0 else itl)
            if cut is not None and i == cut:
                how = m.get("cut", "abort")
                rec.outcome = f"broken ({how})"
                if how == "partial":
                    await resp.write(b'data: {"text": "the qu')
                    await asyncio.sleep(0.05)
                if request.transport is not None:  # no terminating chunk: the body ends mid-stream
                    request.transport.close() if how == "close" else request.transport.abort()
                return resp
            for chunk in _chunks(kind, rid, model, created, i, n, t0, body):
                await resp.write(b"data: " + chunk.encode() + b"\n\n")
            if i == 0:
                rec.first_token = time.time()
        if kind == "chat" and (body.get("stream_options") or {}).get("include_usage"):
            usage = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [], "usage": _usage(n)}
            await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        rec.outcome = "ok"
        return resp


def _text(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


def _usage(n: int) -> dict[str, Any]:
    return {"prompt_tokens": 16, "total_tokens": 16 + n, "completion_tokens": n, "prompt_tokens_details": None,
            "reasoning_tokens": 0}


def _meta(rid: str, done: int, n: int, t0: float) -> dict[str, Any]:
    finished = done == n
    meta: dict[str, Any] = {"id": rid, "finish_reason": {"type": "length", "length": n} if finished else None,
                            "prompt_tokens": 16, "weight_version": "default", "num_retractions": 0,
                            "reasoning_tokens": 0, "completion_tokens": done, "cached_tokens": 0}
    if finished:
        meta["e2e_latency"] = time.time() - t0
    return meta


def _final(kind: str, rid: str, model: str, created: int, n: int, t0: float) -> dict[str, Any]:
    if kind == "generate":
        return {"text": _text(n), "output_ids": list(range(1, n + 1)), "meta_info": _meta(rid, n, n, t0)}
    if kind == "completions":
        return {"id": rid, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": 0, "text": _text(n), "logprobs": None, "finish_reason": "length",
                             "matched_stop": None}], "usage": _usage(n)}
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": _text(n), "reasoning_content": None},
                         "logprobs": None, "finish_reason": "length", "matched_stop": None}],
            "usage": _usage(n)}


def _chunks(kind: str, rid: str, model: str, created: int, i: int, n: int, t0: float,
            body: dict[str, Any]) -> list[str]:
    """The SSE payloads for token i (0-based) of n."""
    last = i == n - 1
    if kind == "generate":  # non-incremental: each chunk carries the text so far
        return [json.dumps({"text": _text(i + 1), "output_ids": list(range(1, i + 2)),
                            "meta_info": _meta(rid, i + 1, n, t0)})]
    word = WORDS[i % len(WORDS)] + ("" if last else " ")
    if kind == "completions":
        return [json.dumps({"id": rid, "object": "text_completion", "created": created, "model": model,
                            "choices": [{"index": 0, "text": word, "logprobs": None,
                                         "finish_reason": "length" if last else None, "matched_stop": None}],
                            "usage": None})]
    out = []
    base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "usage": None}
    if i == 0:
        out.append(json.dumps({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                    "logprobs": None, "finish_reason": None,
                                                    "matched_stop": None}]}))
    out.append(json.dumps({**base, "choices": [{"index": 0, "delta": {"content": word}, "logprobs": None,
                                                "finish_reason": "length" if last else None,
                                                "matched_stop": None}]}))
    return out


def _error_body(kind: str, code: int) -> dict[str, Any]:
    message = f"capture worker: asked to answer {code}"
    if kind == "generate":
        return {"error": {"message": message}}
    return {"object": "error", "message": message, "type": "InternalServerError" if code >= 500 else "BadRequestError",
            "param": None, "code": code}
