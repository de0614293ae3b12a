"""Recording: windows survive a sidecar restart; a sidecar killed mid-write leaves it intact."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import aiohttp
import pytest
from aiohttp import web

from monitor.config import parse_config
from monitor.conventions.units import parse_duration
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


async def _ticks(sc: Sidecar, state: dict, clock: Clock, *ticks: tuple[float, int, int]) -> None:
    """One scrape cycle (and recording tick) per (time, good, bad) the server then reports."""
    for t, good, bad in ticks:
        clock.t = t
        state.update(good=good, bad=bad)
        await sc.run(once=True)


def test_windows_survive_a_sidecar_restart(tmp_path):
    path = tmp_path / "rec.sqlite"

    async def go():
        state = {"good": 0, "bad": 0}
        runner, port = await _server(state)
        clock = Clock(1000.0)
        try:
            sc = Sidecar(_config(port, path), clock=clock)
            await _ticks(sc, state, clock, (1000, 0, 0), (1060, 90, 10))
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


# --- damaged recordings: one clear line naming the file and what to do; --recording-reset -------

def _good_recording(path, deployment="d", ticks=40, start=None):
    """A recording as the sidecar writes it (snapshot, state row, book), `ticks` 15 s apart."""
    from monitor.slo.accumulate import HistAccumulator, SeriesBook
    from monitor.slo.histogram import Hist
    from monitor.slo.windows import Snapshot

    start = time.time() - 15 * ticks if start is None else start
    rec = Recording(path)
    for i in range(ticks):
        h = Hist((0.04, float("inf")), (float(i), float(2 * i)), 0.05 * i, float(2 * i))
        book = SeriesBook()
        book.hists[("server@x", "sglang:request_time_per_output_token_seconds", ())] = HistAccumulator(h)
        rec.write_tick([(deployment, Snapshot(start + 15 * i, {"tpot": h}, {"requests_total": float(i)}),
                         {"slis": {}, "pad": "x" * 2000}, book)], retain_seconds=1e9)
    rec.close()
    return path


def _damage(kind: str, tmp_path):
    """A recording path damaged in one of the ways of issue 19 item 7; returns the path."""
    from monitor.slo.accumulate import SeriesBook
    from monitor.slo.histogram import Hist
    from monitor.slo.windows import Snapshot

    path = tmp_path / "rec.sqlite"
    if kind == "directory":
        path.mkdir()
        return path
    if kind == "junk":
        path.write_bytes(b"this is not a database " * 300)
        return path
    if kind == "empty-main-with-wal":
        # The main file lost (or copied without) while the -wal of a running sidecar is there.
        src = Recording(tmp_path / "running.sqlite", checkpoint_seconds=1e9)
        h = Hist((float("inf"),), (1.0,), 1.0, 1.0)
        for t in range(10):
            src.write_tick([("d", Snapshot(float(t), {"tpot": h}, {}), None, SeriesBook())], retain_seconds=1e9)
        shutil.copy(tmp_path / "running.sqlite-wal", tmp_path / "rec.sqlite-wal")
        src.close()
        path.write_bytes(b"")
        assert os.path.getsize(tmp_path / "rec.sqlite-wal") > 0
        return path
    _good_recording(path)
    if kind == "truncated":
        with open(path, "r+b") as fh:
            fh.truncate(os.path.getsize(path) * 2 // 3)
    elif kind == "bad-json-book":
        db = sqlite3.connect(path)
        db.execute("UPDATE books SET book = '{\"hists\": [[\"x\"' WHERE deployment = 'd'")
        db.commit()
        db.close()
    elif kind == "deep-json-book":  # issue #34 item 8: nesting past any parser's recursion was a RecursionError
        db = sqlite3.connect(path)
        db.execute("UPDATE books SET book = ? WHERE deployment = 'd'", ("[" * 100_000 + "]" * 100_000,))
        db.commit()
        db.close()
    elif kind == "deep-json-snapshot":
        db = sqlite3.connect(path)
        db.execute("UPDATE snapshots SET snapshot = ? WHERE ts = (SELECT MAX(ts) FROM snapshots)",
                   ('{"ts": 1, "hists": ' + "[" * 100_000 + "]" * 100_000 + "}",))
        db.commit()
        db.close()
    elif kind == "snapshot-missing-field":
        db = sqlite3.connect(path)
        db.execute("UPDATE snapshots SET snapshot = json_remove(snapshot, '$.hists') "
                   "WHERE ts = (SELECT MAX(ts) FROM snapshots)")
        db.commit()
        db.close()
    else:
        raise AssertionError(kind)
    return path


DAMAGE = {
    "directory": "is a directory",
    "junk": "not a recording",
    "truncated": "damaged",
    "bad-json-book": "table books",
    "snapshot-missing-field": "table snapshots",
    "deep-json-book": "table books",
    "deep-json-snapshot": "table snapshots",
    "empty-main-with-wal": "-wal",
}


def _run_sidecar(path, *extra, timeout=60, log_level="INFO"):
    """`slo-monitor run` on a config recording to `path`; returns (rc, stderr) once it served or failed."""
    cfg = path.parent / "cfg.yaml"
    cfg.write_text(f"sidecar: {{recording_path: '{path}', listen_port: 0}}\n"
                   "deployments:\n  - name: d\n    tpot_target_seconds: 0.04\n    targets: []\n")
    proc = subprocess.Popen([sys.executable, "-m", "monitor", "--log-level", log_level, "run", "-c", str(cfg), *extra],
                            stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "serving /metrics" in line:
                proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        lines.append(proc.stderr.read())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(lines)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_recording_refuses_to_start_with_one_line_naming_the_file_and_the_flag(kind, tmp_path):
    path = _damage(kind, tmp_path)
    rc, err = _run_sidecar(path)
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(path) in err and DAMAGE[kind] in err
    if kind == "directory":
        assert "recording_path" in err  # a config mistake: nothing to move aside
    else:
        assert "--recording-reset" in err
    assert path.exists()  # refused, nothing moved


@pytest.mark.parametrize("kind", sorted(set(DAMAGE) - {"directory"}))
def test_recording_reset_moves_the_damaged_file_aside_and_starts_fresh(kind, tmp_path):
    path = _damage(kind, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("rec.sqlite*")}
    rc, err = _run_sidecar(path, "--recording-reset")
    assert rc == 0 and "serving /metrics" in err and "Traceback" not in err, err
    moved = sorted(p.name for p in tmp_path.glob("rec.sqlite.corrupt-*"))
    assert moved and all(name.startswith("rec.sqlite.corrupt-") for name in moved)
    main = next(p for p in tmp_path.glob("rec.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm")))
    assert main.read_bytes() == before["rec.sqlite"]  # kept as it was, for a post-mortem
    warning = next(line for line in err.splitlines() if "moved" in line)
    assert "WARNING" in warning and str(path) in warning and main.name in warning
    rec = Recording(path, readonly=True)
    assert rec.deployments() == []  # a fresh recording
    rec.close()


def test_a_damaged_row_read_by_analyze_is_one_line_too(tmp_path):
    path = _damage("snapshot-missing-field", tmp_path)
    rec = Recording(path, readonly=True)
    with pytest.raises(RecordingError, match=rf"^{path}: .*table snapshots"):
        list(rec.snapshots("d"))
    rec.close()
    res = subprocess.run([sys.executable, "-m", "monitor", "analyze", "--deployment", "d", "--recording", str(path),
                          "--from=-1h", "--to=now", "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr and str(path) in res.stderr, res.stderr


@pytest.mark.parametrize("state", ['{"slis": []}', '{"targets": {"t": 3}}', '{"load": {"server": 1}}',
                                   '{"accelerators": {}}', '{"goodput": {"targets": []}}', '[' * 100_000 + ']' * 100_000],
                         ids=["slis-list", "target-number", "load-number", "accelerators-object", "goodput-list",
                              "deep"])
def test_a_state_row_of_another_shape_is_one_line_from_analyze(state, tmp_path):
    """Issue #34 item 8: a `slis` that is a list was an AttributeError traceback."""
    path = _good_recording(tmp_path / "rec.sqlite")
    db = sqlite3.connect(path)
    db.execute("UPDATE snapshots SET state = ? WHERE ts = (SELECT MAX(ts) FROM snapshots)", (state,))
    db.commit()
    db.close()
    res = subprocess.run([sys.executable, "-m", "monitor", "analyze", "--deployment", "d", "--recording", str(path),
                          "--from=-1h", "--to=now", "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert str(path) in res.stderr and "table snapshots" in res.stderr and len(res.stderr.strip().splitlines()) <= 3


def test_a_sound_recording_still_restores_with_reset_given(tmp_path):
    path = _good_recording(tmp_path / "rec.sqlite")
    rc, err = _run_sidecar(path, "--recording-reset")
    assert rc == 0 and "restored 40 recorded snapshots of d" in err, err
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_the_wal_is_checkpointed_regularly_and_truncated(tmp_path):
    from monitor.slo.accumulate import SeriesBook
    from monitor.slo.histogram import Hist
    from monitor.slo.windows import Snapshot

    h = Hist((0.04, float("inf")), (1.0, 2.0), 0.1, 2.0)

    def wal_sizes(checkpoint_seconds):
        path = tmp_path / f"rec-{checkpoint_seconds}.sqlite"
        rec = Recording(path, checkpoint_seconds=checkpoint_seconds)
        reader = Recording(path, readonly=True)  # e.g. `analyze` reading while the sidecar writes
        sizes = []
        for i in range(30):
            list(reader.snapshots("d"))
            rec.write_tick([("d", Snapshot(float(i), {"tpot": h}, {}), {"pad": "x" * 20_000}, SeriesBook())],
                           retain_seconds=1e9)
            sizes.append(os.path.getsize(str(path) + "-wal"))
        reader.close()
        rec.close()
        return sizes, path

    never, _ = wal_sizes(1e9)
    assert never[-1] > 500_000  # without checkpoints the WAL keeps every tick
    every, path = wal_sizes(0.0)
    assert max(every) == 0  # each tick checkpointed into the main file and the WAL truncated
    rec = Recording(path, readonly=True)
    assert len(list(rec.snapshots("d"))) == 30
    rec.close()


def test_a_failing_write_is_logged_and_the_sidecar_keeps_going(tmp_path, caplog):
    async def go():
        state = {"good": 5, "bad": 0}
        runner, port = await _server(state)
        try:
            sc = Sidecar(_config(port, tmp_path / "rec.sqlite"), clock=Clock(1000.0))

            def disk_full(*args, **kwargs):
                raise sqlite3.OperationalError("database or disk is full")

            real = sc.recording.write_tick
            sc.recording.write_tick = disk_full
            await sc.run(once=True)
            await sc.run(once=True)
            sc.recording.write_tick = real
            sc.clock.t = 1100.0
            await sc.run(once=True)
            await sc.close()
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.INFO):
        asyncio.run(go())
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "rec.sqlite" in errors[0].getMessage() and "disk is full" in errors[0].getMessage()
    assert any("writing again" in r.getMessage() for r in caplog.records)


def test_a_recording_holding_snapshots_dated_in_the_future_restores_the_rest_and_says_so(tmp_path, caplog):
    """A clock that ran ahead while the last run recorded (then was stepped back) must not stop the next run."""
    path = tmp_path / "rec.sqlite"

    async def go():
        state = {"good": 0, "bad": 0}
        runner, port = await _server(state)
        clock = Clock(1000.0)
        try:
            sc = Sidecar(_config(port, path), clock=clock)
            # The clock jumps an hour ahead for the last tick ...
            await _ticks(sc, state, clock, (1000, 0, 0), (1060, 90, 10), (1060 + 3600, 95, 10))
            await sc.close()
            clock.t = 1120  # ... and is stepped back before the restart
            state.update(good=100, bad=10)
            sc2 = Sidecar(_config(port, path), clock=clock)
            restored = dict(sc2.restored)
            await sc2.run(once=True)
            clock.t = 1180
            await sc2.run(once=True)
            st = sc2.status()
            await sc2.close()
            return restored, st
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.INFO):
        restored, st = asyncio.run(go())
    assert restored == {"d": 2}
    w = st.deployments[0].slis[0].windows[0]
    # Everything scraped since 1000 counts once: the misdated tick's counts continue from its book.
    assert w.events == 110 and abs(w.good_ratio - 100 / 110) < 1e-9
    future = [r for r in caplog.records if "future" in r.getMessage()]
    assert len(future) == 1 and future[0].levelno == logging.WARNING
    assert "rec.sqlite" in future[0].getMessage() and "1 snapshot" in future[0].getMessage()


