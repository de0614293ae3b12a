"""SQLite recording: one file per sidecar, bounded by age, crash-safe.

Per deployment and recording tick it keeps the merged snapshot (raw material for any window) and a
compact state row (SLIs, burn rates, load, targets, accelerators) for post-incident analysis, plus
the latest accumulator book so a restarted sidecar continues its windows instead of restarting
them. WAL mode and one transaction per tick: a sidecar killed mid-write leaves the last complete
tick; SQLite rolls the partial one back on the next open.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from monitor.record.codec import book_from, book_to, snapshot_from, snapshot_to
from monitor.slo.accumulate import SeriesBook
from monitor.slo.windows import Snapshot

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
    deployment TEXT NOT NULL, ts REAL NOT NULL, snapshot TEXT NOT NULL, state TEXT,
    PRIMARY KEY (deployment, ts)
);
CREATE TABLE IF NOT EXISTS books (deployment TEXT PRIMARY KEY, ts REAL NOT NULL, book TEXT NOT NULL);
"""
SCHEMA_VERSION = "1"


class RecordingError(Exception):
    pass


class Recording:
    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        if readonly:
            if not self.path.exists():
                raise RecordingError(f"{self.path}: no recording here")
            self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path)
            try:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(SCHEMA)
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
                self.db.commit()
            except sqlite3.DatabaseError as err:
                self.db.close()
                raise RecordingError(f"{self.path}: not a recording ({err}); move it away or pick another path") from None
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.DatabaseError as err:
            raise RecordingError(f"{self.path}: not a recording ({err})") from None
        if row is None or row[0] != SCHEMA_VERSION:
            raise RecordingError(f"{self.path}: recording schema {row[0] if row else '?'} is not {SCHEMA_VERSION}")

    def close(self) -> None:
        self.db.close()

    def write_tick(self, rows: list[tuple[str, Snapshot, dict[str, Any] | None, SeriesBook]],
                   *, retain_seconds: float) -> None:
        """One transaction for every deployment of a tick, then drop rows past the retention."""
        with self.db:
            for name, snap, state, book in rows:
                self.db.execute(
                    "INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?)",
                    (name, snap.ts, json.dumps(snapshot_to(snap)), json.dumps(state) if state else None),
                )
                self.db.execute("INSERT OR REPLACE INTO books VALUES (?, ?, ?)",
                                (name, snap.ts, json.dumps(book_to(book))))
            if rows:
                newest = max(r[1].ts for r in rows)
                self.db.execute("DELETE FROM snapshots WHERE ts < ?", (newest - retain_seconds,))

    def deployments(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT deployment FROM snapshots ORDER BY 1")]

    def snapshots(self, deployment: str, start: float | None = None, end: float | None = None) -> Iterator[Snapshot]:
        q = "SELECT snapshot FROM snapshots WHERE deployment = ? AND ts >= ? AND ts <= ? ORDER BY ts"
        for (data,) in self.db.execute(q, (deployment, start if start is not None else -1e18,
                                           end if end is not None else 1e18)):
            yield snapshot_from(json.loads(data))

    def states(self, deployment: str, start: float | None = None, end: float | None = None
               ) -> Iterator[tuple[float, dict[str, Any]]]:
        q = ("SELECT ts, state FROM snapshots WHERE deployment = ? AND ts >= ? AND ts <= ? "
             "AND state IS NOT NULL ORDER BY ts")
        for ts, data in self.db.execute(q, (deployment, start if start is not None else -1e18,
                                            end if end is not None else 1e18)):
            yield ts, json.loads(data)

    def book(self, deployment: str) -> tuple[float, SeriesBook] | None:
        row = self.db.execute("SELECT ts, book FROM books WHERE deployment = ?", (deployment,)).fetchone()
        return None if row is None else (row[0], book_from(json.loads(row[1])))

    def span(self, deployment: str) -> tuple[float, float] | None:
        row = self.db.execute("SELECT MIN(ts), MAX(ts) FROM snapshots WHERE deployment = ?", (deployment,)).fetchone()
        return None if row is None or row[0] is None else (row[0], row[1])
