"""The /metrics page, rendered at most once per scrape cycle and format, off the event loop, served as bytes.

It was rendered on the event loop for every request: 0.18 s at 200 deployments, 2.4-4.2 s (19.9 MB) at
2,000, during which /healthz and every scrape waited; 30 concurrent requests held /healthz 8 s. Now:

- a page is kept while it is fresh: rendered from the state as it was after the latest scrape cycle (or
  reload: `version()` says which) and less than `max_age()` old (the scrape interval, read at each request
  so a reload's new interval applies to the page already kept). So it is never more than one cycle stale,
  and a stuck scraper still shows in its loop-age series within one interval;
- one render at a time, whatever the number of requests: they wait for the render in progress and share
  its bytes (a lock, then the freshness check again);
- a render reads the state on the event loop (`gather`, which yields to the loop every few ms, so the
  state is read between scrape results, never while one is being applied) and turns it into text in a
  worker thread (`encode` work: the families, the exposition format, gzip), which is most of the cost;
- the gzip body is compressed once per render, served to clients that send `Accept-Encoding: gzip`;
- the format is chosen from `Accept` as prometheus_client does (OpenMetrics or the text format), one page
  per content type.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import NamedTuple

from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder

# zlib's default: ~1/25 of the page's bytes for ~4 % of its render time (1/18 at level 1, 1/25 at 9).
GZIP_LEVEL = 6
# Pages kept at once, one per content type asked for (a client choosing OpenMetrics versions at will
# cannot make it hold more).
MAX_PAGES = 4

# What `gather` returns: a function that yields the page's families, safe to call from another thread
# (it reads only what `gather` captured, nothing the event loop changes).
Families = Callable[[], Iterable[Metric]]


class Page(NamedTuple):
    body: bytes
    gzipped: bytes
    content_type: str
    version: Hashable  # `version()` when its state was read
    read_at: float  # when its state was read (`clock`): the page's age counts from here
    number: int  # renders before it and it: which requests it is newer than


class _Collected:
    """What prometheus_client's encoders take: an object with collect()."""

    def __init__(self, families: Families) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families()


def accepts_gzip(header: str) -> bool:
    """`Accept-Encoding` names gzip (or x-gzip) with a non-zero quality."""
    for part in header.split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip"):
            continue
        q = params.strip().lower()
        if q.startswith("q="):
            try:
                return float(q[2:]) > 0
            except ValueError:
                return False
        return True
    return False


class MetricsPage:
    def __init__(self, gather: Callable[[], Awaitable[Families]], *, version: Callable[[], Hashable],
                 max_age: Callable[[], float], clock: Callable[[], float] = time.monotonic,
                 executor: Executor | None = None) -> None:
        self._gather = gather
        self._version = version
        self._max_age = max_age
        self._clock = clock
        # Its own thread: a render never queues behind (or holds up) other work in the default executor.
        self._executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-render")
        self._lock = asyncio.Lock()
        self._pages: dict[str, Page] = {}
        self.renders = 0  # pages rendered since start (tests, the benchmark)

    def fresh(self, page: Page) -> bool:
        # A clock that stepped back (a negative age) makes the page stale, not fresh for longer.
        return page.version == self._version() and 0 <= self._clock() - page.read_at < self._max_age()

    async def get(self, accept: str) -> Page:
        """The page for this `Accept` header, rendered now if the one kept is stale."""
        encoder, ctype = choose_encoder(accept)
        page = self._pages.get(ctype)
        if page is not None and self.fresh(page):
            return page
        rendered = self.renders
        async with self._lock:  # one render at a time
            page = self._pages.get(ctype)
            # A page rendered after this request came in is as fresh as it asks, even when renders take
            # longer than max_age: those waiting take the page rendered meanwhile, never render in turn.
            if page is not None and (self.fresh(page) or page.number > rendered):
                return page
            version, read_at = self._version(), self._clock()
            families = await self._gather()
            body, gzipped = await asyncio.get_running_loop().run_in_executor(
                self._executor, _encode, encoder, families)
            self.renders += 1
            page = Page(body, gzipped, ctype, version, read_at, self.renders)
            self._keep(page)
            return page

    def _keep(self, page: Page) -> None:
        self._pages = {k: p for k, p in self._pages.items() if self.fresh(p)}
        while len(self._pages) >= MAX_PAGES:
            self._pages.pop(next(iter(self._pages)))
        self._pages[page.content_type] = page

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _encode(encoder: Callable[[_Collected], bytes], families: Families) -> tuple[bytes, bytes]:
    """In the render thread: the exposition text and its gzip."""
    body = encoder(_Collected(families))
    return body, gzip.compress(body, GZIP_LEVEL, mtime=0)
