"""Start a real server process for a test, wait until it answers, always stop it."""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


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