def test_a_clock_stepping_back_does_not_pause_the_recording(tmp_path):
    async def go():
        runner, port = await _server({"good": 5, "bad": 0})
        clock = Clock(5000.0)
        try:
            sc = Sidecar(_config(port, tmp_path / "rec.sqlite"), clock=clock)
            await sc.run(once=True)  # records at 5000
            clock.t = 5000.0 - 3600  # NTP steps the clock back an hour
            async with aiohttp.ClientSession() as session:
                await sc.scraper.cycle(session)
            written = sc.record(clock.t)  # the interval is 1 s: due now, not in an hour
            again = sc.record(clock.t + 0.5)
            await sc.close()
            return written, again
        finally:
            await runner.cleanup()

    written, again = asyncio.run(go())
    assert written and not again
    rec = Recording(tmp_path / "rec.sqlite", readonly=True)
    assert [s.ts for s in rec.snapshots("d")] == [5000.0 - 3600, 5000.0]
    rec.close()


def test_the_recording_keeps_no_url_secret_and_still_restores_the_windows(tmp_path):
    """A target URL's password (with a raw `@`) and its `?token=` never reach the file; the book is
    keyed by the redacted id and mapped back to the configured target on restore."""
    path = tmp_path / "rec.sqlite"

    def config(port):
        url = f"http://user:pa@SSSECRET3@127.0.0.1:{port}/metrics?token=TOKSECRET4&x=1"
        return parse_config({
            "sidecar": {"recording_path": str(path), "recording_interval_seconds": 1},
            "deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [{"role": "server", "url": url}]}],
        })

    async def go():
        state = {"good": 0, "bad": 0}
        runner, port = await _server(state)
        clock = Clock(1000.0)
        try:
            sc = Sidecar(config(port), clock=clock)
            await _ticks(sc, state, clock, (1000, 0, 0), (1060, 90, 10))
            await sc.close()
            on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir())
            state.update(good=5, bad=5)  # the server restarted meanwhile: only the book tells
            clock.t = 1120
            sc2 = Sidecar(config(port), clock=clock)
            await sc2.run(once=True)
            st = sc2.status()
            await sc2.close()
            return on_disk, st
        finally:
            await runner.cleanup()

    on_disk, st = asyncio.run(go())
    assert b"127.0.0.1" in on_disk  # the rows are there, redacted
    assert b"SSSECRET3" not in on_disk and b"TOKSECRET4" not in on_disk and b"pa@" not in on_disk
    w = st.deployments[0].slis[0].windows[0]
    assert w.events == 110 and abs(w.good_ratio - 95 / 110) < 1e-9  # the book was matched to the target


