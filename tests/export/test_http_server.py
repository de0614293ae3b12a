"""The sidecar's own HTTP server, spoken to with raw sockets: bad headers, half-sent requests, bad requests."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from monitor.config import parse_config
from monitor.sidecar import Sidecar

TOKEN = "s3cr3t-t0k3n"


async def _sidecar(header_timeout: float = 10.0, status=None) -> tuple[Sidecar, int]:
    """A sidecar serving on a free port; `status(real_status)` replaces what /api/v1/status answers."""
    cfg = parse_config({"sidecar": {"api_bearer_token": TOKEN, "http_header_timeout_seconds": header_timeout},
                        "deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": []}]})
    sc = Sidecar(cfg)
    if status is not None:
        real = sc.status
        sc.status = lambda: status(real)  # type: ignore[method-assign]

        async def for_api(only=None):  # what /api/v1/status reads (built in slices in the sidecar)
            return status(real)
        sc.status_for_api = for_api  # type: ignore[method-assign]
    return sc, await sc.start_http("127.0.0.1", 0)


async def _exchange(port: int, data: bytes, *, wait: float = 10.0) -> bytes:
    """Send `data` and read until the server closes the connection (or `wait` passes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), wait)
    finally:
        writer.close()


def _status_line(answer: bytes) -> str:
    return answer.split(b"\r\n", 1)[0].decode()


def _get(path: str, *headers: bytes) -> bytes:
    return b"".join([f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode(),
                     *(h + b"\r\n" for h in headers), b"\r\n"])


@pytest.mark.parametrize("header, expected", [
    (b"Authorization: Bearer \xff\xfe", "401"),  # not UTF-8: was a 500 with a traceback
    (b"Authorization: Bearer " + TOKEN.encode() + b"\xff", "401"),
    (b"Authorization: \xe9t\xe9", "401"),
    (b"Authorization: Bearer " + TOKEN.encode(), "200"),
    (b"Authorization: bearer " + TOKEN.encode(), "200"),  # the scheme is case-insensitive (RFC 7235)
    (b"Authorization: BEARER  " + TOKEN.encode(), "200"),
    (b"Authorization: Basic " + TOKEN.encode(), "401"),
    (b"Authorization: Bearer", "401"),
])
def test_authorization_header_is_a_401_or_accepted_never_a_500(header, expected, caplog):
    async def go():
        sc, port = await _sidecar()
        try:
            return await _exchange(port, _get("/api/v1/status", header))
        finally:
            await sc.close()

    with caplog.at_level(logging.DEBUG):
        answer = asyncio.run(go())
    assert _status_line(answer).split()[1] == expected, answer[:200]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_half_sent_requests_are_closed_after_the_header_timeout_and_others_still_served():
    async def go():
        sc, port = await _sidecar(header_timeout=0.5)
        try:
            t0 = time.monotonic()
            partial = asyncio.create_task(_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"))
            # A trickler: one header byte every 0.1 s would never finish its request.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\n")

            async def trickle():
                for _ in range(100):
                    writer.write(b"X")
                    await writer.drain()
                    await asyncio.sleep(0.1)

            trickling = asyncio.create_task(trickle())
            trickled = await asyncio.wait_for(reader.read(), 10)
            trickle_closed = time.monotonic() - t0
            trickling.cancel()
            writer.close()
            half = await partial
            half_closed = time.monotonic() - t0
            whole = await _exchange(port, _get("/healthz"))
            return half, half_closed, trickled, trickle_closed, whole
        finally:
            await sc.close()

    half, half_closed, trickled, trickle_closed, whole = asyncio.run(go())
    assert half == b"" and trickled == b""  # closed with no answer
    assert half_closed < 5 and trickle_closed < 5  # 0.5 s timeout; generous on a busy machine
    assert _status_line(whole) == "HTTP/1.1 200 OK"


def test_a_kept_alive_connection_must_send_its_next_request_in_time_too():
    async def go():
        sc, port = await _sidecar(header_timeout=0.5)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            first = await asyncio.wait_for(reader.readuntil(b'{"status": "ok"}'), 5)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the second one never finishes
            t0 = time.monotonic()
            rest = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return first, rest, time.monotonic() - t0
        finally:
            await sc.close()

    first, rest, took = asyncio.run(go())
    assert _status_line(first) == "HTTP/1.1 200 OK" and rest == b"" and took < 5


def test_a_slow_answer_is_not_cut_by_the_header_timeout():
    def slow_status(real):
        time.sleep(0.6)  # longer than the header timeout, after the request arrived whole
        return real()

    async def go():
        sc, port = await _sidecar(header_timeout=0.3, status=slow_status)
        try:
            return await _exchange(port, _get("/api/v1/status", b"Authorization: Bearer " + TOKEN.encode()))
        finally:
            await sc.close()

    answer = asyncio.run(go())
    assert _status_line(answer) == "HTTP/1.1 200 OK" and b'"deployments"' in answer


@pytest.mark.parametrize("request_bytes", [
    b"GET /healthz HTTP/1.1\r\nHost x\r\n\r\n",  # header without a colon
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",  # TLS to a plain port
])
def test_bad_requests_get_a_400_and_one_info_line_not_an_error_with_a_traceback(request_bytes, caplog):
    async def go():
        sc, port = await _sidecar()
        try:
            return await _exchange(port, request_bytes)
        finally:
            await sc.close()

    with caplog.at_level(logging.DEBUG):
        answer = asyncio.run(go())
    assert answer == b"" or _status_line(answer).split()[1] == "400"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
    assert not [r for r in caplog.records if r.exc_info]
    lines = [r.getMessage() for r in caplog.records if "bad request" in r.getMessage() or "Error handling" in r.getMessage()]
    assert len(lines) <= 1 and all("\n" not in m for m in lines)


def test_a_bug_in_a_handler_is_still_an_error_with_its_traceback(caplog):
    def broken(real):
        raise RuntimeError("boom")

    async def go():
        sc, port = await _sidecar(status=broken)
        try:
            return await _exchange(port, _get("/api/v1/status", b"Authorization: Bearer " + TOKEN.encode()))
        finally:
            await sc.close()

    with caplog.at_level(logging.DEBUG):
        answer = asyncio.run(go())
    assert _status_line(answer).split()[1] == "500"
    assert [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]


def test_a_bad_request_log_line_never_quotes_the_authorization_header(caplog):
    bad = b"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\x01\r\n\r\n"

    async def go():
        sc, port = await _sidecar()
        try:
            return await _exchange(port, bad)
        finally:
            await sc.close()

    with caplog.at_level(logging.DEBUG):
        answer = asyncio.run(go())
    assert _status_line(answer).split()[1] == "400"
    lines = [r.getMessage() for r in caplog.records if "bad request" in r.getMessage()]
    assert len(lines) == 1 and "Authorization: Bearer ***" in lines[0], lines
    assert not [r for r in caplog.records if TOKEN in r.getMessage()]
