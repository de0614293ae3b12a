"""RequestLogReader: every `request-log` target of a config, tailed and turned into goodput windows.

Synchronous and cheap when nothing changed (one directory listing and a stat per file): the
sidecar calls `poll(now)` once per scrape cycle; what it read (`summaries`, `counts()`) becomes the read
model's goodput windows and the request-log families (`monitor.export.requestlog`). With a
`state_path` the per-file offsets and the line/error counters survive restarts (JSON, replaced
atomically after every poll that read something).
"""

from __future__ import annotations

import json
import logging
import os
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.config import Config, Deployment, Target
from monitor.conventions.policy import SIDECAR_WINDOWS
from monitor.conventions.slis import REQUEST_SLIS
from monitor.requestlog.goodput import WindowGoodput, pack, summarize
from monitor.requestlog.records import RecordError, evaluate, parse_line, request_targets
from monitor.requestlog.tail import FileOffset, LogTailer

log = logging.getLogger(__name__)
STATE_VERSION = 1
LOGGED_ERRORS_PER_POLL = 5


@dataclass(frozen=True)
class TargetCounts:
    """One request-log target's counters since it was first read (they survive restarts with `state_path`)."""

    deployment: str
    target: str
    lines: int
    errors: int
    finished: int = 0
    good: int = 0


@dataclass
class TargetLog:
    deployment: str
    target: Target
    tailer: LogTailer
    lines: int = 0
    errors: int = 0
    # Requests first read from this target, and those of them that succeeded and met every target:
    # counters, so Prometheus can take rates over any window (the goodput SLO's 1d/3d ticket windows).
    finished: int = 0
    good: int = 0
    last_error: str | None = None


@dataclass
class Requests:
    """One deployment's requests inside the longest window, sorted by finish time."""

    ts: list[float] = field(default_factory=list)
    masks: list[int] = field(default_factory=list)

    def add(self, finished: float, mask: int) -> None:
        if not self.ts or finished >= self.ts[-1]:
            self.ts.append(finished)
            self.masks.append(mask)
            return
        # Out of order (several servers, or a late line): keep the list sorted.
        i = bisect_right(self.ts, finished)
        self.ts.insert(i, finished)
        self.masks.insert(i, mask)

    def prune(self, before: float) -> None:
        i = bisect_right(self.ts, before)
        if i:
            del self.ts[:i]
            del self.masks[:i]


def state_path_for(recording_path: str | None) -> Path | None:
    """Where the sidecar keeps offsets: next to its SQLite recording (none without one)."""
    return Path(recording_path + ".request-log-offsets.json") if recording_path else None


class RequestLogReader:
    def __init__(self, config: Config, state_path: str | Path | None = None, *,
                 windows: Mapping[str, int] = SIDECAR_WINDOWS, clock: Callable[[], float] = time.time) -> None:
        self.windows = dict(windows)
        self.clock = clock
        self.state_path = Path(state_path) if state_path else None
        saved = self._load_state()
        self.deployments: dict[str, Deployment] = {}
        self.targets: list[TargetLog] = []
        self.requests: dict[str, Requests] = {}
        self.summaries: dict[str, dict[str, WindowGoodput]] = {}
        for dep in config.deployments:
            logs = [t for t in dep.targets if t.source == "request-log" and t.path and not t.has_placeholder]
            if not logs:
                continue
            self.deployments[dep.name] = dep
            self.requests[dep.name] = Requests()
            for t in logs:
                s = saved.get(_key(dep.name, t), {})
                files = {k: FileOffset.from_json(v) for k, v in s.get("files", {}).items()}
                self.targets.append(TargetLog(dep.name, t, LogTailer(t.path or "", files),
                                              int(s.get("lines_total", 0)), int(s.get("errors_total", 0)),
                                              int(s.get("finished_total", 0)), int(s.get("good_total", 0))))

    def __bool__(self) -> bool:
        return bool(self.targets)

    # --- state -----------------------------------------------------------------------------------
    def _load_state(self) -> dict[str, Any]:
        if self.state_path is None or not self.state_path.exists():
            return {}
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"version {data.get('version')!r}")
            return dict(data["targets"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            # Starting over re-reads the files in the windows; only the counters restart.
            log.warning("%s: unusable request-log offsets (%s); starting from the files' start", self.state_path, err)
            return {}

    def save(self) -> None:
        if self.state_path is None:
            return
        data = {"version": STATE_VERSION, "targets": {
            _key(t.deployment, t.target): {
                "path": t.target.path, "lines_total": t.lines, "errors_total": t.errors,
                "finished_total": t.finished, "good_total": t.good,
                "files": {k: v.to_json() for k, v in sorted(t.tailer.snapshot().items())},
            } for t in self.targets}}
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.state_path)

    # --- reading ---------------------------------------------------------------------------------
    def poll(self, now: float | None = None) -> int:
        """Read what is new in every target's files; returns the lines read (replays included)."""
        now = self.clock() if now is None else now
        horizon = now - max(self.windows.values())
        read = 0
        logged = 0
        changed = False
        for tl in self.targets:
            dep = self.deployments[tl.deployment]
            targets = request_targets({s: dep.target_seconds(s) for s in REQUEST_SLIS})
            buf = self.requests[tl.deployment]
            ev = tl.tailer.poll(horizon)
            for name in ev.truncated:
                log.warning("%s/%s was truncated: reading it again from the start", tl.target.path, name)
            for name in ev.replaced:
                log.info("%s/%s is a new file under an old name: reading it from the start", tl.target.path, name)
            for line in ev.lines:
                read += 1
                if not line.replayed:
                    tl.lines += 1
                try:
                    rec = parse_line(line.text)
                except RecordError as err:
                    if line.replayed:
                        continue
                    tl.errors += 1
                    tl.last_error = f"{tl.target.path}/{line.file}:{line.number}: {err}"
                    if logged < LOGGED_ERRORS_PER_POLL:
                        log.warning("skipping malformed request-log line %s", tl.last_error)
                    logged += 1
                    continue
                in_window = rec.finished_ts > horizon
                if line.replayed and not in_window:
                    continue  # counted before the restart and too old for the windows
                verdict = evaluate(rec, targets)
                if not line.replayed:
                    tl.finished += 1
                    tl.good += int(verdict.good)
                if in_window:
                    buf.add(rec.finished_ts, pack(verdict))
            changed = changed or bool(ev.lines or ev.truncated or ev.replaced or ev.deleted or ev.skipped)
        if logged > LOGGED_ERRORS_PER_POLL:
            log.warning("%d more malformed request-log lines skipped", logged - LOGGED_ERRORS_PER_POLL)
        for name, buf in self.requests.items():
            buf.prune(horizon)
            dep = self.deployments[name]
            slis = tuple(request_targets({s: dep.target_seconds(s) for s in REQUEST_SLIS}))
            self.summaries[name] = summarize(buf.ts, buf.masks, now, slis, self.windows)
        if changed:
            self.save()
        return read

    # --- what was read --------------------------------------------------------------------------
    def counts(self) -> list[TargetCounts]:
        return [TargetCounts(t.deployment, t.target.id, t.lines, t.errors, t.finished, t.good) for t in self.targets]


def _key(deployment: str, target: Target) -> str:
    return f"{deployment}/{target.id}"
