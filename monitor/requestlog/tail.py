"""Tail SGLang's hourly request-metrics files in one directory, exactly once per line.

SGLang appends to `sglang-request-metrics-YYYYmmdd_HH.log` (local hour of the write) and opens a new
file on the hour; old files are never deleted by SGLang, but an operator's logrotate may truncate,
move or remove them. Per file we keep (inode, byte offset, lines consumed):
  - only complete lines are consumed: a partially written last line stays unread until its newline;
  - size < offset (same inode): truncated in place, read it again from 0;
  - another inode under the same name: a new file, read from 0;
  - a file that disappeared: forgotten;
  - a file whose hour ended before `horizon` and that we have never seen: skipped to its end (its
    requests are older than every window; reading weeks of logs at start-up would be wasted work).
After a restart with saved offsets the bytes before each offset are read again but flagged
`replayed`: they rebuild the windows while the line/error counters, saved alongside, do not count
them twice.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FILE_RE = re.compile(r"^sglang-request-metrics-(\d{8}_\d{2})\.log$")
READ_CHUNK = 4 * 1024 * 1024


@dataclass
class FileOffset:
    inode: int
    offset: int = 0  # bytes consumed (always just after a newline)
    lines: int = 0  # lines consumed, for naming a bad line `file:line`

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> FileOffset:
        return cls(int(data["inode"]), int(data["offset"]), int(data.get("lines", 0)))


@dataclass(frozen=True)
class Line:
    file: str  # file name inside the directory
    number: int  # 1-based line number in that file
    text: str
    replayed: bool  # already counted before a restart: feed windows, not counters


@dataclass
class TailEvents:
    lines: list[Line] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def file_hour_end(name: str) -> float | None:
    """Unix time at which the (local) hour a file is named after ends."""
    m = FILE_RE.match(name)
    if not m:
        return None
    try:
        start = time.mktime(time.strptime(m.group(1), "%Y%m%d_%H"))
    except (ValueError, OverflowError):
        return None
    return start + 3600.0


class LogTailer:
    def __init__(self, directory: str | Path, saved: dict[str, FileOffset] | None = None) -> None:
        self.directory = Path(directory)
        self.files: dict[str, FileOffset] = {}
        # Bytes already counted by an earlier run, per file: lines before this offset are replays.
        self._replay: dict[str, FileOffset] = dict(saved or {})

    def _names(self) -> list[str]:
        try:
            with os.scandir(self.directory) as it:
                # Name order is time order (YYYYmmdd_HH): older files are finished first.
                return sorted(e.name for e in it if FILE_RE.match(e.name) and e.is_file())
        except FileNotFoundError:
            return []

    def poll(self, horizon: float | None = None) -> TailEvents:
        ev = TailEvents()
        names = self._names()
        for gone in sorted(set(self.files) - set(names)):
            del self.files[gone]
            ev.deleted.append(gone)
        for name in names:
            path = self.directory / name
            try:
                st = path.stat()
            except FileNotFoundError:
                self.files.pop(name, None)
                continue
            state = self.files.get(name)
            if state is None:
                state = self._first_sight(name, st, horizon, ev)
                self.files[name] = state
            elif state.inode != st.st_ino:
                ev.replaced.append(name)
                state = self.files[name] = FileOffset(st.st_ino)
            elif st.st_size < state.offset:
                ev.truncated.append(name)
                state.offset, state.lines = 0, 0
            if st.st_size > state.offset:
                ev.lines.extend(self._read(path, name, state))
        self._replay.clear()  # only the first poll after a restart can replay
        return ev

    def _first_sight(self, name: str, st: os.stat_result, horizon: float | None, ev: TailEvents) -> FileOffset:
        saved = self._replay.get(name)
        old = horizon is not None and (file_hour_end(name) or float("inf")) < horizon
        if saved is not None and saved.inode == st.st_ino and st.st_size >= saved.offset:
            if old:  # nothing of it is in a window: continue where the last run stopped
                return FileOffset(st.st_ino, saved.offset, saved.lines)
            return FileOffset(st.st_ino)  # re-read; lines up to saved.offset are flagged replayed
        self._replay.pop(name, None)  # changed while we were down: everything in it is new
        if saved is not None:
            (ev.truncated if saved.inode == st.st_ino else ev.replaced).append(name)
        if old:
            ev.skipped.append(name)
            return FileOffset(st.st_ino, self._last_newline(name, st.st_size), 0)
        return FileOffset(st.st_ino)

    def _last_newline(self, name: str, size: int) -> int:
        """Offset after the last complete line (a skipped file may end in a partial line)."""
        with open(self.directory / name, "rb") as fh:
            pos = size
            while pos > 0:
                start = max(0, pos - 65536)
                fh.seek(start)
                chunk = fh.read(pos - start)
                i = chunk.rfind(b"\n")
                if i >= 0:
                    return start + i + 1
                pos = start
        return 0

    def _read(self, path: Path, name: str, state: FileOffset) -> Iterator[Line]:
        replay_until = self._replay[name].offset if name in self._replay else 0
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed below; a vanished file yields nothing
        except FileNotFoundError:
            return
        with fh:
            fh.seek(state.offset)
            pending = b""
            while True:
                chunk = fh.read(READ_CHUNK)
                if not chunk:
                    break
                data = pending + chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    pending = data
                    continue
                pending = data[cut + 1:]
                for raw in data[:cut].split(b"\n"):
                    state.offset += len(raw) + 1
                    state.lines += 1
                    if not raw.strip():
                        continue
                    yield Line(name, state.lines, raw.decode("utf-8", errors="replace"),
                               replayed=state.offset <= replay_until)
            # `pending` (no newline yet) is left for the next poll: the offset stops before it.

    def snapshot(self) -> dict[str, FileOffset]:
        return {k: FileOffset(v.inode, v.offset, v.lines) for k, v in self.files.items()}
