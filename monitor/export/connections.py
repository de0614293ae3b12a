"""The sidecar's port under too many connections: a cap, shedding at accept, overload said once per interval.

A connection past `sidecar.max_connections` is answered a fixed 503 and closed as soon as it is accepted,
before aiohttp sees it (no protocol object, no parsing, no timer), and counted. Whatever floods the port
(connections shed, connections closed for sending no request in time, accepts failing for want of file
descriptors) is logged at most once per interval: the first event at once, then one line with the count.
It was one INFO line per dropped connection (~7,000 a minute) and a traceback per failed accept
(44,259 in 60 s, ~20 MB of log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from monitor.conventions import names as N

log = logging.getLogger(__name__)

OVERLOAD_LOG_INTERVAL_SECONDS = 60.0
# What asyncio's loop reports (with a traceback) when accept() fails for want of descriptors or memory.
ACCEPT_ERROR_MESSAGE = "socket.accept() out of system resource"
# Written to a shed connection: nothing read, one write, closed. Clients see why instead of a reset.
SHED_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 38\r\n"
                 b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections to this sidecar\r\n")


class ThrottledLog:
    """One line per kind of event per interval: the first at once, those that follow within the interval
    counted and said in one line when it ends (then again once per interval while they go on)."""

    def __init__(self, logger: logging.Logger, interval: float = OVERLOAD_LOG_INTERVAL_SECONDS, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.interval, self.clock = logger, interval, clock
        self._since: dict[str, float] = {}  # kind -> when its last line was said
        self._held: dict[str, tuple[int, int, str]] = {}  # kind -> (count, level, summary format)
        self._ticking: set[str] = set()  # kinds with a summary due at the end of their interval

    def say(self, kind: str, level: int, msg: str, *args: object, summary: str) -> None:
        """`msg % args` when `kind` said nothing in the last interval; else counted for `summary`, a format
        given the count and the interval (e.g. "%d more connections shed in the last %gs")."""
        now = self.clock()
        since = self._since.get(kind)
        if since is None or not 0 <= now - since < self.interval:
            self._flush(kind)
            self._since[kind] = now
            self.logger.log(level, msg, *args)
            return
        count = self._held.get(kind, (0, level, summary))[0]
        self._held[kind] = (count + 1, level, summary)
        if kind not in self._ticking:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a synchronous caller): said with the next event past the interval
                return
            self._ticking.add(kind)
            loop.call_later(since + self.interval - now, self._tick, kind)

    def _tick(self, kind: str) -> None:
        self._ticking.discard(kind)
        if self._flush(kind):
            self._since[kind] = self.clock()  # what follows within this new interval: one more summary

    def _flush(self, kind: str) -> bool:
        count, level, summary = self._held.pop(kind, (0, logging.NOTSET, ""))
        if count:
            self.logger.log(level, summary, count, self.interval)
        return bool(count)


class ConnectionGuard:
    """Counts the port's open connections, admits up to `limit`, sheds the rest; counters for /metrics."""

    def __init__(self, limit: int, *, throttled: ThrottledLog | None = None,
                 open_files: int | None = None) -> None:
        self.limit = limit
        self.open = 0
        self.shed = 0
        self.accept_errors = 0
        self.open_files = open_files  # the soft RLIMIT_NOFILE, said with a failed accept
        self.throttled = throttled or ThrottledLog(log)

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """True: the connection is counted (call release() when it ends). False: it was shed (a 503 and
        closed, nothing read)."""
        if self.open < self.limit:
            self.open += 1
            return True
        self.shed += 1
        with contextlib.suppress(OSError, RuntimeError):  # the peer already gone: closing is all there is to do
            transport.write(SHED_RESPONSE)  # type: ignore[attr-defined]
        transport.close()
        self.throttled.say(
            "shed", logging.WARNING,
            "%d connections open to the sidecar's port (sidecar.max_connections): new ones get a 503 and are "
            "closed at once until some end (counted in %s; said at most once every %gs)",
            self.open, N.M_HTTP_CONNECTIONS_SHED, self.throttled.interval,
            summary="%d more connections shed in the last %gs (sidecar.max_connections reached)")
        return False

    def release(self) -> None:
        self.open -= 1

    def accept_failed(self, context: dict[str, Any]) -> None:
        """asyncio's report of a failed accept (out of descriptors): one line per interval, no traceback;
        asyncio itself retries the listening socket a second later."""
        self.accept_errors += 1
        exc = context.get("exception")
        self.throttled.say(
            "accept", logging.ERROR,
            "cannot accept connections on the sidecar's port: %s (%d open, open-files limit %s): raise the limit "
            "(sidecar.open_files_limit, ulimit -n) or lower sidecar.max_connections (said at most once every %gs)",
            exc, self.open, self.open_files if self.open_files is not None else "unknown", self.throttled.interval,
            summary="%d more failed accepts on the sidecar's port in the last %gs (out of file descriptors)")

    def families(self) -> Iterator[Metric]:
        shed = CounterMetricFamily(N.M_HTTP_CONNECTIONS_SHED, "Connections to the sidecar's port closed at accept "
                                   "with a 503 because sidecar.max_connections were open.")
        shed.add_metric([], float(self.shed))
        errors = CounterMetricFamily(N.M_HTTP_ACCEPT_ERRORS, "Accepts on the sidecar's port that failed (out of file "
                                     "descriptors or memory); asyncio retries a second later.")
        errors.add_metric([], float(self.accept_errors))
        opened = GaugeMetricFamily(N.M_HTTP_CONNECTIONS_OPEN, "Connections open to the sidecar's port.")
        opened.add_metric([], float(self.open))
        limit = GaugeMetricFamily(N.M_HTTP_CONNECTIONS_LIMIT, "The cap on connections open to the sidecar's port "
                                  "(sidecar.max_connections, or derived from the open-files limit).")
        limit.add_metric([], float(self.limit))
        yield from (shed, errors, opened, limit)


def accept_error_handler(guard: ConnectionGuard, loop: asyncio.AbstractEventLoop) -> Callable[..., None]:
    """A loop exception handler: failed accepts go to `guard` (no traceback per accept), the rest to the
    handler that was there before (or asyncio's default)."""
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == ACCEPT_ERROR_MESSAGE:
            guard.accept_failed(context)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handle.previous = previous  # type: ignore[attr-defined]
    return handle