def test_a_full_disk_shows_on_healthz_as_degraded_and_in_a_counter_while_scraping_and_serving_go_on(tmp_path):
    """The recording's writes fail with SQLite's own error (injected at the store's write seam): /healthz
    answers 200 "degraded" with the reason, /metrics counts the failed writes, the SLO state keeps moving."""

    async def go():
        state = {"good": 5, "bad": 0}
        runner, port = await _server(state)
        clock = Clock(1000.0)
        sc = Sidecar(_config(port, tmp_path / "rec.sqlite"), clock=clock)
        http_port = await sc.start_http("127.0.0.1", 0)
        base = f"http://127.0.0.1:{http_port}"
        try:
            async with aiohttp.ClientSession() as session:
                async def get(path):
                    async with session.get(base + path) as resp:
                        return resp.status, await resp.text()

                def disk_full(*args, **kwargs):
                    raise sqlite3.OperationalError("database or disk is full")

                real = sc.recording.write_tick
                await _ticks(sc, state, clock, (1000, 5, 0))
                assert (await get("/healthz"))[0] == 200
                sc.recording.write_tick = disk_full
                await _ticks(sc, state, clock, (1010, 50, 0), (1020, 80, 20))
                health = await get("/healthz")
                metrics = (await get("/metrics"))[1]
                events = sc.status().deployments[0].slis[0].windows[0].events
                sc.recording.write_tick = real
                await _ticks(sc, state, clock, (1030, 90, 20))
                healed = await get("/healthz")
                metrics_after = (await get("/metrics"))[1]
                return health, metrics, events, healed, metrics_after
        finally:
            await sc.close()
            await runner.cleanup()

    health, metrics, events, healed, metrics_after = asyncio.run(go())
    code, body = health
    assert code == 200, body
    doc = json.loads(body)
    assert doc["status"] == "degraded"
    (reason,) = doc["problems"]
    assert "rec.sqlite" in reason and "database or disk is full" in reason and "2 failed writes" in reason
    assert "slo_monitor_recording_write_errors_total 2.0" in metrics
    assert events == 95  # 100 - the 5 before the first scrape: the scrapes went on while nothing was written
    assert healed[0] == 200 and json.loads(healed[1]) == {"status": "ok"}
    assert "slo_monitor_recording_write_errors_total 2.0" in metrics_after  # a counter: it stays
    assert "slo_monitor_recording_last_write_timestamp_seconds 1030.0" in metrics_after


