"""Start a real server process for a test, wait until it answers, always stop it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def running(argv: list[str], log: Path, *, ready_url: str | None = None, timeout: float = 30.0
            ) -> Iterator[subprocess.Popen]:
    """Run `argv` (stderr to `log`); with `ready_url`, yield once it answers 200."""
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        try:
            if ready_url:
                deadline = time.monotonic() + timeout
                while not answers(ready_url):
                    assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                    time.sleep(0.2)
            yield proc
        finally:
            stop(proc)


def wait_until(pred, timeout: float, interval: float = 0.5, what: str = "condition"):  # noqa: ANN001
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


def wait_for(predicate: Callable[[], T], what: str, log: Path, timeout: float = 20.0, every: float = 0.1) -> T:
    """`wait_until`, and on a timeout the end of the process's `log` with what was awaited."""
    try:
        return wait_until(predicate, timeout, every, what)
    except AssertionError as err:
        raise AssertionError(f"{err}:\n{log.read_text()[-4000:]}") from None


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())
