"""The recording file changed under the running `slo-monitor run` (issue #34 items 3 and 9): deleted, replaced,
truncated or overwritten. Before, the sidecar wrote on into the deleted file (status `writing: true`, /healthz ok,
"last tick written" at SIGTERM) and the next start began an empty recording without a word; damage was unseen
until the next start, which exited 2 (a pod restarting in a loop)."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import sys
from pathlib import Path

from tests.conftest import free_port
from tests.exposition_server import counting_server
from tests.procs import get_json, running, wait_for


def _config(port: int, server: str, rec: Path) -> str:
    return (f"sidecar: {{listen_port: {port}, scrape_interval_seconds: 0.3, scrape_timeout_seconds: 0.25, "
            f"recording_path: '{rec}', recording_interval_seconds: 0.3}}\n"
            f"deployments:\n  - {{name: a, tpot_target_seconds: 0.04, targets: [{{role: server, url: '{server}/a'}}]}}\n")



def _rows(path: Path) -> int:
    """Snapshot rows in the file; -1 while it cannot be read (being replaced, or not a recording yet)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return -1
    try:
        return db.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0]
    except sqlite3.Error:
        return -1
    finally:
        db.close()



def _start(tmp_path: Path, server: str, *extra: str):
    port = free_port()
    rec, cfg, log = tmp_path / "rec.sqlite", tmp_path / "c.yaml", tmp_path / "run.log"
    cfg.write_text(_config(port, server, rec))
    argv = [sys.executable, "-m", "monitor", "run", "-c", str(cfg), *extra]
    return running(argv, log, ready_url=f"http://127.0.0.1:{port}/healthz"), f"http://127.0.0.1:{port}", rec, log


def test_a_recording_deleted_while_running_is_started_again_at_its_path_and_restored_from_after_a_restart(tmp_path):
    with counting_server({"good": 5}) as server:
        proc_cm, base, rec, log = _start(tmp_path, server)
        with proc_cm as proc:
            wait_for(lambda: rec.exists() and _rows(rec) >= 2, "recorded rows", log)
            rec.unlink()
            for side in ("-wal", "-shm"):
                Path(f"{rec}{side}").unlink(missing_ok=True)
            line = wait_for(lambda: next((x for x in log.read_text().splitlines() if "was deleted while" in x), None),
                         "the deletion to be said", log)
            assert "WARNING" in line and str(rec) in line and "new recording" in line, line
            wait_for(lambda: rec.exists() and _rows(rec) >= 2, "rows in the new file", log)
            assert get_json(base + "/api/v1/status")["sidecar"]["recording"]["writing"] is True
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
        assert "last tick written" in log.read_text()
        rows = _rows(rec)
        proc_cm, base, rec, log = _start(tmp_path, server)
        with proc_cm:
            wait_for(lambda: f"restored {rows} recorded snapshots" in log.read_text() or "restored" in log.read_text(),
                  "the restore from the new file", log)


def test_a_recording_replaced_while_running_is_left_alone_and_the_sidecar_says_it_no_longer_records(tmp_path):
    """Without --recording-reset the other file is not ours to write or move: ERROR once, `writing: false`,
    /healthz "degraded" (200: a restart would not fix it), write errors counted; the file is untouched."""
    with counting_server({"good": 5}) as server:
        proc_cm, base, rec, log = _start(tmp_path, server)
        with proc_cm as proc:
            wait_for(lambda: rec.exists() and _rows(rec) >= 2, "recorded rows", log)
            other = tmp_path / "other.sqlite"
            db = sqlite3.connect(other)
            db.execute("CREATE TABLE mine (x)")
            db.commit()
            db.close()
            shutil.move(other, rec)
            kept = rec.read_bytes()
            line = wait_for(lambda: next((x for x in log.read_text().splitlines() if "another file" in x), None),
                         "the replacement to be said", log)
            assert "ERROR" in line and "--recording-reset" in line and "not written" in line, line
            status = get_json(base + "/api/v1/status")["sidecar"]["recording"]
            assert status["writing"] is False and "another file" in status["last_error"], status
            health = get_json(base + "/healthz")
            assert health["status"] == "degraded" and "another file" in health["problems"][0], health
            errors = status["write_errors"]
            wait_for(lambda: get_json(base + "/api/v1/status")["sidecar"]["recording"]["write_errors"] > errors,
                  "each tick not written to be counted", log)
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
        assert rec.read_bytes() == kept
        assert "last tick written" not in log.read_text()
        assert sum("another file" in x for x in log.read_text().splitlines()) == 1  # said once, not every tick


def test_a_recording_truncated_while_running_is_moved_aside_with_recording_reset_and_a_fresh_one_written(tmp_path):
    with counting_server({"good": 5}) as server:
        proc_cm, base, rec, log = _start(tmp_path, server, "--recording-reset")
        with proc_cm:
            wait_for(lambda: rec.exists() and _rows(rec) >= 2, "recorded rows", log)
            with open(rec, "r+b") as f:
                f.truncate(0)
            line = wait_for(lambda: next((x for x in log.read_text().splitlines() if "truncated to 0 bytes" in x), None),
                         "the damage to be said", log)
            assert "WARNING" in line and "moved it to rec.sqlite.corrupt-" in line, line
            assert list(tmp_path.glob("rec.sqlite.corrupt-*"))
            wait_for(lambda: _rows(rec) >= 2, "rows in the fresh recording", log)
            assert get_json(base + "/api/v1/status")["sidecar"]["recording"]["writing"] is True


def test_a_recording_overwritten_while_running_stops_being_written_without_recording_reset(tmp_path):
    with counting_server({"good": 5}) as server:
        proc_cm, base, rec, log = _start(tmp_path, server)
        with proc_cm:
            wait_for(lambda: rec.exists() and _rows(rec) >= 2, "recorded rows", log)
            with open(rec, "r+b") as f:
                f.write(b"garbage" * 20)
            line = wait_for(lambda: next((x for x in log.read_text().splitlines() if "damaged while" in x), None),
                         "the damage to be said", log)
            assert "ERROR" in line and "--recording-reset" in line, line
            assert get_json(base + "/healthz")["status"] == "degraded"
