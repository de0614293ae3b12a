"""Recording: windows survive a sidecar restart; a sidecar killed mid-write leaves it intact."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from aiohttp import web

from monitor.config import parse_config
from monitor.record.store import Recording, RecordingError
from monitor.sidecar import Sidecar
from tests.conftest import serve_routes
from tests.slo.helpers import exposition


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def _server(state):
    async def handler(request):
        return web.Response(text=exposition(tpot=[0.03] * state["good"] + [0.2] * state["bad"]))

    runner, base = await serve_routes({"/metrics": handler})
    return runner, int(base.rsplit(":", 1)[1])


def _config(port, path):
    return parse_config({
        "sidecar": {"recording_path": str(path), "recording_interval_seconds": 1},
        "deployments": [{"name": "d", "tpot_target_seconds": 0.04,
                         "targets": [{"role": "server", "url": f"http://127.0.0.1:{port}/metrics"}]}],
    })


def test_windows_survive_a_sidecar_restart(tmp_path):
    path = tmp_path / "rec.sqlite"

    async def go():
        state = {"good": 0, "bad": 0}
        runner, port = await _server(state)
        clock = Clock(1000.0)
        try:
            sc = Sidecar(_config(port, path), clock=clock)
            await sc.run(once=True)
            state.update(good=90, bad=10)
            clock.t = 1060
            await sc.run(once=True)
            await sc.close()
            # The SGLang server restarts while the sidecar is down: counters begin again.
            state.update(good=5, bad=5)
            clock.t = 1120
            sc2 = Sidecar(_config(port, path), clock=clock)
            assert sc2.restored == {"d": 2}
            await sc2.run(once=True)
            st = sc2.status()
            await sc2.close()
            return st
        finally:
            await runner.cleanup()

    st = asyncio.run(go())
    w = st.deployments[0].slis[0].windows[0]
    assert w.events == 110 and abs(w.good_ratio - 95 / 110) < 1e-9


WRITER = """
import sys, time
from monitor.record.store import Recording
from monitor.slo.accumulate import SeriesBook
from monitor.slo.histogram import Hist
from monitor.slo.windows import Snapshot
rec = Recording(sys.argv[1])
i = 0
print("ready", flush=True)
while True:
    i += 1
    h = Hist((0.04, float("inf")), (float(i), float(2 * i)), float(i), float(2 * i))
    rows = [(f"d{k}", Snapshot(float(i), {"tpot": h}, {"requests_total": float(i)}), {"i": i}, SeriesBook())
            for k in range(20)]
    rec.write_tick(rows, retain_seconds=1e9)
"""


def test_killed_mid_write_leaves_a_consistent_recording(tmp_path):
    path = tmp_path / "rec.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rec = Recording(path)
    counts = {d: sum(1 for _ in rec.snapshots(d)) for d in rec.deployments()}
    assert len(counts) == 20 and len(set(counts.values())) == 1  # every tick whole, none half-written
    last = list(rec.snapshots("d7"))[-1]
    assert last.hists["tpot"].cumulative[0] == last.ts  # content matches the tick that wrote it


def test_retention_drops_old_rows_and_bad_files_are_refused(tmp_path):
    from monitor.slo.accumulate import SeriesBook
    from monitor.slo.histogram import Hist
    from monitor.slo.windows import Snapshot

    rec = Recording(tmp_path / "r.sqlite")
    h = Hist((float("inf"),), (1.0,), 1.0, 1.0)
    for t in range(0, 100, 10):
        rec.write_tick([("d", Snapshot(float(t), {"tpot": h}, {}), None, SeriesBook())], retain_seconds=30)
    assert rec.span("d") == (60.0, 90.0)
    (tmp_path / "junk.sqlite").write_text("not sqlite at all" * 100)
    with pytest.raises(RecordingError):
        Recording(tmp_path / "junk.sqlite")
