"""Benchmark 2: 256 targets at a 5 s interval on one core, then 6 h of windows on a simulated clock.

Two processes, one core each: `bench.serve` serves the real fixture at 256 paths (core 1), the sidecar
(core 0) runs its real scrape loop (`Scraper.run`) over 32 deployments x 8 servers and renders its own
/metrics every 15 s (what a Prometheus scraping it costs, less HTTP). Measured over the cycles after the
first: CPU share (process_time / wall), cycle time (`Scraper.last_cycle_seconds`), RSS. Scrapes are
staggered by default (`sidecar.stagger_scrapes`): each deployment runs at its own phase within the
interval, so the cycle time is the slowest deployment's scrape-and-snapshot in the interval, not all
256 targets queued at once (unstaggered, that sum was ~1.6 s here).

Then, in the same process, the clock is moved forward without waiting: 6 h of 5 s snapshots for every
deployment. Only the cycles whose snapshot the store keeps are run (one per 60 s coarse step, then
every 5 s for the last fine horizon): each observes every target from the parsed fixture, its counts
scaled up so windows see traffic, then snapshots. The skipped cycles' snapshots would have been thinned
away, so the held state (what RSS measures) is that of a 6 h run: 5m/30m/1h/6h windows (fine + coarse
snapshots) and 30d budget points. What is simulated: the clock, the traffic (values grow uniformly;
series and label sets are the fixture's) and the skipped cycles; HTTP is not exercised in this part.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import procs
from bench.expositions import fixture_text
from bench.table import markdown, median, quantile

GOALS = {"cpu_share": 0.5, "p99_cycle": 1.0, "rss_mb": 150.0}


def _config(port: int, targets: int, deployments: int, interval: float):
    from monitor.config import Config, Deployment, SidecarSettings, Target

    per = -(-targets // deployments)
    deps = []
    for d in range(deployments):
        ids = range(d * per, min((d + 1) * per, targets))
        deps.append(Deployment(
            name=f"dep-{d}", tpot_target_seconds=0.04, ttft_target_seconds=1.0, itl_target_seconds=0.04,
            targets=[Target(role="server", url=f"http://{procs.HOST}:{port}/fixture/{i}/metrics", name=f"t{i}")
                     for i in ids]))
    return Config(sidecar=SidecarSettings(scrape_interval_seconds=interval,
                                          scrape_timeout_seconds=min(3.0, interval), listen_port=0),
                  deployments=deps)


async def _live(sidecar, cycles: int, interval: float) -> dict[str, object]:
    from prometheus_client import generate_latest

    scraper = sidecar.scraper
    stop = asyncio.Event()
    marks: list[tuple[float, float]] = []  # (wall, cpu) at the end of each cycle
    cycle_s: list[float] = []
    render_s: list[float] = []

    def on_cycle(_now: float) -> None:
        marks.append((time.monotonic(), time.process_time()))
        cycle_s.append(scraper.last_cycle_seconds)
        if scraper.cycles % max(round(15 / interval), 1) == 0:
            t0 = time.process_time()
            generate_latest(sidecar.registry)
            render_s.append(time.process_time() - t0)
        if scraper.cycles >= cycles:
            stop.set()

    await scraper.run(stop, on_cycle)
    (w0, c0), (w1, c1) = marks[0], marks[-1]
    failures = [s.last_error for s in sidecar.observations.statuses.values() if s.last_error]
    return {"cpu_share": (c1 - c0) / (w1 - w0) if w1 > w0 else float("nan"),
            "cycle_seconds": cycle_s[1:] or cycle_s, "render_seconds": render_s,
            "failures": len(failures), "first_failure": failures[0] if failures else None}


def _simulate(sidecar, offset: list[float], hours: float, interval: float, text: str) -> dict[str, object]:
    from monitor.parse.exposition import parse
    from monitor.parse.families import engine_wanted

    base = parse(text, engine_wanted())
    engines = list(sidecar.observations.engines.values())
    steps = int(hours * 3600 / interval)
    coarse = max(round(engines[0].store.coarse_step / interval), 1)
    # Only snapshots that the store keeps are taken: one per coarse step until the last fine horizon,
    # then every interval. Older 5 s snapshots would be thinned away anyway, so the held state (what
    # RSS measures) is the same as after 4,320 real cycles, at a tenth of the CPU.
    fine_from = steps - int(engines[0].store.fine_horizon / interval) - 6
    t0 = time.process_time()
    for step in range(1, steps + 1):
        offset[0] += interval
        if step % coarse == 0 or step >= fine_from:
            # Observed before each kept snapshot, as a real cycle would: every held snapshot then owns
            # fresh objects (edges included), as it does in a real 6 h run.
            scale = 1.0 + step * 0.001  # uniform growth keeps buckets monotone
            expo = base._replace(selected=[s._replace(value=s.value * scale) for s in base.selected])
            for engine in engines:
                for target in engine.deployment.targets:
                    engine.observe(target, expo)
            now = sidecar.clock()
            for engine in engines:
                engine.snapshot(now)
    sim_cpu = time.process_time() - t0
    t1 = time.process_time()
    from prometheus_client import generate_latest

    body = generate_latest(sidecar.registry)
    store = engines[0].store
    return {"steps": steps, "sim_cpu": sim_cpu, "render_after": time.process_time() - t1,
            "exported_bytes": len(body), "fine": len(store.fine), "coarse": len(store.coarse),
            "long": len(store.long)}


async def _child(args: argparse.Namespace) -> dict[str, object]:
    from monitor.sidecar import Sidecar

    offset = [0.0]
    cfg = _config(args.port, args.targets, args.deployments, args.interval)
    sidecar = Sidecar(cfg, clock=lambda: time.time() + offset[0])
    await sidecar.start_http(procs.HOST, 0)
    try:
        out = await _live(sidecar, args.cycles, args.interval)
        out["rss_live"] = procs.rss_mb()[0]
        out |= _simulate(sidecar, offset, args.sim_hours, args.interval, Path(args.text).read_text())
        out["rss_6h"], out["hwm"] = procs.rss_mb()
    finally:
        await sidecar.close()
    return out


def run(*, targets: int = 256, deployments: int = 32, interval: float = 5.0, cycles: int = 12,
        sim_hours: float = 6.0) -> dict[str, object]:
    two = len(os.sched_getaffinity(0)) >= 2
    server_core, sidecar_core = ({1}, {0}) if two else (None, None)
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    try:
        (tmp / "fixture.txt").write_text(fixture_text())
        with procs.started(procs.python("-m", "bench.serve", str(tmp)), cores=server_core) as server:
            port = procs.read_port(server)
            cmd = procs.python("-m", "bench.fleet", "--port", str(port), "--targets", str(targets),
                               "--deployments", str(deployments), "--interval", str(interval),
                               "--cycles", str(cycles), "--sim-hours", str(sim_hours),
                               "--text", str(tmp / "fixture.txt"), "--out", str(tmp / "out.json"))
            with procs.started(cmd, cores=sidecar_core) as child:
                limit = cycles * interval + 120 + sim_hours * 60
                try:
                    _, err = child.communicate(timeout=limit)
                except Exception:
                    child.kill()
                    raise
                if child.returncode != 0:
                    raise RuntimeError(f"fleet child failed ({child.returncode}): {err[-3000:]}")
        result = json.loads((tmp / "out.json").read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.update(targets=targets, deployments=deployments, interval=interval, cycles=cycles,
                  sim_hours=sim_hours, pinned=two)
    return result


def render(r: dict) -> str:
    cyc = r["cycle_seconds"]
    p99 = quantile(cyc, 0.99)
    rows = [
        ["CPU share of one core", f"{r['cpu_share'] * 100:.1f} %", "< 50 %",
         "ok" if r["cpu_share"] < GOALS["cpu_share"] else "MISSED"],
        [f"scrape-cycle time p50 / p99 / max ({len(cyc)} cycles)",
         f"{median(cyc):.3f} / {p99:.3f} / {max(cyc):.3f} s", "p99 < 1 s",
         "ok" if p99 < GOALS["p99_cycle"] else "MISSED"],
        ["RSS after the live cycles", f"{r['rss_live']:.0f} MB", "", ""],
        [f"RSS after {r['sim_hours']:g} h of simulated windows (peak)", f"{r['rss_6h']:.0f} MB ({r['hwm']:.0f})",
         "< 150 MB", "ok" if r["hwm"] < GOALS["rss_mb"] else "MISSED"],
        ["own /metrics render, every 15 s", f"{median(r['render_seconds']) * 1e3:.0f} ms CPU"
         if r["render_seconds"] else "–", "", ""],
        [f"own /metrics render with {r['sim_hours']:g} h windows", f"{r['render_after'] * 1e3:.0f} ms CPU, "
         f"{r['exported_bytes'] / 1e3:.0f} kB", "", ""],
        ["snapshots held per deployment (fine, coarse, budget)", f"{r['fine']}, {r['coarse']}, {r['long']}", "", ""],
        ["failed targets", str(r["failures"]) + (f" ({r['first_failure']})" if r["first_failure"] else ""), "0",
         "ok" if not r["failures"] else "MISSED"],
    ]
    pin = "sidecar pinned to core 0, target server to core 1" if r["pinned"] else "not pinned (one core only)"
    head = (f"{r['targets']} targets (the real fixture, {r['deployments']} deployments) every {r['interval']:g} s, "
            f"{r['cycles']} live cycles; {pin}. Simulating {r['sim_hours']:g} h took {r['sim_cpu']:.0f} s CPU.")
    return head + "\n\n" + markdown(["measure", "value", "goal", ""], rows)


def _main() -> None:
    ap = argparse.ArgumentParser(description="fleet benchmark child: the sidecar side")
    for name, typ in (("port", int), ("targets", int), ("deployments", int), ("interval", float),
                      ("cycles", int), ("sim-hours", float), ("text", str), ("out", str)):
        ap.add_argument(f"--{name}", type=typ, required=True)
    args = ap.parse_args()
    result = asyncio.run(_child(args))
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    _main()
