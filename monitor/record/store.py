"""SQLite recording: one file per sidecar, bounded by age, crash-safe.

Per deployment and recording tick it keeps the merged snapshot (raw material for any window) and a
compact state row (SLIs, burn rates, load, targets, accelerators) for post-incident analysis, plus
the latest accumulator book so a restarted sidecar continues its windows instead of restarting
them. WAL mode and one transaction per tick: a sidecar killed mid-write leaves the last complete
tick; SQLite rolls the partial one back on the next open. The WAL is checkpointed into the main
file (and truncated) every `checkpoint_seconds` and on open, so it stays small even while a reader
(`analyze`) keeps SQLite's automatic checkpoints from finishing.

A file that cannot be used raises RecordingError, one line naming the file and the problem (a full
disk or an I/O error while opening is only that, never taken for damage):
CorruptRecording when the file itself is damaged (not SQLite, failing its quick check, an empty
main file beside a -wal, an unreadable row); the caller decides between refusing and
`move_aside()` (the sidecar's `--recording-reset`).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

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


CHECKPOINT_SECONDS = 300.0
T = TypeVar("T")


class RecordingError(ValueError):
    """A recording that cannot be used; the message names the file and the problem."""


class CorruptRecording(RecordingError):
    """The file is there but damaged: it can be moved aside (move_aside) and a fresh one started."""


class RecordingGone(RecordingError):
    """The file open here is no longer at its path (deleted, or another file put there) while it was written."""


SQLITE_HEADER = b"SQLite format 3\x00"


def move_aside(path: str | Path, now: float | None = None) -> Path:
    """Rename a damaged recording (and its -wal/-shm) to `<file>.corrupt-<UTC time>`; returns the new name."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while any(Path(f"{aside}{s}").exists() for s in ("", "-wal", "-shm")):
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}.{n}")
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    return aside


def _check_file(path: Path) -> None:
    """What SQLite would not say (or would silently 'repair') before it opens the file."""
    if path.is_dir():
        raise RecordingError(f"{path}: is a directory, not a recording file; set sidecar.recording_path to a file "
                             f"path (e.g. {path / 'slo-monitor.sqlite'})")
    wal = Path(f"{path}-wal")
    if path.exists() and path.stat().st_size == 0 and wal.exists() and wal.stat().st_size > 0:
        # Opened as it is, SQLite would start an empty database and drop the log: the history is gone.
        raise CorruptRecording(f"{path}: the main file is empty but {wal.name} holds {wal.stat().st_size} bytes "
                               "(the file was truncated, or copied without its -wal); not a usable recording")


