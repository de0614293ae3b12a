"""Fetch one exposition over HTTP: bounded in time and size, never raising.

`Accept` asks for text 0.0.4 first: prometheus_client >= 0.23 answers an OpenMetrics request
without `escaping=` by rewriting `sglang:` to `sglang_` (client_python#1177). The parser takes
both spellings anyway, but the plain text keeps names identical to SGLang's source and docs.

The body comes back as bytes: the parser skips what it does not read without decoding it. `Accept-Encoding:
gzip` is asked for only where it pays (`compression`): prometheus_client gzips a 1.5 MB exposition at
level 9 for every scrape that asks (~20 ms of the server's CPU), and on loopback inflating costs the
sidecar more than the bytes it saves (bench/RESULTS.md).

Redirects are not followed (Prometheus's default). A target with `follow_redirects: true` follows
them only on its own origin (scheme, host, port): the sidecar never fetches from a host nobody
configured, and an error shows the first bytes of a body only when it came from that origin, so
/api/v1/status cannot be turned into a reader of other hosts.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import time
from collections.abc import Awaitable
from typing import Any, NamedTuple, TypeVar

import aiohttp
from yarl import URL

ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
USER_AGENT = "sglang-slo-monitor/0.1"
CHUNK = 64 * 1024
MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
ERROR_BODY_CHARS = 200  # of a non-200 answer, shown in the target's error
T = TypeVar("T")
_timeout = getattr(asyncio, "timeout", None)  # Python >= 3.11


async def bounded(aw: Awaitable[T], seconds: float) -> T:
    """`await aw`, raising asyncio.TimeoutError after `seconds`. Python >= 3.11's `asyncio.timeout` bounds
    it in place; `asyncio.wait_for` (3.10) wraps it in a Task of its own, which on the scrape path is
    CPU per scrape for nothing."""
    if _timeout is None:
        return await asyncio.wait_for(aw, seconds)
    async with _timeout(seconds):
        return await aw


class RedirectRefused(Exception):
    """A redirect the target's settings do not allow; the message says which and why."""


def _origin(url: URL) -> tuple[str, str | None, int | None]:
    return url.scheme, url.host, url.port


async def open_response(session: aiohttp.ClientSession, url: str, *, follow_redirects: bool,
                        **kwargs: Any) -> aiohttp.ClientResponse:
    """GET `url`, following redirects only when allowed and only on the URL's own origin.

    The caller owns the returned response (`async with`); a refused redirect raises RedirectRefused."""
    start = current = URL(url)
    for _ in range(MAX_REDIRECTS + 1):
        resp = await session.get(current, allow_redirects=False, **kwargs)
        if resp.status not in REDIRECT_STATUSES:
            return resp
        resp.release()
        location = resp.headers.get("Location")
        if not location:
            raise RedirectRefused(f"HTTP {resp.status} without a Location header")
        nxt = current.join(URL(location))
        shown = str(nxt.with_query(None).with_fragment(None))[:120]
        if not follow_redirects:
            raise RedirectRefused(f"HTTP {resp.status}: redirect to {shown} not followed (set follow_redirects: "
                                  "true on the target to follow redirects on its own host)")
        if _origin(nxt) != _origin(start):
            raise RedirectRefused(f"HTTP {resp.status}: redirect to another host or port ({shown}) not followed")
        current = nxt
    raise RedirectRefused(f"more than {MAX_REDIRECTS} redirects")


class FetchResult(NamedTuple):
    ok: bool
    status: int | None
    content_type: str
    body: bytes | None  # checked to be UTF-8
    error: str | None
    duration_seconds: float
    bytes: int

    @property
    def text(self) -> str | None:
        return None if self.body is None else self.body.decode("utf-8")


@functools.lru_cache(maxsize=4096)  # asked once per scrape of each target: parsing the URL again is CPU for nothing
def is_loopback(url: str) -> bool:
    """Whether `url` names this host (127.0.0.0/8, ::1, localhost): no network between the two ends."""
    host = URL(url).host or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fail(error: str, started: float, status: int | None = None, size: int = 0, ctype: str = "") -> FetchResult:
    return FetchResult(False, status, ctype, None, error, time.perf_counter() - started, size)


async def read_limited(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes | None:
    """The body, or None past `max_bytes` (read no further): an endless body or a gzip bomb is cut there."""
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
    follow_redirects: bool = False,
    compression: bool = True,
) -> FetchResult:
    """GET `url`. The whole exchange (connect, headers, body) must finish within `timeout`, so
    a target that trickles bytes fails like one that never answers. `compression`: ask for gzip."""
    started = time.perf_counter()
    headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip" if compression else "identity", "User-Agent": USER_AGENT}
    if bearer_token:
        headers["Authorization"] = f"Bearer {bearer_token}"

    async def _go() -> FetchResult:
        async with await open_response(session, url, follow_redirects=follow_redirects, headers=headers) as resp:
            ctype = resp.headers.get("Content-Type", "")
            declared = resp.content_length
            if declared is not None and declared > max_bytes:
                return _fail(f"response of {declared} bytes exceeds the limit of {max_bytes}", started,
                             resp.status, declared, ctype)
            # A declared, uncompressed length within the limit is read in one allocation; anything
            # else chunk by chunk, so an endless body or a gzip bomb is cut at the limit.
            plain = declared is not None and not resp.headers.get("Content-Encoding")
            body = await resp.read() if plain else await read_limited(resp, max_bytes)
            if body is None:
                return _fail(f"response exceeds the limit of {max_bytes} bytes (cut)", started, resp.status,
                             max_bytes, ctype)
            if resp.status != 200:
                # Short, one line, printable: the answer of the configured target (never another
                # host's, see open_response), e.g. the router's reason for a 500.
                head = body[: ERROR_BODY_CHARS * 4].decode("utf-8", "replace")
                snippet = "".join(c if c.isprintable() else " " for c in head).strip()[:ERROR_BODY_CHARS]
                return _fail(f"HTTP {resp.status}: {snippet}" if snippet else f"HTTP {resp.status}", started,
                             resp.status, len(body), ctype)
            if not body.isascii():  # ASCII (the usual case) is UTF-8: checked without decoding
                try:
                    body.decode("utf-8")
                except UnicodeDecodeError as err:
                    return _fail(f"body is not UTF-8 (byte {err.start})", started, resp.status, len(body), ctype)
            return FetchResult(True, resp.status, ctype, body, None, time.perf_counter() - started, len(body))

    try:
        return await bounded(_go(), timeout)
    except asyncio.TimeoutError:
        return _fail(f"timed out after {timeout:g}s", started)
    except RedirectRefused as err:
        return _fail(str(err), started)
    except aiohttp.ClientConnectorError as err:
        return _fail(f"connection failed: {err.os_error.strerror if err.os_error else err}", started)
    except aiohttp.ClientError as err:
        return _fail(f"{type(err).__name__}: {err}", started)
    except OSError as err:
        return _fail(f"{type(err).__name__}: {err}", started)
    except ValueError as err:
        # The HTTP client refuses what cannot go on the wire (a header value with a newline: a bearer
        # token built in code; the config refuses one at load). Its message never repeats the value.
        return _fail(f"request not sent: {err}", started)
