"""What `/api/v1/status?...` selects: deployments by name (globs) and state, and one page of them.

Query parameters (all optional; unknown ones are an error, never ignored):

- `deployment=GLOB`, repeatable: deployments whose name matches any of them (`fnmatch` case-sensitive
  globs: `*`, `?`, `[...]`);
- `state=breaching|down|ok`, repeatable: `breaching` has an SLI (or availability) under its objective
  in its shortest window, `down` has a scraped target that is down, `ok` is neither;
- `limit=N` (1..MAX_LIMIT) and `page_token=T` (from the previous answer's `page.next_page_token`).

Pages follow the config's order of deployments. The answer to a request without parameters is exactly
what it was before paging existed (no `page` object) as long as the fleet has at most DEFAULT_LIMIT
deployments; a larger fleet's first page holds DEFAULT_LIMIT, so the default answer stays bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Literal, Protocol

from pydantic import BaseModel

from monitor.status_model import DeploymentStatus, PageInfo, StatusResponse

DEFAULT_LIMIT = 100  # ~0.4 MB of JSON with 6 h windows (the 2,000-deployment answer was 8.9 MB)
MAX_LIMIT = 1000
State = Literal["breaching", "down", "ok"]
STATES: tuple[State, ...] = ("breaching", "down", "ok")
PARAMS = ("deployment", "state", "limit", "page_token")


class QueryError(ValueError):
    """A query that cannot be answered: the message says which parameter and what was expected."""


class StatusQuery(BaseModel):
    deployment: list[str] = []
    state: list[State] = []
    limit: int | None = None
    page_token: str | None = None

    def names(self, all_names: Sequence[str]) -> list[str]:
        return [n for n in all_names if not self.deployment or any(fnmatchcase(n, g) for g in self.deployment)]

    @property
    def plain(self) -> bool:
        return not (self.deployment or self.state or self.limit is not None or self.page_token is not None)


class StatusSource(Protocol):
    def __call__(self, only: Collection[str] | None = None) -> StatusResponse: ...


class AsyncStatusSource(Protocol):
    """The status built without holding the event loop (`Sidecar.status_for_api`): a 1,000-deployment build
    is ~0.5 s of CPU, which on the loop kept /healthz and every scrape waiting."""

    def __call__(self, only: Collection[str] | None = None) -> Awaitable[StatusResponse]: ...


def parse_query(params: Mapping[str, str] | Sequence[tuple[str, str]]) -> StatusQuery:
    """Query parameters (a multidict's items, repeated keys kept) -> StatusQuery, or QueryError."""
    items = list(params.items()) if isinstance(params, Mapping) else list(params)
    unknown = sorted({k for k, _ in items} - set(PARAMS))
    if unknown:
        raise QueryError(f"unknown query parameter {', '.join(map(repr, unknown))}; known: {', '.join(PARAMS)}")
    values: dict[str, list[str]] = {}
    for k, v in items:
        values.setdefault(k, []).append(v)
    for single in ("limit", "page_token"):
        if len(values.get(single, [])) > 1:
            raise QueryError(f"{single} given {len(values[single])} times; give it once")
    bad = [s for s in values.get("state", []) if s not in STATES]
    if bad:
        raise QueryError(f"state={bad[0]!r} is not one of {', '.join(STATES)}")
    if any(not g for g in values.get("deployment", [])):
        raise QueryError("deployment= is empty; give a name or a glob such as kimi-*")
    limit = None
    if "limit" in values:
        limit = _whole_number(values["limit"][0], "limit", 1, MAX_LIMIT)
    token = values.get("page_token", [None])[0]
    if token == "":
        raise QueryError("page_token= is empty; pass the previous answer's page.next_page_token, or leave it out")
    return StatusQuery(deployment=values.get("deployment", []), state=values.get("state", []),  # type: ignore[arg-type]
                       limit=limit, page_token=token)


def _whole_number(text: str, name: str, low: int, high: int) -> int:
    """`text` as a whole number in low..high, written in ASCII digits only; else QueryError. str.isdigit()
    alone let '²' through to int() (a ValueError, an HTTP 500) and '１２' or '٣' in as 12 and 3; int() of
    more than 4,300 digits raises too, so the length is bounded before int() reads it."""
    digits = text.lstrip("0") if text.isascii() and text.isdigit() else None
    if digits is None or len(digits) > len(str(high)) or not low <= int(digits or "0") <= high:
        shown = repr(text) if len(text) <= 20 else f"{text[:20]!r}... ({len(text)} characters)"
        raise QueryError(f"{name}={shown} is not a whole number from {low} to {high}")
    return int(digits)


def state_of(d: DeploymentStatus) -> State:
    if any(t.scrapes and not t.up and not t.placeholder for t in d.targets):
        return "down"
    if any(s.breaching for s in d.slis) or (d.availability is not None and d.availability.breaching):
        return "breaching"
    return "ok"


def _start(names: Sequence[str], token: str | None) -> int:
    if token is None:
        return 0
    if token not in names:
        raise QueryError(f"page_token {token!r} names no deployment this query selects (the config changed, or "
                         "the filters differ from the first page's); start again without page_token")
    return names.index(token)


def awaitable_status(status: StatusSource) -> AsyncStatusSource:
    """A plain status source as the async one `select` reads."""
    async def built(only: Collection[str] | None = None) -> StatusResponse:
        return status(only)
    return built


def select_now(query: StatusQuery, status: StatusSource, all_names: Callable[[], list[str]],
               default_limit: int = DEFAULT_LIMIT) -> StatusResponse:
    """`select` over a plain status source, outside an event loop (benchmarks, tests)."""
    return asyncio.run(select(query, awaitable_status(status), all_names, default_limit))


async def select(query: StatusQuery, status: AsyncStatusSource, all_names: Callable[[], list[str]],
                 default_limit: int = DEFAULT_LIMIT) -> StatusResponse:
    """The answer to `query`: the selected deployments of one page, with `page` set unless the query is
    plain and every deployment fits in one default page (then the answer is the unpaged one of before).
    Only the deployments a page needs are built when no state filter applies."""
    names = all_names()
    matched = query.names(names)
    limit = query.limit or default_limit
    if query.plain and len(names) <= default_limit:
        return await status()
    start = _start(matched, query.page_token)
    if not query.state:
        chosen = matched[start:start + limit]
        resp = await status(None if len(chosen) == len(names) else chosen)
        after = matched[start + limit:]
        resp.page = PageInfo(matching=len(matched), returned=len(resp.deployments), limit=limit,
                             next_page_token=after[0] if after else None)
        return resp
    # A state is known only once built: every matching deployment is built, then filtered.
    resp = await status(None if len(matched) == len(names) else matched)
    wanted = [d for d in resp.deployments if state_of(d) in query.state]
    position = {n: i for i, n in enumerate(matched)}
    rest = [d for d in wanted if position[d.name] >= start]
    resp.deployments = rest[:limit]
    resp.page = PageInfo(matching=len(wanted), returned=len(resp.deployments), limit=limit,
                         next_page_token=rest[limit].name if len(rest) > limit else None)
    return resp


def dump(resp: StatusResponse) -> str:
    """JSON of the answer; an unpaged one carries no `page` key, as before paging existed."""
    return resp.model_dump_json(exclude={"page"} if resp.page is None else None)