class Recording:
    def __init__(self, path: str | Path, *, readonly: bool = False,
                 checkpoint_seconds: float = CHECKPOINT_SECONDS) -> None:
        self.path = Path(path)
        self.checkpoint_seconds = checkpoint_seconds
        self._last_checkpoint = time.monotonic()
        self._thinned: dict[float, float] = {}  # per thinning step, the cut it was applied up to
        _check_file(self.path)
        if readonly:
            if not self.path.exists():
                raise RecordingError(f"{self.path}: no recording here")
            self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path)
        try:
            self._check_integrity()
            if not readonly:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(SCHEMA)
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
                self.db.commit()
                self.checkpoint()
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.OperationalError as err:
            # Disk full, I/O error, no permission: the file may be sound, so never "damaged" (which
            # --recording-reset would move aside); SQLite reports damage as DatabaseError proper.
            self.db.close()
            raise RecordingError(f"{self.path}: cannot open the recording ({err}); the file is not found damaged: "
                                 "free space on its file system or fix its permissions, then start again") from None
        except sqlite3.DatabaseError as err:
            self.db.close()
            raise CorruptRecording(f"{self.path}: not a recording ({err})") from None
        except RecordingError:
            self.db.close()
            raise
        if row is None or row[0] != SCHEMA_VERSION:
            self.db.close()
            raise CorruptRecording(f"{self.path}: recording schema {row[0] if row else '?'} is not {SCHEMA_VERSION}")
        # Which file this is: a file deleted or replaced at the path later is told from this one (`check_file`).
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)

    def check_file(self) -> None:
        """Before each write: the file at the path is still the one open here, and still starts as SQLite's do.
        A deleted file would be written on unseen (the open handle keeps it) and lost at the next start; a file
        truncated or overwritten from its start is found here at once, not at the next start. Damage further
        in is found by SQLite while writing, or by the quick check at each checkpoint."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise RecordingGone(f"{self.path}: the recording was deleted while the sidecar wrote it") from None
        if (st.st_dev, st.st_ino) != self._identity:
            raise RecordingGone(f"{self.path}: another file was put at the recording's path while the sidecar wrote "
                                "it")
        with open(self.path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
        if head != SQLITE_HEADER:
            what = "truncated to 0 bytes" if st.st_size == 0 else "overwritten: its first bytes are not SQLite's"
            raise CorruptRecording(f"{self.path}: the file was damaged while the sidecar wrote it ({what})")

    def _check_integrity(self) -> None:
        # quick_check reads every page (O(size), ~0.1 s for 25 MB): a truncated or overwritten file
        # is found now, with its name, not as "malformed" in the middle of a scrape cycle.
        problems = [r[0] for r in self.db.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            raise CorruptRecording(f"{self.path}: the file is damaged ({'; '.join(problems)[:200]})")

    def checkpoint(self) -> None:
        """Copy the WAL into the main file and truncate it (a reader mid-transaction only delays it)."""
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        self._last_checkpoint = time.monotonic()

    def _rows(self, table: str, query: str, args: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        try:
            yield from self.db.execute(query, args)
        except sqlite3.DatabaseError as err:
            raise CorruptRecording(f"{self.path}: table {table} cannot be read ({err})") from None

    def _decode(self, table: str, deployment: str, ts: float, text: str, decode: Callable[[Any], T]) -> T:
        try:
            return decode(json.loads(text))
        except RecursionError:  # nesting deeper than the parser's recursion: no row the sidecar writes
            raise CorruptRecording(f"{self.path}: the row of {deployment!r} at ts {ts:.3f} in table {table} is "
                                   "unreadable (JSON nested too deeply)") from None
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
            what = f"{type(err).__name__}: {err}" if not isinstance(err, KeyError) else f"missing field {err}"
            raise CorruptRecording(f"{self.path}: the row of {deployment!r} at ts {ts:.3f} in table {table} is "
                                   f"unreadable ({what[:160]})") from None

    def close(self) -> None:
        self.db.close()

    def write_tick(self, rows: list[tuple[str, Snapshot, dict[str, Any] | None, SeriesBook]],
                   *, retain_seconds: float, thin: Sequence[tuple[float, float]] = ()) -> int:
        """One transaction for every deployment of a tick, then drop rows past the retention and thin
        the older ones: for each (age, step) of `thin`, rows older than `age` keep one per `step`.
        Returns the bytes of the snapshot rows written (the books replace their previous row). Damage SQLite
        meets while writing ("database disk image is malformed") raises CorruptRecording; a full disk or an I/O
        error stays sqlite3.OperationalError (the file may be sound)."""
        try:
            return self._write_tick(rows, retain_seconds=retain_seconds, thin=thin)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as err:
            raise CorruptRecording(f"{self.path}: the file is damaged ({err})") from None

    def _write_tick(self, rows: list[tuple[str, Snapshot, dict[str, Any] | None, SeriesBook]],
                    *, retain_seconds: float, thin: Sequence[tuple[float, float]]) -> int:
        written = 0
        with self.db:
            for name, snap, state, book in rows:
                snapshot, state_text = json.dumps(snapshot_to(snap)), json.dumps(state) if state else None
                written += len(name) + len(snapshot) + len(state_text or "") + 16
                self.db.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?)",
                                (name, snap.ts, snapshot, state_text))
                self.db.execute("INSERT OR REPLACE INTO books VALUES (?, ?, ?)",
                                (name, snap.ts, json.dumps(book_to(book))))
            if rows:
                newest = max(r[1].ts for r in rows)
                self.db.execute("DELETE FROM snapshots WHERE ts < ?", (newest - retain_seconds,))
                for age, step in thin:
                    self._thin(newest - age, step)
        if time.monotonic() - self._last_checkpoint >= self.checkpoint_seconds:
            self.checkpoint()
            self._check_integrity()  # damage past the header, found within a checkpoint interval
        return written

    def _thin(self, cut: float, step: float) -> None:
        """Keep, of the rows older than `cut`, the earliest of each deployment in each `step`-long bucket
        (buckets aligned to the epoch, so the kept rows do not move as the cut does). Only the rows that
        aged past the cut since the last call are looked at (all of them after opening); the earlier row
        a deleted one has is found on the primary key."""
        lo = min(self._thinned.get(step, -math.inf), cut)
        self.db.execute(
            "DELETE FROM snapshots AS s WHERE s.ts >= ? AND s.ts < ? AND EXISTS (SELECT 1 FROM snapshots AS o "
            "WHERE o.deployment = s.deployment AND o.ts < s.ts AND o.ts >= ? * CAST(s.ts / ? AS INTEGER))",
            (lo if lo > -math.inf else -1e18, cut, step, step))
        self._thinned[step] = cut

    def mark_epochs(self, deployments: Iterable[str], ts: float) -> None:
        """`deployments` start their windows again at `ts` (a reload rebuilt or added them): restore reads their
        rows from there on. Their older rows stay, for `analyze`."""
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                [(f"epoch:{name}", repr(float(ts))) for name in deployments])

    def epoch(self, deployment: str) -> float | None:
        """When `deployment`'s windows last started again (`mark_epochs`), or None."""
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (f"epoch:{deployment}",)).fetchone()
        if row is None:
            return None
        try:
            value = float(row[0])
        except ValueError:
            raise CorruptRecording(f"{self.path}: meta row epoch:{deployment} is not a time ({row[0]!r:.60})"
                                   ) from None
        return value if math.isfinite(value) else None

    def deployments(self) -> list[str]:
        q = "SELECT DISTINCT deployment FROM snapshots ORDER BY 1"
        return [r[0] for r in self._rows("snapshots", q, ())]

    def snapshots(self, deployment: str, start: float | None = None, end: float | None = None) -> Iterator[Snapshot]:
        q = "SELECT ts, snapshot FROM snapshots WHERE deployment = ? AND ts >= ? AND ts <= ? ORDER BY ts"
        for ts, data in self._rows("snapshots", q, (deployment, start if start is not None else -1e18,
                                                    end if end is not None else 1e18)):
            yield self._decode("snapshots", deployment, ts, data, snapshot_from)

    def states(self, deployment: str, start: float | None = None, end: float | None = None
               ) -> Iterator[tuple[float, dict[str, Any]]]:
        q = ("SELECT ts, state FROM snapshots WHERE deployment = ? AND ts >= ? AND ts <= ? "
             "AND state IS NOT NULL ORDER BY ts")
        for ts, data in self._rows("snapshots", q, (deployment, start if start is not None else -1e18,
                                                    end if end is not None else 1e18)):
            yield ts, self._decode("snapshots", deployment, ts, data, _state)

    def book(self, deployment: str, target_ids: Iterable[str] = ()) -> tuple[float, SeriesBook] | None:
        """The latest accumulator book; its (redacted) target ids mapped back to `target_ids`."""
        q = "SELECT ts, book FROM books WHERE deployment = ?"
        row = next(self._rows("books", q, (deployment,)), None)
        ids = list(target_ids)
        return None if row is None else (row[0], self._decode("books", deployment, row[0], row[1],
                                                              lambda d: book_from(d, ids)))

    def span(self, deployment: str) -> tuple[float, float] | None:
        q = "SELECT MIN(ts), MAX(ts) FROM snapshots WHERE deployment = ?"
        row = next(self._rows("snapshots", q, (deployment,)), None)
        return None if row is None or row[0] is None else (row[0], row[1])


# The shape of a state row's fields as the sidecar writes them (`monitor.sidecar.state_row`): field -> (the type of
# the field, the type of each of its values). A row of another shape is refused whole, in one line, here rather
# than as a traceback wherever the analysis first touches it.
_STATE_SHAPE: dict[str, tuple[type, type | None]] = {
    "slis": (dict, dict), "load": (dict, dict), "rates": (dict, None), "targets": (dict, dict),
    "accelerators": (list, dict), "goodput": (dict, None),
}


def _state(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise TypeError(f"state is a {type(data).__name__}, not an object")
    for name, (whole, each) in _STATE_SHAPE.items():
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, whole):
            raise TypeError(f"state field {name!r} is a {type(value).__name__}, not a {whole.__name__}")
        items = value.values() if isinstance(value, dict) else value
        if each is not None and not all(isinstance(v, each) for v in items):
            raise TypeError(f"state field {name!r} holds a value that is not a {each.__name__}")
    goodput = data.get("goodput")
    if goodput is not None and not isinstance(goodput.get("targets", {}), dict):
        raise TypeError("state field 'goodput.targets' is not an object")
    return data
