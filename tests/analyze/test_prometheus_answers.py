"""`analyze --prometheus` reads what a real HTTP server answers (issue #34 item 10): Prometheus's JSON parsed as
JSON (a 0.7 MB answer took 2.5 s through a YAML parser), an answer past the bound refused whole, and an answer of
the wrong shape or not JSON said in one line, never a traceback."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from monitor.analyze.prometheus import PromClient, PrometheusError


async def _serve(answer: bytes, status: int = 200) -> tuple[web.AppRunner, str]:
    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=answer, status=status, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query_range", handler)
    app.router.add_get("/api/v1/query", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def _ask(answer: bytes, *, instant: bool = False, max_bytes: int | None = None, status: int = 200):
    async def go():
        runner, url = await _serve(answer, status)
        try:
            async with aiohttp.ClientSession() as session:
                client = PromClient(url, session, 10.0, **({"max_bytes": max_bytes} if max_bytes else {}))
                if instant:
                    return await client.query("up", 100.0)
                return await client.query_range("up", 0.0, 100.0, 1.0)
        finally:
            await runner.cleanup()

    return asyncio.run(go())


def _matrix(series: int, points: int) -> bytes:
    result = [{"metric": {"__name__": "up", "i": str(i)}, "values": [[t, "1"] for t in range(points)]}
              for i in range(series)]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def test_a_large_json_answer_is_read_as_json():
    got = _ask(_matrix(50, 2000))  # ~2.4 MB: seconds through PyYAML, milliseconds as JSON
    assert len(got) == 50 and len(got[0][1]) == 2000 and got[0][0] == {"__name__": "up", "i": "0"}


def test_an_answer_over_the_bound_is_refused_in_one_line():
    with pytest.raises(PrometheusError, match=r"over 1 MiB: narrow the range") as err:
        _ask(_matrix(50, 2000), max_bytes=1024 * 1024)
    assert "Traceback" not in str(err.value)


@pytest.mark.parametrize("answer", [
    b'{"status": "success", "data": {"result": [{"metric": {}, "values": [[1, "x"]]}]}}',  # not a number
    b'{"status": "success", "data": {"result": [{"values": [[1, "1"]]}]}}',  # no metric
    b'{"status": "success", "data": {"result": "nope"}}',
    b'{"status": "success", "data": [1, 2]}',
    b'{"status": "success"}',
    b"[" * 100_000 + b"]" * 100_000,  # nesting deeper than any parser's recursion
    b"<html>not json</html>",
], ids=["value", "no-metric", "result-string", "data-list", "no-data", "deep", "html"])
def test_an_answer_of_another_shape_is_one_line_naming_the_url(answer):
    for instant in (False, True):
        with pytest.raises(PrometheusError) as err:
            _ask(answer, instant=instant)
        text = str(err.value)
        assert "127.0.0.1" in text and len(text.splitlines()) <= 2


def test_prometheus_s_own_error_is_shown():
    answer = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}).encode()
    with pytest.raises(PrometheusError, match="HTTP 400: parse error at char 3"):
        _ask(answer, status=400)
