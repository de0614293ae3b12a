"""The load generator reads SSE streams as the format defines them: smg 1.13's keep-alive comments before a
late first token are skipped (bench_serving 0.5.23 fails on them, docs/bench_serving.md), and TTFT is the
first chunk with data, not the first comment."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from monitor.conventions.names import GATEWAY_SMG
from monitor.emulate.loadgen import _stream, sse_data
from monitor.emulate.router import RouterProcess, gateway_argv
from monitor.emulate.topology import find_free_port
from tools.gateway_capture.worker import CaptureWorker

# What smg 1.13 sends on /generate when the worker is silent for --sse-keepalive-secs (recorded from the
# real binary: `: ping` then a blank line), then SGLang's chunks.
PING = b": ping\n\n"


def chunk(n: int, finished: bool = False, space: bool = True) -> bytes:
    meta = {"id": "r1", "finish_reason": {"type": "length", "length": n} if finished else None,
            "prompt_tokens": 4, "completion_tokens": n}
    return b"data:" + (b" " if space else b"") + json.dumps({"text": "w " * n, "meta_info": meta}).encode() + b"\n\n"


async def serve(parts: list[bytes | float]) -> tuple[web.AppRunner, str]:
    """A server answering POST /generate with `parts`: bytes are written, a float is a pause in seconds."""
    async def generate(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in parts:
            if isinstance(part, float):
                await asyncio.sleep(part)
            else:
                await resp.write(part)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = find_free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/generate"


async def read(parts: list[bytes | float]):
    runner, url = await serve(parts)
    try:
        async with aiohttp.ClientSession() as session:
            return await _stream(session, url, {"text": "x", "stream": True})
    finally:
        await runner.cleanup()


def test_sse_data_skips_comments_and_other_fields_and_reads_data_with_or_without_the_space():
    assert sse_data(b": ping\n") is None
    assert sse_data(b":\n") is None
    assert sse_data(b"\n") is None
    assert sse_data(b"event: ping\r\n") is None
    assert sse_data(b'data: {"a": 1}\n') == b'{"a": 1}'
    assert sse_data(b'data:{"a": 1}\r\n') == b'{"a": 1}'
    assert sse_data(b"data: [DONE]\n") == b"[DONE]"


def test_keepalive_pings_before_the_first_token_are_skipped_and_ttft_is_the_first_data_chunk():
    reply = asyncio.run(read([PING, 0.3, PING, 0.3, chunk(1), chunk(2), chunk(3, finished=True),
                              b"data: [DONE]\n\n"]))
    assert reply.tokens == 3 and reply.chunks == 3
    assert reply.ttft >= 0.6  # the pings came earlier: they are not the first token


def test_a_data_field_without_the_optional_space_is_read():
    reply = asyncio.run(read([chunk(1, space=False), chunk(2, finished=True, space=False), b"data:[DONE]\n\n"]))
    assert reply.tokens == 2 and reply.chunks == 2


def test_a_stream_of_pings_only_is_a_failed_request_that_says_so():
    with pytest.raises(ValueError, match="without a chunk"):
        asyncio.run(read([PING, PING, b"data: [DONE]\n\n"]))


def test_the_load_generator_reads_a_real_smg_stream_that_carries_keepalive_pings():
    """smg 1.13 in front of a worker whose first token comes after 2.5 s, pinging every second."""
    async def main():
        worker = await CaptureWorker("server", "m", "").start()
        port, metrics_port = find_free_port(), find_free_port()
        argv = gateway_argv(GATEWAY_SMG, worker_urls=[worker.url], port=port, metrics_port=metrics_port,
                            extra=["--sse-keepalive-secs", "1"])
        router = RouterProcess(argv, port, metrics_port, expected_workers=1)
        await asyncio.to_thread(router.start)
        try:
            async with aiohttp.ClientSession() as session:
                body = {"text": "[first=2.5] [tokens=4] hello", "stream": True, "sampling_params": {"max_new_tokens": 4}}
                async with session.post(router.url + "/generate", json=body) as resp:
                    raw = await resp.read()
                reply = await _stream(session, router.url + "/generate", body)
        finally:
            await asyncio.to_thread(router.stop)
            await worker.stop()
        return raw, reply

    raw, reply = asyncio.run(main())
    assert raw.startswith(PING)  # the real gateway does send the comment this test is about
    assert reply.tokens == 4 and reply.ttft >= 2.5
