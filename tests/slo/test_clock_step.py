"""A wall clock that steps forward while the sidecar runs (issue #34 item 4): NTP stepping a clock that was
behind, or a clock set by hand, with the steady clock untouched. Before, the history stayed where it was: the 5m
window claimed 300 s covered while it held ~6 s of scrapes, the request rate read a fraction of the true one,
and nothing was logged (a backward step was)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from monitor.config import parse_config
from monitor.sidecar import Sidecar
from tests.exposition_server import counting_server

RATE = 20.0  # requests a second the target's counters grow by
STEP = 600.0


def _grow(state: dict, stop: threading.Event) -> None:
    while not stop.wait(1 / RATE):
        with state["lock"]:
            state["good"] += 1


async def _run_for(sidecar: Sidecar, seconds: float) -> None:
    task = asyncio.create_task(sidecar.run())
    await asyncio.sleep(seconds)
    sidecar.stop()
    await task
    sidecar._stop.clear()


def test_a_forward_wall_clock_step_moves_the_history_with_it_and_is_said(caplog):
    state: dict = {"good": 0, "lock": threading.Lock()}
    offset = [0.0]
    stop = threading.Event()
    with counting_server(state) as server:
        config = parse_config({
            "sidecar": {"scrape_interval_seconds": 0.2, "scrape_timeout_seconds": 0.2},
            "deployments": [{"name": "a", "tpot_target_seconds": 0.04,
                             "targets": [{"role": "server", "url": f"{server}/a"}]}]})
        sidecar = Sidecar(config, clock=lambda: time.time() + offset[0], steady=time.monotonic)
        grower = threading.Thread(target=_grow, args=(state, stop), daemon=True)
        grower.start()
        began = time.monotonic()
        try:
            with caplog.at_level(logging.WARNING):
                asyncio.run(_steps(sidecar, offset))
        finally:
            stop.set()
        elapsed = time.monotonic() - began
        window = sidecar.status().deployments[0].slis[0].windows[0]
    assert window.window == "5m"
    # The window covers the ~4 s the sidecar scraped, not 300 s; so the rate it implies is the true one.
    assert window.covered_seconds < elapsed, (window.covered_seconds, elapsed)
    assert window.events / window.covered_seconds > RATE * 0.6, (window.events, window.covered_seconds)
    said = [r.getMessage() for r in caplog.records if "stepped forward" in r.getMessage()]
    assert len(said) == 1 and f"{STEP:.0f} s" in said[0], said


async def _steps(sidecar: Sidecar, offset: list[float]) -> None:
    await _run_for(sidecar, 2.0)
    offset[0] += STEP  # the wall clock jumps; the steady clock does not
    await _run_for(sidecar, 2.0)
