"""fetch(): dead, slow, trickling, huge, gzip'd and erroring targets, all without raising."""

from __future__ import annotations

import asyncio
import gzip

import aiohttp
import pytest
from aiohttp import web

from monitor.fetch import fetch
from tests.conftest import REAL_TEXT, ROUTER_500, free_port, serve_routes


def run(coro):
    return asyncio.run(coro)


def fetch_from(handler, **kwargs):
    """Serve `handler` at /metrics and fetch it once with `kwargs` (timeout, max_bytes)."""

    async def go():
        runner, base = await serve_routes({"/metrics": handler})
        try:
            async with aiohttp.ClientSession() as s:
                return await fetch(s, base + "/metrics", **kwargs)
        finally:
            await runner.cleanup()

    return run(go())


def test_accept_header_keeps_colon_names_and_gzip_is_decoded():
    seen = {}

    async def handler(request):
        seen["accept"] = request.headers["Accept"]
        body = gzip.compress(REAL_TEXT.read_bytes())
        return web.Response(body=body, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})

    res = fetch_from(handler, timeout=5, max_bytes=10_000_000)
    assert res.ok and "sglang:time_to_first_token_seconds_bucket" in res.text
    assert seen["accept"].startswith("text/plain;version=0.0.4") and "openmetrics" not in seen["accept"]


def test_dead_target_is_a_clean_failure():
    async def go():
        async with aiohttp.ClientSession() as s:
            return await fetch(s, f"http://127.0.0.1:{free_port()}/metrics", timeout=2, max_bytes=1000)

    res = run(go())
    assert not res.ok and "connection failed" in res.error


def test_trickling_target_times_out():
    async def handler(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(100):
            await resp.write(b"# trickle\n")
            await asyncio.sleep(0.1)
        return resp

    res = fetch_from(handler, timeout=0.5, max_bytes=10_000_000)
    assert not res.ok and "timed out after 0.5s" in res.error


@pytest.mark.parametrize("declare_length", [True, False])
def test_oversized_response_is_cut_at_the_limit(declare_length):
    big = b"x 1\n" * 300_000  # 1.2 MB

    async def handler(request):
        if declare_length:
            return web.Response(body=big)
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(0, len(big), 65536):
            await resp.write(big[i : i + 65536])
        return resp

    res = fetch_from(handler, timeout=5, max_bytes=100_000)
    assert not res.ok and "exceeds the limit of 100000" in res.error


def test_router_engine_metrics_500_keeps_its_body_in_the_error():
    async def handler(request):
        return web.Response(status=500, text=ROUTER_500.read_text())

    res = fetch_from(handler, timeout=5, max_bytes=100_000)
    assert not res.ok and res.status == 500 and "Label names should agree" in res.error


def test_hundred_megabyte_response_is_cut_without_reading_it_all():
    chunk = b"sglang:num_running_reqs 1\n" * 4000  # ~100 kB

    async def handler(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        try:
            for _ in range(1000):  # ~100 MB if read to the end
                await resp.write(chunk)
        except (ConnectionResetError, RuntimeError):
            pass
        return resp

    res = fetch_from(handler, timeout=20, max_bytes=8 * 1024 * 1024)
    assert not res.ok and "exceeds the limit" in res.error and res.bytes <= 8 * 1024 * 1024


def _redirecting(follow_redirects, *, same_origin: bool, status: int = 302):
    """/metrics redirects to /real on the same server, or to another server (another port) whose
    answer must never be fetched when not allowed, nor shown in the error."""
    hits = {"other": 0}

    async def other(request):
        hits["other"] += 1
        return web.Response(status=404, text="SECRET of a host nobody configured")

    async def go():
        other_runner, other_base = await serve_routes({"/secret": other})
        try:
            async def real(request):
                return web.Response(text=REAL_TEXT.read_text())

            async def redirect(request):
                where = "/real" if same_origin else f"{other_base}/secret"
                return web.Response(status=status, headers={"Location": where}, text="moved")

            runner, base = await serve_routes({"/metrics": redirect, "/real": real})
            try:
                async with aiohttp.ClientSession() as s:
                    return await fetch(s, base + "/metrics", timeout=5, max_bytes=10_000_000,
                                       follow_redirects=follow_redirects)
            finally:
                await runner.cleanup()
        finally:
            await other_runner.cleanup()

    return run(go()), hits["other"]


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirects_are_not_followed_by_default_and_nothing_of_the_other_host_is_shown(status):
    res, other_hits = _redirecting(False, same_origin=False, status=status)
    assert not res.ok and f"HTTP {status}: redirect to http://127.0.0.1:" in res.error
    assert "not followed" in res.error and "follow_redirects" in res.error
    assert other_hits == 0 and "SECRET" not in res.error


def test_follow_redirects_follows_on_the_same_origin_only():
    res, _ = _redirecting(True, same_origin=True)
    assert res.ok and "sglang:time_to_first_token_seconds_bucket" in res.text
    res, other_hits = _redirecting(True, same_origin=False)
    assert not res.ok and "redirect to another host or port" in res.error
    assert other_hits == 0 and "SECRET" not in res.error


def test_the_error_echo_is_short_and_one_printable_line():
    async def handler(request):
        return web.Response(status=503, text="overloaded\n\x1b[31m" + "x" * 5000)

    res = fetch_from(handler, timeout=5, max_bytes=100_000)
    assert res.error.startswith("HTTP 503: overloaded ") and "\x1b" not in res.error and "\n" not in res.error
    assert len(res.error) <= len("HTTP 503: ") + 200


@pytest.mark.parametrize("token", ["s3cret\n", "s3c\r\nX-Injected: 1", "s\x00cret"])
def test_a_token_that_cannot_go_into_a_header_is_a_failed_fetch_not_an_exception(token):
    """The config refuses such a token at load; a Target built in code still must not raise per scrape."""
    async def ok(request):
        return web.Response(text=REAL_TEXT.read_text())

    res = fetch_from(ok, timeout=2, max_bytes=10_000_000, bearer_token=token)
    assert not res.ok and res.error.startswith("request not sent: ") and "header" in res.error
    assert "s3c" not in res.error and "cret" not in res.error
