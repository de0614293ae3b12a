"""A built-in load generator shaped like the recipe's `bench_serving` command, over real HTTP.

`concurrency` clients each send a streamed `POST /generate` (bench_serving's `--backend sglang` body: text
prompt, `max_new_tokens`, `ignore_eos`), read the stream to `[DONE]`, and send the next one: a closed
loop at `--max-concurrency`, with `--random-input-len`/`--random-output-len`/`--random-range-ratio`
lengths. Prompts are words of the emulator's vocabulary; the first `prefix_share` of every prompt is the
same text, so the servers' prefix caches hit as often as the recipe's dataset makes them (`prefix90`).

Streams are read as the SSE format says (`sse_data`): a line starting with `:` is a comment and is skipped.
smg 1.13 sends one, `: ping`, after 15 s without output (`--sse-keepalive-secs`), so a request whose first
token takes longer reaches the client with pings before its first chunk; SGLang 0.5.23's bench_serving
fails such a request (docs/bench_serving.md), this generator must not.

It talks to a gateway (the real sglang-router in front of the deployment). With none it talks to the
servers itself: round-robin over mixed servers, or for a PD pair as a gateway does, the same body with
`bootstrap_host/port/room` to a prefill and a decode server, streaming the decode side.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from monitor.config import Deployment
from monitor.emulate.model import DEFAULT_INPUT, DEFAULT_OUTPUT, recipe_concurrency

log = logging.getLogger(__name__)
DEFAULT_CONCURRENCY = 4
BOOTSTRAP_PORT = 8998
RETRY_SECONDS = 1.0  # after a failed request (server down, gateway restarting)


@dataclass(frozen=True)
class LoadShape:
    concurrency: int
    input_tokens: int
    output_tokens: int
    range_ratio: float = 1.0
    prefix_share: float = 0.0

    @classmethod
    def from_deployment(cls, dep: Deployment) -> LoadShape:
        """The recipe's bench_serving command for this row, or its dataset and a small concurrency."""
        bench = dep.launch.get("bench") if isinstance(dep.launch, dict) else None
        bench = bench if isinstance(bench, dict) else {}

        def num(key: str, default: float) -> float:
            try:
                return float(bench.get(key) or default)
            except (TypeError, ValueError):
                return default

        return cls(concurrency=recipe_concurrency(dep) or DEFAULT_CONCURRENCY,
                   input_tokens=int(num("random_input_len", dep.input_tokens or DEFAULT_INPUT)),
                   output_tokens=int(num("random_output_len", dep.output_tokens or DEFAULT_OUTPUT)),
                   range_ratio=min(max(num("random_range_ratio", 1.0), 0.0), 1.0),
                   prefix_share=dep.prefix_cache_hit or 0.0)

    def scaled(self, factor: float) -> LoadShape:
        return LoadShape(max(1, round(self.concurrency * factor)), self.input_tokens, self.output_tokens,
                         self.range_ratio, self.prefix_share)


def draw_length(rng: random.Random, full: int, range_ratio: float) -> int:
    """A random-dataset length: uniform in [full x range_ratio, full], as bench_serving draws them."""
    lo = max(1, int(full * range_ratio))
    return rng.randint(lo, max(full, lo))


@dataclass
class LoadStats:
    """What the clients saw (bench_serving's definitions: TTFT to the first chunk, TPOT from the first to the
    last chunk per token after the first)."""

    sent: int = 0
    completed: int = 0
    failed: int = 0
    tokens: int = 0
    ttft_sum: float = 0.0
    tpot_sum: float = 0.0
    tpot_count: int = 0
    chunks: int = 0
    last_error: str | None = None
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, r: Reply) -> None:
        self.completed += 1
        self.tokens += r.tokens
        self.chunks += r.chunks
        self.ttft_sum += r.ttft
        if r.tokens > 1:
            self.tpot_sum += (r.latency - r.ttft) / (r.tokens - 1)
            self.tpot_count += 1


@dataclass(frozen=True)
class Reply:
    tokens: int
    ttft: float
    latency: float
    chunks: int = 0  # SSE chunks with output (a late server sends several tokens in one)


@dataclass(frozen=True)
class Servers:
    """Where requests go without a gateway: mixed servers, or PD prefill and decode servers."""

    mixed: tuple[str, ...] = ()
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()


