"""Loops that never die silently.

Each of the sidecar's loops (one per deployment's scrapes, one for its own cycle: request logs and
the recording) runs under `supervise`: an unexpected exception is logged (with its traceback the
first time it is seen), counted, and the loop started again after a pause that doubles while it
keeps failing, up to `MAX_PAUSE_SECONDS`, so a persistent bug neither spins nor stops the others.
`LoopHealth` keeps what /healthz, /metrics and /api/v1/status report about a loop: its last
completed cycle (wall clock for people, monotonic time for staleness) and its restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from monitor.conventions.names import LOOP_STALE_INTERVALS
from monitor.fetch import bounded

log = logging.getLogger(__name__)

MAX_PAUSE_SECONDS = 60.0


async def sleep(stop: asyncio.Event, seconds: float) -> None:
    """Wait up to `seconds` (none when not positive), returning at once when `stop` is set."""
    if seconds > 0:
        with contextlib.suppress(asyncio.TimeoutError):
            await bounded(stop.wait(), seconds)


@dataclass
class LoopHealth:
    loop: str  # conventions.LOOP_SCRAPE (one per deployment) or LOOP_SIDECAR
    deployment: str | None = None
    started: float = field(default_factory=time.monotonic)  # when the loop began, monotonic
    last_cycle_ts: float | None = None  # wall clock of the last completed cycle
    last_cycle_monotonic: float | None = None
    restarts: int = 0
    last_error: str | None = None
    failing: int = 0  # restarts since the last completed cycle: sets the pause before the next one

    @property
    def title(self) -> str:
        return f"deployment {self.deployment}: {self.loop} loop" if self.deployment else f"{self.loop} loop"

    def start(self) -> None:
        self.started = time.monotonic()

    def completed(self, ts: float) -> None:
        self.last_cycle_ts = ts
        self.last_cycle_monotonic = time.monotonic()
        self.failing = 0

    def seconds_since_cycle(self, now_monotonic: float | None = None) -> float:
        """Since the last completed cycle, or since the loop began when none has completed yet.
        Monotonic: a wall clock that steps neither hides a stuck loop nor fakes one."""
        now = time.monotonic() if now_monotonic is None else now_monotonic
        return max(0.0, now - (self.last_cycle_monotonic if self.last_cycle_monotonic is not None else self.started))

    def problem(self, interval: float, now_monotonic: float | None = None) -> str | None:
        """Why the loop is stale (no completed cycle in LOOP_STALE_INTERVALS intervals), or None."""
        age = self.seconds_since_cycle(now_monotonic)
        if age <= LOOP_STALE_INTERVALS * interval:
            return None
        since = ("since it began" if self.last_cycle_ts is None else
                 "the last one at " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last_cycle_ts)))
        text = (f"{self.title} has no completed cycle for {age:.1f} s ({since}; stale after "
                f"{LOOP_STALE_INTERVALS} intervals of {interval:g} s)")
        if self.restarts:
            text += f"; {self.restarts} restart{'s' if self.restarts > 1 else ''}, last error: {self.last_error}"
        return text


def pause(failing: int, interval: float) -> float:
    """One interval after the first failure, doubling while it keeps failing, at most a minute (or
    one interval, when that is longer)."""
    return min(interval * 2 ** max(failing - 1, 0), max(interval, MAX_PAUSE_SECONDS))


async def supervise(body: Callable[[], Awaitable[None]], health: LoopHealth, stop: asyncio.Event,
                    interval: float) -> None:
    """Run `body` (a loop that returns once `stop` is set) until `stop`, restarting it after an
    unexpected exception. Cancellation passes through."""
    said: str | None = None
    while not stop.is_set():
        try:
            await body()
            return
        except Exception as err:
            health.restarts += 1
            health.failing += 1
            health.last_error = f"{type(err).__name__}: {err}"
            wait = pause(health.failing, interval)
            # The traceback once per distinct error: a bug that persists is one line per restart.
            log.error("%s failed (%s); restart %d in %.1f s", health.title, health.last_error, health.restarts, wait,
                      exc_info=err if health.last_error != said else None)
            said = health.last_error
            await sleep(stop, wait)
