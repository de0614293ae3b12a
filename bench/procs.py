"""Child processes of the benchmarks: start pinned, wait until they answer, measure, always stop."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from monitor.emulate.topology import find_free_port as free_port  # noqa: F401 - re-exported; outside the ephemeral range
from tests.procs import stop  # terminate, then kill: one helper for tests and benchmarks

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its threads included), from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in task.read_text().split()]
    return out


def tree(pid: int) -> list[int]:
    """`pid` and every process below it (a sidecar's parser workers)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += _children(p)
    return pids


def cpu_ns(pid: int) -> int:
    """CPU time of a process and its descendants, every thread, in ns (/proc/*/task/*/schedstat: no
    10 ms ticks, so a 15 s window of a few ms per scrape is measured, not rounded)."""
    total = 0
    for p in tree(pid):
        for task in Path(f"/proc/{p}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):  # a thread that ended meanwhile
                total += int(task.read_text().split()[0])
    return total


def rss_tree_mb(pid: int) -> float:
    """VmRSS of a process and its descendants (pages shared between them counted in each)."""
    total = 0.0
    for p in tree(pid):
        with contextlib.suppress(OSError):
            total += rss_mb(p)[0]
    return total


def rss_mb(pid: int | str = "self") -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB."""
    vals = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            vals[key] = int(rest.split()[0]) / 1024
    return vals.get("VmRSS", 0.0), vals.get("VmHWM", 0.0)


def pin(cores: set[int] | None) -> None:
    if cores and hasattr(os, "sched_setaffinity"):
        usable = cores & os.sched_getaffinity(0)
        if usable:
            os.sched_setaffinity(0, usable)


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


@contextlib.contextmanager
def started(cmd: Sequence[str], *, cores: set[int] | None = None, env: dict[str, str] | None = None,
            stdout: int | None = subprocess.PIPE, stderr: Any = subprocess.PIPE) -> Iterator[subprocess.Popen]:
    """Run `cmd` in ROOT for the duration of the block; terminated (then killed) on the way out. A child
    that logs a lot while nobody reads its stderr gets a file (`stderr`), or a full pipe stops it."""
    proc = subprocess.Popen(list(cmd), cwd=ROOT, stdout=stdout, stderr=stderr, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            preexec_fn=(lambda: pin(cores)) if cores else None)
    try:
        yield proc
    finally:
        stop(proc)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def read_port(proc: subprocess.Popen, timeout: float = 30.0) -> int:
    """The child prints `PORT n` once it listens."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("PORT "):
            return int(line.split()[1])
        if not line and proc.poll() is not None:
            break
    err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
    raise RuntimeError(f"{proc.args[:3]} did not report its port: {err[-2000:]}")


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: {err[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


def get_json(url: str) -> object:
    import json

    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())
