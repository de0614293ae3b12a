"""The snapshot history: time order survives a wall clock that steps back (NTP step, VM resume)."""

from __future__ import annotations

import pytest

from monitor.slo.histogram import Hist
from monitor.slo.windows import BudgetPoint, Snapshot, SnapshotStore

EDGES = (0.04, float("inf"))


def snap(ts: float, n: float) -> Snapshot:
    return Snapshot(ts, {"tpot": Hist(EDGES, (n, n), 0.01 * n, n)}, {"requests_total": n})


def test_a_snapshot_dated_before_the_latest_rebases_the_history_instead_of_raising():
    store = SnapshotStore()
    for i in range(13):  # every 5 s for a minute, 10 events per scrape
        assert store.append(snap(1000.0 + 5 * i, 10.0 * i), BudgetPoint(1000.0 + 5 * i, {})) == 0.0
    stepped = 1060.0 - 3600.0 + 5  # the clock went back an hour between two scrapes
    shift = store.append(snap(stepped, 130.0), BudgetPoint(stepped, {}))
    assert shift == pytest.approx(-3600.0)  # history moved back so the new scrape is one interval later
    stamps = [s.ts for s in store.snapshots()]
    assert stamps == sorted(stamps) and stamps[-1] == stepped and stamps[-2] == pytest.approx(stepped - 5)
    assert [p.ts for p in store.long] == sorted(p.ts for p in store.long) and store.long[0].ts == pytest.approx(1000 - 3600)
    # Windows keep their length: the 30 s before the new scrape hold the last 6 scrapes' events.
    start = store.window_start(stepped, 30.0)
    assert start is not None and store.latest().counters["requests_total"] - start.counters["requests_total"] == 60.0
    # The next scrape, in the new time line, appends as usual.
    assert store.append(snap(stepped + 5, 140.0)) == 0.0 and store.latest().ts == stepped + 5


def test_a_first_snapshot_or_one_at_the_same_time_is_not_a_step():
    store = SnapshotStore()
    assert store.append(snap(10.0, 0.0)) == 0.0
    assert store.append(snap(10.0, 1.0)) == 0.0