def test_a_full_disk_at_start_is_not_taken_for_a_damaged_recording_and_nothing_is_moved_aside(tmp_path, monkeypatch):
    """Opening checkpoints the WAL into the main file, which needs space: SQLite's "database or disk is full"
    there said "not a recording", and --recording-reset moved a sound file aside."""
    path = tmp_path / "rec.sqlite"

    async def one_tick():
        state = {"good": 5, "bad": 0}
        runner, port = await _server(state)
        try:
            sc = Sidecar(_config(port, path), clock=Clock(1000.0))
            await sc.run(once=True)
            await sc.close()
        finally:
            await runner.cleanup()

    asyncio.run(one_tick())

    def disk_full(self):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Recording, "checkpoint", disk_full)
    for reset in (False, True):
        with pytest.raises(RecordingError) as caught:
            Sidecar(_config(1, path), recording_reset=reset)
        message = str(caught.value)
        assert "disk is full" in message and "not found damaged" in message and "recording-reset" not in message
        assert "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name) == []
    monkeypatch.undo()
    rec = Recording(path, readonly=True)
    assert len(list(rec.snapshots("d"))) == 1  # still there, still readable
    rec.close()


# --- thinning: older rows keep one per minute, past the longest window one per 5 minutes ------------

def _steady(start: float, ticks: int, interval: float = 15.0):
    """A deployment answering one request a second, all under the TPOT target: (snapshot, book) per tick."""
    from monitor.slo.accumulate import SeriesBook
    from monitor.slo.histogram import Hist
    from monitor.slo.windows import Snapshot

    for i in range(ticks):
        n = float(i * interval)
        h = Hist((0.04, float("inf")), (n, n), 0.03 * n, n)
        yield Snapshot(start + i * interval, {"tpot": h}, {"requests_total": n}), SeriesBook()


