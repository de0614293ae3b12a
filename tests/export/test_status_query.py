"""/api/v1/status filters and paging (monitor/export/status_query.py): the query grammar, the selection,
and a live sidecar answering a large fleet in bounded pages while a small fleet's answer is unchanged."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from monitor.config import parse_config
from monitor.export.status_query import (
    DEFAULT_LIMIT,
    QueryError,
    StatusQuery,
    parse_query,
    select_now,
    state_of,
)
from monitor.scrape.result import ScrapeResult
from monitor.sidecar import Sidecar
from monitor.status_model import StatusResponse


def _config(n: int):
    return parse_config({"deployments": [
        {"name": f"{'kimi' if i % 2 else 'qwen'}-{i:04d}", "tpot_target_seconds": 0.05,
         "targets": [{"role": "server", "url": f"http://10.0.0.1:{1000 + i}/metrics"}]} for i in range(n)]})


def _sidecar(n: int, down: tuple[int, ...] = (), breaching: tuple[int, ...] = ()) -> Sidecar:
    sc = Sidecar(_config(n))
    for i in down:
        dep = sc.config.deployments[i]
        sc.observations.apply(ScrapeResult(dep.name, dep.targets[0], 0.0, 1.0, error="connection refused"))
    if breaching:  # the SLI state comes from engines the test does not feed: mark it on the answer
        real = sc.status
        marked = {sc.config.deployments[i].name for i in breaching}

        def status(only=None) -> StatusResponse:
            resp = real(only)
            for d in resp.deployments:
                for s in d.slis:
                    s.breaching = d.name in marked
            return resp
        sc.status = status  # type: ignore[method-assign]
    return sc


def _names(sc: Sidecar) -> list[str]:
    return [d.name for d in sc.config.deployments]


def _select(sc: Sidecar, **params: str | list[str]) -> StatusResponse:
    items = [(k, v) for k, vs in params.items() for v in (vs if isinstance(vs, list) else [vs])]
    return select_now(parse_query(items), sc.status, lambda: _names(sc))


@pytest.mark.parametrize("items, message", [
    ([("deployments", "x")], "unknown query parameter 'deployments'"),
    ([("state", "BREACHING")], "state='BREACHING' is not one of breaching, down, ok"),
    ([("limit", "0")], "limit='0' is not a whole number from 1 to 1000"),
    ([("limit", "1001")], "from 1 to 1000"),
    ([("limit", "ten")], "from 1 to 1000"),
    ([("limit", "5"), ("limit", "6")], "limit given 2 times"),
    ([("deployment", "")], "deployment= is empty"),
    ([("page_token", "")], "page_token= is empty"),
])
def test_a_bad_query_is_refused_with_what_was_wrong(items, message):
    with pytest.raises(QueryError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_query(items)


def test_repeated_deployment_and_state_parameters_are_all_kept():
    q = parse_query([("deployment", "kimi-*"), ("deployment", "qwen-0002"), ("state", "down"), ("state", "ok")])
    assert q == StatusQuery(deployment=["kimi-*", "qwen-0002"], state=["down", "ok"])


def test_a_small_fleets_plain_answer_is_the_unpaged_one_of_before():
    sc = _sidecar(DEFAULT_LIMIT)
    resp = _select(sc)
    assert resp.page is None and len(resp.deployments) == DEFAULT_LIMIT


def test_a_large_fleets_plain_answer_is_one_bounded_page_and_the_pages_cover_every_deployment_once():
    sc = _sidecar(2 * DEFAULT_LIMIT + 30)
    resp = _select(sc)
    assert len(resp.deployments) == DEFAULT_LIMIT and resp.page is not None
    assert resp.page.matching == 2 * DEFAULT_LIMIT + 30 and resp.page.next_page_token == _names(sc)[DEFAULT_LIMIT]
    seen, token = [d.name for d in resp.deployments], resp.page.next_page_token
    while token is not None:
        resp = _select(sc, page_token=token)
        seen += [d.name for d in resp.deployments]
        token = resp.page.next_page_token
    assert seen == _names(sc)


def test_a_page_builds_only_its_own_deployments():
    sc = _sidecar(300)
    built: list[int] = []
    real = sc.status

    def status(only=None):
        resp = real(only)
        built.append(len(resp.deployments))
        return resp
    resp = select_now(parse_query([("limit", "7")]), status, lambda: _names(sc))
    assert len(resp.deployments) == 7 and built == [7]


def test_deployment_globs_select_by_name_and_page_in_config_order():
    sc = _sidecar(20)
    resp = _select(sc, deployment=["kimi-000[1-5]", "qwen-0010"], limit="2")
    assert [d.name for d in resp.deployments] == ["kimi-0001", "kimi-0003"]
    assert resp.page.matching == 4 and resp.page.next_page_token == "kimi-0005"
    resp = _select(sc, deployment=["kimi-000[1-5]", "qwen-0010"], limit="2", page_token="kimi-0005")
    assert [d.name for d in resp.deployments] == ["kimi-0005", "qwen-0010"] and resp.page.next_page_token is None


def test_state_filters_select_down_and_breaching_deployments_and_page_over_them():
    sc = _sidecar(30, down=(3, 17), breaching=(5, 6, 17, 29))
    resp = _select(sc, state="down")
    assert [d.name for d in resp.deployments] == ["kimi-0003", "kimi-0017"]  # down wins over breaching
    resp = _select(sc, state="breaching", limit="2")
    assert [d.name for d in resp.deployments] == ["kimi-0005", "qwen-0006"] and resp.page.matching == 3
    resp = _select(sc, state="breaching", limit="2", page_token=resp.page.next_page_token)
    assert [d.name for d in resp.deployments] == ["kimi-0029"] and resp.page.next_page_token is None
    assert all(state_of(d) == "ok" for d in _select(sc, state="ok").deployments)
    assert _select(sc, state="ok").page.matching == 25


def test_a_page_token_this_query_cannot_select_is_refused():
    sc = _sidecar(10)
    with pytest.raises(QueryError, match="page_token 'nope' names no deployment this query selects"):
        _select(sc, page_token="nope")


def test_the_live_api_pages_a_large_fleet_filters_and_answers_400_on_a_bad_query():
    async def go():
        sc = _sidecar(DEFAULT_LIMIT + 50, down=(7,))
        port = await sc.start_http("127.0.0.1", 0)
        base = f"http://127.0.0.1:{port}/api/v1/status"
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(base) as r:
                    first = await r.json()
                async with s.get(base, params=[("state", "down")]) as r:
                    down = await r.json()
                async with s.get(base, params=[("limit", "x")]) as r:
                    bad = (r.status, await r.json())
            return first, down, bad
        finally:
            await sc.close()

    first, down, (code, error) = asyncio.run(go())
    assert len(first["deployments"]) == DEFAULT_LIMIT
    assert first["page"] == {"matching": DEFAULT_LIMIT + 50, "returned": DEFAULT_LIMIT, "limit": DEFAULT_LIMIT,
                             "next_page_token": f"{'kimi' if DEFAULT_LIMIT % 2 else 'qwen'}-{DEFAULT_LIMIT:04d}"}
    assert [d["name"] for d in down["deployments"]] == ["kimi-0007"]
    assert code == 400 and "limit='x'" in error["error"]


def test_the_live_answer_of_a_small_fleet_has_no_page_key():
    async def go():
        sc = _sidecar(3)
        port = await sc.start_http("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/api/v1/status") as r:
                return json.loads(await r.text())
        finally:
            await sc.close()

    body = asyncio.run(go())
    assert set(body) == {"sidecar", "deployments"} and len(body["deployments"]) == 3
