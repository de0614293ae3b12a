"""Where a scraped body is parsed: on the event loop, in a thread beside it, or in a worker process.

- Up to `sidecar.parse_inline_max_bytes` (256 KiB; a one-scheduler server's 100 kB parses in ~1 ms): on
  the event loop, where nothing is spent handing it over.
- Up to `sidecar.parse_process_min_bytes` (4 MiB; a 32-DP-rank server's 1.5 MB takes ~3-5 ms): in a
  thread when other parses ran in the last `LONE_PARSE_SECONDS` (one deployment's eight targets answer
  together): the parse holds the GIL, but Python hands it back to the event loop every 5 ms
  (sys.getswitchinterval), so /healthz and the other targets' replies are not queued behind eight
  parses. A lone body (the thread idle, no parse in that time: a sidecar of a few servers, or a fleet's
  quiet moments) is parsed on the loop instead, which blocks it for one parse only: the hand-over
  (future, wake-ups, GIL hand-over) cost ~0.6 ms of the ~9 ms the sidecar spends per 1.5 MB scrape,
  measured side by side (bench/RESULTS.md has the live CPU per scrape).
- Larger (a 50 MB target parses for ~100 ms at best, seconds when most of it is wanted): in a pool of
  worker processes, so a long C-level step (one regex over the whole body holds the GIL throughout)
  cannot stall the loop, and the parse runs on another core. A worker that dies is replaced; the scrape
  that was on it fails with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from monitor.config import SidecarSettings
from monitor.parse.exposition import Exposition, Limits, parse
from monitor.parse.job import from_wire, parse_job

log = logging.getLogger(__name__)

LONE_PARSE_SECONDS = 0.05  # a mid-size body with no other parse this recent is parsed on the event loop


class ParserDied(Exception):
    """The worker process parsing a body died (killed, out of memory): that scrape fails with this."""


class ParserPool:
    def __init__(self, settings: SidecarSettings) -> None:
        self.inline_max = settings.parse_inline_max_bytes
        self.process_min = settings.parse_process_min_bytes
        self.workers = (os.cpu_count() or 1) if settings.parse_workers is None else settings.parse_workers
        # A sample dated further than one interval from its scrape is not that scrape's value (`only_current`).
        self.interval = settings.scrape_interval_seconds
        self.clock = time.time
        self._processes: ProcessPoolExecutor | None = None
        # One thread: parses take turns with each other, the event loop gets the GIL between them.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="parse")
        self.offloaded = 0  # bodies parsed in a worker process
        self.threaded = 0  # bodies parsed in the thread
        self.lone = 0  # mid-size bodies parsed on the loop, no other parse being recent
        self._in_thread = 0  # bodies handed to the thread and not back yet
        self._last_end = -math.inf  # monotonic time the latest parse of a mid-size body ended

    def _executor(self) -> ProcessPoolExecutor:
        if self._processes is None:
            # spawn: the sidecar runs threads (this pool's, aiohttp's resolver, OTLP); forking those is unsafe.
            self._processes = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._processes

    async def parse(self, body: bytes, wanted: frozenset[str] | None, *, content_type: str, count_families: bool,
                    limits: Limits) -> Exposition:
        """`parse` of one body, wherever it is cheapest; raises what `parse` raises. Samples dated further than one
        scrape interval from now are left out (`Limits.current`), unless `limits` sets its own bounds."""
        if limits.current is None:
            # Now, not the scrape's start: later by the fetch, which its timeout keeps within the interval.
            limits = limits._replace(current=(self.clock(), self.interval))
        size = len(body)
        if size <= self.inline_max:
            return parse(body, wanted, content_type=content_type, count_families=count_families, limits=limits)
        loop = asyncio.get_running_loop()
        if size < self.process_min or self.workers == 0:
            if (size < self.process_min and not self._in_thread
                    and time.monotonic() - self._last_end >= LONE_PARSE_SECONDS):
                self.lone += 1
                try:
                    return parse(body, wanted, content_type=content_type, count_families=count_families,
                                 limits=limits)
                finally:
                    self._last_end = time.monotonic()
            self.threaded += 1
            self._in_thread += 1
            try:
                return await loop.run_in_executor(self._thread, _parse, body, wanted, content_type, count_families,
                                                  limits)
            finally:
                self._in_thread -= 1
                self._last_end = time.monotonic()
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