class LoadGenerator:
    def __init__(self, name: str, shape: LoadShape, *, gateway: str | None = None, servers: Servers | None = None,
                 seed: int = 0) -> None:
        if gateway is None and servers is None:
            raise ValueError("a load generator needs a gateway URL or the servers to play the gateway for")
        self.name = name
        self.shape = shape
        self.gateway = gateway.rstrip("/") if gateway else None
        self.servers = servers or Servers()
        self.rng = random.Random(seed)
        self.stats = LoadStats()
        self._rooms = itertools.count(self.rng.randrange(1 << 20) << 20)
        self._rr = itertools.count()
        self._prefix = [f"w{self.rng.randrange(2, 2000)}" for _ in range(int(shape.input_tokens * shape.prefix_share))]

    def body(self) -> dict[str, Any]:
        """bench_serving's `async_request_sglang_generate` payload for one random-ids row."""
        prompt_len = draw_length(self.rng, self.shape.input_tokens, self.shape.range_ratio)
        shared = min(len(self._prefix), prompt_len)
        words = self._prefix[:shared] + [f"w{self.rng.randrange(2, 2000)}" for _ in range(prompt_len - shared)]
        return {"text": " ".join(words), "stream": True, "lora_path": None, "return_logprob": False,
                "logprob_start_len": -1,
                "sampling_params": {"temperature": 0.0,
                                    "max_new_tokens": draw_length(self.rng, self.shape.output_tokens,
                                                                  self.shape.range_ratio),
                                    "ignore_eos": True}}

    async def run(self, stop: asyncio.Event) -> None:
        """`concurrency` closed-loop clients until `stop` is set."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with aiohttp.ClientSession(timeout=timeout, read_bufsize=1 << 20) as session:
            clients = [asyncio.create_task(self._client(session, stop)) for _ in range(self.shape.concurrency)]
            try:
                await stop.wait()
            finally:
                for c in clients:
                    c.cancel()
                await asyncio.gather(*clients, return_exceptions=True)

    async def _client(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.stats.sent += 1
            try:
                self.stats.add(await self._one(session, self.body()))
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, OSError, ValueError, asyncio.TimeoutError) as err:
                self.stats.failed += 1
                kind = type(err).__name__
                self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1
                self.stats.last_error = f"{kind}: {err}"
                await asyncio.sleep(RETRY_SECONDS)

    async def _one(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> Reply:
        i = next(self._rr)
        if self.gateway is not None:
            return await _stream(session, self.gateway + "/generate", body)
        if self.servers.mixed:
            return await _stream(session, self.servers.mixed[i % len(self.servers.mixed)] + "/generate", body)
        prefill = self.servers.prefill[i % len(self.servers.prefill)]
        decode = self.servers.decode[i % len(self.servers.decode)]
        half = {**body, "bootstrap_host": prefill.split("://", 1)[-1].rsplit(":", 1)[0],
                "bootstrap_port": BOOTSTRAP_PORT, "bootstrap_room": next(self._rooms)}
        first = asyncio.create_task(_stream(session, prefill + "/generate", half))
        try:
            tokens = await _stream(session, decode + "/generate", half)
        finally:
            await asyncio.gather(first, return_exceptions=True)
        return tokens


def sse_data(line: bytes) -> bytes | None:
    """The value of an SSE `data` field on one line of a stream, or None for any other line.

    As the SSE format defines it: a line starting with `:` is a comment (smg 1.13's keep-alive `: ping`), one
    space after `data:` is not part of the value, and other fields (`event:`, `id:`, `retry:`) and blank lines
    carry no data."""
    line = line.rstrip(b"\r\n")
    if not line.startswith(b"data:"):
        return None
    value = line[5:]
    return value[1:] if value.startswith(b" ") else value


async def _stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Reply:
    """Send one streamed request and read it to the end: the completion tokens it reported and its timing."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    first = end = 0.0
    chunks = 0
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            raise ValueError(f"HTTP {resp.status} from {url}: {(await resp.text())[:200]}")
        last = b""
        async for line in resp.content:
            data = sse_data(line)
            if data is not None and data.strip() and data.strip() != b"[DONE]":
                last = data
                chunks += 1
                end = loop.time()
                first = first or end
        if not last:
            raise ValueError(f"{url}: the stream ended without a chunk")
        chunk = json.loads(last)
        meta = chunk.get("meta_info") or {}
        reason = meta.get("finish_reason") or {}
        if reason.get("type") == "abort" or "error" in chunk:
            raise ValueError(f"{url}: aborted: {reason.get('message') or last[:200]!r}")
        return Reply(int(meta.get("completion_tokens") or 0), first - start, end - start, chunks)
