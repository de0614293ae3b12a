"""Fetch one exposition over HTTP: bounded in time and size, never raising.

`Accept` asks for text 0.0.4 first: prometheus_client >= 0.23 answers an OpenMetrics request
without `escaping=` by rewriting `sglang:` to `sglang_` (client_python#1177). The parser takes
both spellings anyway, but the plain text keeps names identical to SGLang's source and docs.
"""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

import aiohttp

ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
USER_AGENT = "sglang-slo-monitor/0.1"
CHUNK = 64 * 1024


class FetchResult(NamedTuple):
    ok: bool
    status: int | None
    content_type: str
    text: str | None
    error: str | None
    duration_seconds: float
    bytes: int


def _fail(error: str, started: float, status: int | None = None, size: int = 0, ctype: str = "") -> FetchResult:
    return FetchResult(False, status, ctype, None, error, time.perf_counter() - started, size)


async def _read_limited(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes | None:
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(CHUNK):
        buf += chunk
        if len(buf) > max_bytes:
            return None
    return bytes(buf)


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    bearer_token: str | None = None,
) -> FetchResult:
    """GET `url`. The whole exchange (connect, headers, body) must finish within `timeout`, so
    a target that trickles bytes fails like one that never answers."""
    started = time.perf_counter()
    headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": USER_AGENT}
    if bearer_token:
        headers["Authorization"] = f"Bearer {bearer_token}"

    async def _go() -> FetchResult:
        async with session.get(url, headers=headers, allow_redirects=True) as resp:
            ctype = resp.headers.get("Content-Type", "")
            declared = resp.content_length
            if declared is not None and declared > max_bytes:
                return _fail(f"response of {declared} bytes exceeds the limit of {max_bytes}", started,
                             resp.status, declared, ctype)
            # A declared, uncompressed length within the limit is read in one allocation; anything
            # else chunk by chunk, so an endless body or a gzip bomb is cut at the limit.
            plain = declared is not None and not resp.headers.get("Content-Encoding")
            body = await resp.read() if plain else await _read_limited(resp, max_bytes)
            if body is None:
                return _fail(f"response exceeds the limit of {max_bytes} bytes (cut)", started, resp.status,
                             max_bytes, ctype)
            if resp.status != 200:
                snippet = body[:300].decode("utf-8", "replace").strip().replace("\n", " ")
                return _fail(f"HTTP {resp.status}: {snippet}" if snippet else f"HTTP {resp.status}", started,
                             resp.status, len(body), ctype)
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as err:
                return _fail(f"body is not UTF-8 (byte {err.start})", started, resp.status, len(body), ctype)
            return FetchResult(True, resp.status, ctype, text, None, time.perf_counter() - started, len(body))

    try:
        return await asyncio.wait_for(_go(), timeout)
    except asyncio.TimeoutError:
        return _fail(f"timed out after {timeout:g}s", started)
    except aiohttp.ClientConnectorError as err:
        return _fail(f"connection failed: {err.os_error.strerror if err.os_error else err}", started)
    except aiohttp.ClientError as err:
        return _fail(f"{type(err).__name__}: {err}", started)
    except OSError as err:
        return _fail(f"{type(err).__name__}: {err}", started)
