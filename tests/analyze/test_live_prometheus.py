"""(a) again, from a real Prometheus (2.42 and 3.x) scraping the emulator in real time (emulated time 20x faster)."""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from pathlib import Path

import pytest
import yaml

from monitor.analyze.prometheus import load_prometheus
from monitor.analyze.report import analyze
from monitor.emulate import Emulator
from tests.analyze.conftest import INCIDENT_AT, QUEUE_INCIDENT, RATE, T1, T2, WINDOW, make_config
from tests.components import Build
from tests.conftest import free_port
from tests.procs import running

SPEED = 20.0  # emulated seconds per real second: T2 (960 s) is 48 s of wall time
SCRAPE = 0.5  # seconds of wall time = 10 emulated seconds (Prometheus is given, and answers with, `500ms`)


class ThreadedEmulator:
    """The emulator on its own event loop, so it serves Prometheus while the test waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.emu = Emulator(make_config(), 0, speed=SPEED, seed=1, incidents=[QUEUE_INCIDENT],
                            rates={"llama": RATE}, tick_seconds=0.1)

    def call(self, coro, timeout: float = 20):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def clock_pair(self) -> tuple[float, float]:
        async def read() -> tuple[float, float]:
            return time.time(), self.emu.deployments["llama"].now

        return self.call(read())

    def __enter__(self) -> ThreadedEmulator:
        self.thread.start()
        self.call(self.emu.start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self.emu.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def prometheus_yml(config) -> str:
    """What the generated config does for these targets: jobs per role, `deployment`/`role` labels."""
    jobs = []
    for t in config.deployment("llama").targets:
        host = t.url.removeprefix("http://").split("/", 1)[0]
        jobs.append({"job_name": f"{t.role}-{t.name}", "static_configs": [
            {"targets": [host], "labels": {"deployment": "llama", "role": t.role}}]})
    every = f"{SCRAPE * 1000:.0f}ms"
    return yaml.safe_dump({"global": {"scrape_interval": every, "scrape_timeout": every, "evaluation_interval": every},
                           "scrape_configs": jobs})


@pytest.fixture()
def live(tmp_path: Path, prometheus_build: Build):
    """Prometheus 2.42 and 3.x, each with a plain scrape config (no relabelling: names as each stores them)."""
    with ThreadedEmulator() as te:
        (tmp_path / "prometheus.yml").write_text(prometheus_yml(te.emu.localized_config()))
        port = free_port()
        argv = [prometheus_build.server, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}"]
        with running(argv, tmp_path / "prometheus.log", ready_url=f"http://127.0.0.1:{port}/-/ready"):
            yield te, port


def test_queue_buildup_from_prometheus_is_overload_in_the_same_window(live, queue_run):
    te, port = live
    offsets = []
    while True:  # wait until the emulator passed T2 (plus a scrape), noting wall - emulated/SPEED
        wall, now = te.clock_pair()
        offsets.append(wall - now / SPEED)
        if now >= T2 + 2 * SCRAPE * SPEED:
            break
        time.sleep(1.0)
    wall0 = statistics.median(offsets)

    def wall(t: float) -> float:
        return wall0 + t / SPEED

    dep = make_config().deployment("llama")
    messages: list[str] = []
    span = (T2 - T1) / SPEED
    ds = asyncio.run(load_prometheus(f"http://127.0.0.1:{port}", "llama", wall(T1) - span - WINDOW / SPEED, wall(T2),
                                     span, deployment_config=dep, progress=messages.append))
    assert ds.step == SCRAPE and ds.scrape_interval == SCRAPE  # span/300 is finer: the scrape interval wins
    assert any("[1/" in m for m in messages)
    rep = analyze(ds, wall(T1), wall(T2), WINDOW / SPEED)
    tpot = rep.slis["tpot"]
    main = tpot.main_episode
    assert main is not None and main.end is not None
    start, end = (main.start - wall0) * SPEED, (main.end - wall0) * SPEED  # back to emulated seconds
    # The same emulated history (same seed) as the lockstep recording: the same window, give or take the grid.
    # Each end can land up to one step late (range queries see the breach at the next step) plus one scrape
    # late (the instant vector at a step is the last scrape before it), plus the recording's 5 s tick, plus
    # half a wall second for scrapes a busy machine delays: 2 * 10 + 5 + 10 = 35 emulated s.
    rec = queue_run_report(queue_run)
    tol = 2 * SCRAPE * SPEED + 5 + 0.5 * SPEED
    assert abs(start - rec[0]) <= tol and abs(end - rec[1]) <= tol, ((start, end), rec)
    assert start >= INCIDENT_AT  # never before the cause
    # The queue (its length or SGLang's queue_time) moves most with the breach; the verdict names the arrivals.
    assert tpot.ranking[0].key in ("load.server.num_queue_reqs", "queue_time.server"), [
        (c.key, round(c.score, 2)) for c in tpot.ranking[:5]]
    # Arrivals are read from SGLang's HTTP request counter (counted as each request arrives): a rise is never
    # dismissed because the saturated server could not serve more, and a slower decode of a grown batch does not
    # lead it, on the wall clock too.
    v = rep.verdict
    assert v.mechanism == "overload", v.headline
    assert not v.shifts["arrivals"].signal.inferred and "arrival rate rose" in v.headline, v.headline
    print(f"prometheus breach (emulated s): {start:.0f}-{end:.0f}; recording {rec}")
    # Accelerator readings came straight from the npu-exporter job; TTFT blames the queue too.
    assert "accel.temperature_max" in ds.series
    assert rep.slis["ttft"].ranking[0].key in ("load.server.num_queue_reqs", "queue_time.server")
    json.dumps(rep.to_dict())  # serialisable


def queue_run_report(run) -> tuple[float, float]:
    from tests.analyze.test_incidents_recording import _report

    main = _report(run).slis["tpot"].main_episode
    from tests.analyze.conftest import EPOCH

    return main.start - EPOCH, main.end - EPOCH
