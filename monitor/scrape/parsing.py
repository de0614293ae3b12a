"""Where a scraped body is parsed: on the event loop, in a thread beside it, or in a worker process.

- Up to `sidecar.parse_inline_max_bytes` (4 MiB; a 32-DP-rank server's 1.5 MB parses in ~3-5 ms, an
  8 DP x 8 TP one's 2.9 MB in ~8 ms): on the event loop, where nothing is spent handing it over. Each
  parse is one step of its scrape's task, so /healthz and the other targets' replies wait at most for
  the parse running when they arrive (the parses of one deployment's eight targets are eight steps,
  not one). Measured side by side (bench/RESULTS.md, docs/scale-out.md): a thread costs ~0.7 ms more
  per 1.5 MB scrape (future, wake-ups, GIL hand-over: 7 % of the sidecar's CPU per scrape), and at 400
  such targets it gave a higher /healthz p99 than parsing on the loop, not a lower one.
- Between the two limits (empty by default; a config can lower `parse_inline_max_bytes`), and when
  there are no worker processes: in a thread. The parse holds the GIL, but Python hands it back to the
  event loop every 5 ms (sys.getswitchinterval); nothing is copied.
- From `sidecar.parse_process_min_bytes` (4 MiB; a 50 MB target parses for ~100 ms at best, seconds
  when most of it is wanted): in a pool of worker processes, so a long C-level step (one regex over the
  whole body holds the GIL throughout) cannot stall the loop, and the parse runs on another core. A
  worker that dies is replaced; the scrape that was on it fails with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
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
        self.process_min = settings.parse_process_min_bytes
        self.workers = (os.cpu_count() or 1) if settings.parse_workers is None else settings.parse_workers
        self._processes: ProcessPoolExecutor | None = None
        # One thread: parses take turns with each other, the event loop gets the GIL between them.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="parse")
        self.offloaded = 0  # bodies parsed in a worker process
        self.threaded = 0  # bodies parsed in the thread

    def _executor(self) -> ProcessPoolExecutor:
        if self._processes is None:
            # spawn: the sidecar runs threads (this pool's, aiohttp's resolver, OTLP); forking those is unsafe.
            self._processes = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._processes

    async def parse(self, body: bytes, wanted: frozenset[str] | None, *, content_type: str, count_families: bool,
                    limits: Limits) -> Exposition:
        """`parse` of one body, wherever it is cheapest; raises what `parse` raises."""
        size = len(body)
        if size <= self.inline_max:
            return parse(body, wanted, content_type=content_type, count_families=count_families, limits=limits)
        loop = asyncio.get_running_loop()
        if size < self.process_min or self.workers == 0:
            self.threaded += 1
            return await loop.run_in_executor(self._thread, _parse, body, wanted, content_type, count_families, limits)
        self.offloaded += 1
        try:
            wire = await loop.run_in_executor(self._executor(), parse_job, body, wanted, content_type,
                                              count_families, limits)
        except BrokenProcessPool:
            log.error("a parser worker process died (out of memory?); starting a new pool")
            self._close_processes()
            raise ParserDied(f"the parser worker process died while parsing this {size}-byte body") from None
        return from_wire(wire)

    def _close_processes(self) -> None:
        if self._processes is not None:
            self._processes.shutdown(wait=False, cancel_futures=True)
            self._processes = None

    def close(self) -> None:
        self._close_processes()
        self._thread.shutdown(wait=False, cancel_futures=True)


def _parse(body: bytes, wanted: frozenset[str] | None, content_type: str, count_families: bool,
           limits: Limits) -> Exposition:
    return parse(body, wanted, content_type=content_type, count_families=count_families, limits=limits)