def test_older_rows_are_thinned_to_one_a_minute_then_one_per_5_minutes_and_restore_the_same_windows(tmp_path):
    from monitor.sidecar import recording_thinning
    from monitor.slo.engine import DeploymentEngine

    cfg = parse_config({"deployments": [{"name": d, "tpot_target_seconds": 0.04, "targets": []} for d in "ab"]})
    start, ticks = 1_000_020.0, 8 * 240  # 8 h of 15 s ticks
    thin = recording_thinning("1h")
    assert thin == ((3600.0, 60.0), (21720.0, 300.0))
    rec = Recording(tmp_path / "r.sqlite")
    snaps = []
    for snap, book in _steady(start, ticks):
        snaps.append(snap)
        rec.write_tick([(d, snap, {"pad": "x" * 100}, book) for d in "ab"], retain_seconds=86400, thin=thin)
    newest = snaps[-1].ts
    kept = [s.ts for s in rec.snapshots("a")]
    assert kept == [s.ts for s in rec.snapshots("b")]
    assert [t for t in kept if t >= newest - 3600] == [s.ts for s in snaps if s.ts >= newest - 3600]  # every tick
    middle = [t for t in kept if newest - 21720 <= t < newest - 3600]
    inside = {int(s.ts // 60) for s in snaps if newest - 21720 <= s.ts // 60 * 60 and s.ts < newest - 3600}
    assert inside <= {int(t // 60) for t in middle} and len(inside) > 280  # every minute has a row ...
    assert len(middle) == len({int(t // 60) for t in middle})  # ... and only one
    old = [t for t in kept if t < newest - 21720]
    assert len(old) == len({int(t // 300) for t in old}) == len({int(s.ts // 300) for s in snaps if s.ts < newest - 21720})
    assert len(old) > 20
    assert len(kept) < len(snaps) / 3
    # A recording opened again thins what aged meanwhile the same way (the first tick looks at every row).
    rec.close()
    rec = Recording(tmp_path / "r.sqlite")
    more = list(_steady(start, ticks + 40))[ticks:]
    for snap, book in more:
        rec.write_tick([(d, snap, None, book) for d in "ab"], retain_seconds=86400, thin=thin)
    again = [s.ts for s in rec.snapshots("a")]
    newest = more[-1][0].ts
    assert len([t for t in again if newest - 21720 <= t < newest - 3600]) == len(
        {int(t // 60) for t in again if newest - 21720 <= t < newest - 3600})
    # The windows restored from the thinned rows are those of a sidecar that kept every snapshot.
    every = [s for s, _ in _steady(start, ticks + 40)]
    live, restored = DeploymentEngine(cfg.deployments[0]), DeploymentEngine(cfg.deployments[0])
    live.restore(every, None)
    restored.restore(rec.snapshots("a"), None)
    a, b = live.state(newest).slis["tpot"].windows, restored.state(newest).slis["tpot"].windows
    for w in ("5m", "30m", "1h", "6h"):
        assert abs(a[w].events - b[w].events) <= 60, (w, a[w].events, b[w].events)  # one minute of 1 req/s
        assert b[w].good_ratio == 1.0
    assert a["5m"].events == b["5m"].events


def test_the_sidecar_thins_its_recording_as_configured(tmp_path):
    from monitor.sidecar import recording_thinning

    for value in ("1h", "2h"):
        cfg = parse_config({"sidecar": {"recording_path": str(tmp_path / f"{value}.sqlite"),
                                        "recording_full_resolution": value},
                            "deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": []}]})
        sc = Sidecar(cfg, clock=Clock(1000.0))
        sc.observations.engines["d"].restore((s for s, _ in _steady(900.0, 2)), None)
        seen: dict = {}
        sc.recording.write_tick = lambda rows, seen=seen, **kw: seen.update(kw) or 0  # type: ignore[method-assign]
        assert sc.record(1000.0, force=True)
        sc.recording.close()
        assert seen["thin"] == recording_thinning(value) and seen["thin"][0] == (float(parse_duration(value)), 60.0)



@pytest.mark.parametrize("free, level", [(10**12, logging.INFO), (10**5, logging.WARNING)])
def test_the_first_tick_says_how_large_the_recording_will_grow_and_warns_when_the_disk_is_smaller(
        tmp_path, caplog, monkeypatch, free, level):
    import shutil as shutil_module
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil_module, "disk_usage", lambda _path: usage(free, 0, free))
    cfg = parse_config({"sidecar": {"recording_path": str(tmp_path / "r.sqlite")},
                        "deployments": [{"name": d, "tpot_target_seconds": 0.04, "targets": []} for d in "ab"]})
    sc = Sidecar(cfg, clock=Clock(1000.0))
    for name in "ab":
        sc.observations.engines[name].restore((s for s, _ in _steady(900.0, 2)), None)
    with caplog.at_level(logging.INFO, logger="monitor.sidecar"):
        assert sc.record(1000.0, force=True) and sc.record(1015.0, force=True)
    sc.recording.close()
    said = [r for r in caplog.records if "it grows to" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == level, [r.getMessage() for r in caplog.records]
    line = said[0].getMessage()
    assert "2 deployments" in line and "758 rows each kept over 1d (thinned)" in line
    assert ("shorten sidecar.recording_retention" in line) == (level == logging.WARNING)
