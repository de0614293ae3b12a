"""The sidecar's port under too many connections: capped, the excess shed at accept and counted, the
overload logged once per interval (not per connection), failed accepts without tracebacks."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from monitor.config import parse_config
from monitor.sidecar import Sidecar
from tests.export.test_http_server import _exchange, _get


async def _sidecar(**settings) -> tuple[Sidecar, int]:  # type: ignore[no-untyped-def]
    sc = Sidecar(parse_config({"sidecar": settings, "deployments": [
        {"name": "d", "tpot_target_seconds": 0.04, "targets": []}]}))
    return sc, await sc.start_http("127.0.0.1", 0)


async def _open_idle(port: int, n: int) -> list[asyncio.StreamWriter]:
    """`n` connections that send nothing (what a flood of slow clients holds)."""
    writers = []
    for _ in range(n):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writers.append(writer)
    await asyncio.sleep(0.2)  # accepted and counted by the server
    return writers


def test_connections_past_max_connections_are_shed_with_a_503_counted_and_said_once(caplog):
    caplog.set_level(logging.INFO)

    async def go() -> tuple[list[bytes], str, bytes]:
        sc, port = await _sidecar(max_connections=4)
        try:
            idle = await _open_idle(port, 4)
            shed = await asyncio.gather(*(_exchange(port, _get("/healthz"), wait=5) for _ in range(12)))
            for w in idle:
                w.close()
            await asyncio.sleep(0.2)  # the cap frees as they close
            health = await _exchange(port, _get("/healthz"))
            metrics = (await _exchange(port, _get("/metrics"))).decode()
            return shed, metrics, health
        finally:
            await sc.close()

    shed, metrics, health = asyncio.run(go())
    assert all(a.startswith(b"HTTP/1.1 503 ") and b"too many connections" in a for a in shed)
    assert health.startswith(b"HTTP/1.1 200 ")
    assert "slo_monitor_http_connections_shed_total 12.0" in metrics
    assert "slo_monitor_http_connections_limit 4.0" in metrics
    said = [r for r in caplog.records if "sidecar.max_connections" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING


def test_the_default_cap_is_derived_from_the_open_files_limit():
    import resource

    async def go() -> int | None:
        sc, _ = await _sidecar()
        try:
            return sc.guard.limit if sc.guard else None
        finally:
            await sc.close()

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = asyncio.run(go())
    assert limit is not None and 16 <= limit <= 4096 and limit < soft / 2


def test_connections_closed_at_the_header_timeout_are_said_once_per_interval_not_each(caplog):
    """~7,000 INFO lines a minute under a flood of idle connections: now the first, then one count."""
    caplog.set_level(logging.INFO)

    async def go() -> None:
        sc, port = await _sidecar(http_header_timeout_seconds=0.2)
        try:
            idle = await _open_idle(port, 20)
            await asyncio.sleep(0.6)
            for w in idle:
                w.close()
        finally:
            await sc.close()

    asyncio.run(go())
    lines = [r for r in caplog.records if "no complete request" in r.getMessage()
             or "sent no complete request" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]


def test_the_throttled_log_says_the_first_at_once_and_the_rest_as_one_count_per_interval(caplog):
    from monitor.export.connections import ThrottledLog

    caplog.set_level(logging.INFO)
    now = [0.0]
    throttled = ThrottledLog(logging.getLogger("t"), 10.0, clock=lambda: now[0])

    async def go() -> None:
        for t in (0.0, 1.0, 2.0, 3.0):
            now[0] = t
            throttled.say("k", logging.WARNING, "first %s", "x", summary="%d more in %gs")
        throttled._tick("k")  # what the loop's timer does at the interval's end
        now[0] = 30.0
        throttled.say("k", logging.WARNING, "first %s", "y", summary="%d more in %gs")

    asyncio.run(go())
    assert [r.getMessage() for r in caplog.records] == ["first x", "3 more in 10s", "first y"]


ACCEPT_FLOOD = textwrap.dedent("""
    import asyncio, resource, sys
    from monitor.config import parse_config
    from monitor.sidecar import Sidecar

    async def main():
        # A cap far above the descriptors: accept itself fails (what 1,100 connections did under 1024).
        cfg = parse_config({"sidecar": {"max_connections": 100000, "open_files_limit": 0}, "deployments": []})
        sc = Sidecar(cfg)
        port = await sc.start_http("127.0.0.1", 0)
        print(port, flush=True)
        # Until accepts have failed (a loaded machine may take long to get there), then a little more.
        for _ in range(int(float(sys.argv[1]) * 10)):
            if sc.guard.accept_errors:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        print("accept_errors", sc.guard.accept_errors, flush=True)
        await sc.close()

    resource.setrlimit(resource.RLIMIT_NOFILE, (96, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    asyncio.run(main())
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_NOFILE as on Linux")
def test_failed_accepts_out_of_descriptors_are_counted_and_said_once_without_tracebacks():
    proc = subprocess.Popen([sys.executable, "-c", ACCEPT_FLOOD, "30"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=os.getcwd())
    held = []
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        for _ in range(150):  # more than its 96 descriptors
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:  # the listen backlog is full, or the server has reported and gone
                break
        out, err = proc.communicate(timeout=60)
    finally:
        for s in held:
            s.close()
        if proc.poll() is None:
            proc.kill()
    errors = int(out.split("accept_errors")[1])
    assert errors >= 1
    assert "Traceback" not in err and "out of system resource" not in err
    assert err.count("cannot accept connections") == 1, err[-2000:]


def test_slow_connections_at_the_cap_do_not_delay_healthz_once_they_expire():
    """The cap holds while idle connections expire at the header timeout; afterwards probes get in."""

    async def go() -> float:
        sc, port = await _sidecar(max_connections=8, http_header_timeout_seconds=0.3)
        try:
            idle = await _open_idle(port, 8)
            await asyncio.sleep(0.5)  # closed by the deadline: their slots are free again
            began = time.perf_counter()
            answer = await _exchange(port, _get("/healthz"))
            assert answer.startswith(b"HTTP/1.1 200 ")
            for w in idle:
                w.close()
            return time.perf_counter() - began
        finally:
            await sc.close()

    assert asyncio.run(go()) < 5.0
