"""Where a scraped body is parsed: on the event loop when small, in a pool of worker processes when large.

A 1.5 MB SGLang exposition parses in ~3 ms; shipping it to a worker and the result back costs about half
of that again, so small bodies are parsed in place. A body above `sidecar.parse_inline_max_bytes` (a 50 MB
target parses for ~100 ms at best, seconds when most of it is wanted) goes to a worker process: the event
loop keeps answering /healthz and scraping other targets meanwhile, and the parse runs on another core.
A worker that dies is replaced; the scrape that was on it fails with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from monitor.config import SidecarSettings
from monitor.parse.exposition import Exposition, Limits, parse
from monitor.parse.job import from_wire, parse_job

log = logging.getLogger(__name__)


class ParserDied(Exception):
    """The worker process parsing a body died (killed, out of memory): that scrape fails with this."""


class ParserPool:
    def __init__(self, settings: SidecarSettings) -> None:
        self.inline_max = settings.parse_inline_max_bytes
        self.workers = (os.cpu_count() or 1) if settings.parse_workers is None else settings.parse_workers
        self._pool: ProcessPoolExecutor | None = None
        self.offloaded = 0  # bodies parsed in a worker (for tests and the benchmark)

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: the sidecar runs threads (aiohttp's resolver, OTLP); forking those is unsafe.
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    async def parse(self, body: bytes, wanted: frozenset[str] | None, *, content_type: str, count_families: bool,
                    limits: Limits) -> Exposition:
        """`parse` of one body, wherever it is cheapest; raises what `parse` raises."""
        if self.workers == 0 or len(body) <= self.inline_max:
            return parse(body, wanted, content_type=content_type, count_families=count_families, limits=limits)
        loop = asyncio.get_running_loop()
        self.offloaded += 1
        try:
            wire = await loop.run_in_executor(self._executor(), parse_job, body, wanted, content_type,
                                              count_families, limits)
        except BrokenProcessPool:
            log.error("a parser worker process died (out of memory?); starting a new pool")
            self.close()
            raise ParserDied(f"the parser worker process died while parsing this {len(body)}-byte body") from None
        return from_wire(wire)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
