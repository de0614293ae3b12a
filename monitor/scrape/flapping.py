"""Damping of a flapping target's up/down log lines. Pure: the caller logs what this says to say.

A target's first change opens an interval and is said at once (a target going down must be known now),
and so is the change after it (its recovery, e.g. a server that was not up yet when the sidecar started);
further changes within the interval are only counted. The next call for the target after the interval
closes it: with changes not said, one summary line is due and a new interval opens in which every change
is counted (a target that keeps flapping gets one line per interval); without, the target is quiet again
and its next change is said at once. Its status stays exact whatever is said (`/api/v1/status` reads the
status, not the log).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from monitor.conventions.policy import FLAP_SUMMARY_SECONDS

SAID_AT_ONCE = 2  # a down and its recovery


@dataclass
class _Interval:
    start: float
    changes: int = 0
    said: int = 0
    damping: bool = False  # opened by a summary: nothing in it is said at once


@dataclass(frozen=True)
class FlapSummary:
    changes: int  # every change in the interval, those said at once and the one that closed it included
    seconds: float  # how long the interval lasted


class FlapDamper:
    def __init__(self, interval: float = FLAP_SUMMARY_SECONDS) -> None:
        self.interval = interval
        self._open: dict[Hashable, _Interval] = {}

    def observe(self, key: Hashable, changed: bool, now: float) -> tuple[bool, FlapSummary | None]:
        """One status update of target `key` at `now`: (say this change now, summary due now or None)."""
        cur = self._open.get(key)
        # A clock that stepped back ends the interval too: its length cannot be measured any more.
        ended = cur is not None and (now - cur.start >= self.interval or now < cur.start)
        if cur is not None and ended and cur.changes == cur.said:
            del self._open[key]  # a quiet end: nothing left to summarise
            cur = None
        if cur is None:
            if changed:
                self._open[key] = _Interval(now, changes=1, said=1)
            return changed, None
        if changed:
            cur.changes += 1
            if not ended and not cur.damping and cur.said < SAID_AT_ONCE:
                cur.said += 1
                return True, None
        if not ended:
            return False, None
        self._open[key] = _Interval(now, damping=True)
        return False, FlapSummary(cur.changes, max(0.0, now - cur.start))

    def pending(self, now: float) -> list[tuple[Hashable, FlapSummary]]:
        """Every open interval with changes not said yet, closed now (when the sidecar stops: what was
        only counted is said before it goes)."""
        out = [(key, FlapSummary(cur.changes, max(0.0, now - cur.start)))
               for key, cur in self._open.items() if cur.changes > cur.said]
        self._open.clear()
        return out
