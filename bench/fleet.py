"""Benchmark 2: 100, 200 and 400 targets serving the 32-DP-rank exposition, scraped every 5 s by one sidecar.

Processes: `bench.serve` (pinned to core 1) serves the anchor exposition (1.48 MB, 8,047 samples) to every
target with its own pids (`?variant=`), as that many distinct servers would; the sidecar (this module's
child, pinned to core 0, its parser workers with it) runs its real scrape loop over 8 targets per
deployment with the shipped settings; this process measures from outside while the load runs:

- CPU share: CPU of the sidecar's process tree (every thread, parser workers included;
  /proc/*/task/*/schedstat) over the measured cycles / wall time. 1.0 is one core.
- cycle time: each deployment's scrape-and-snapshot time in each interval (`deployment_cycle_seconds`).
- /healthz latency: a GET every 100 ms from here, over the measured cycles.
- event-loop lag: inside the sidecar, how late a timer due every 20 ms runs (what any request waits for at
  least); with the /healthz column it tells the sidecar's own stalls from the poller's and the machine's.
- RSS: VmRSS of the sidecar and its parser workers after the live cycles.

Then, at the largest size, the child moves its clock forward without waiting: 6 h of 5 s snapshots for
every deployment, only the cycles whose snapshot the store keeps (one per 60 s coarse step, then every 5 s
for the last fine horizon), each observing one target per deployment with counts scaled up so windows see
traffic. The held state (what RSS then measures) is that of a 6 h run: 5m/30m/1h/6h windows and 30d budget
points. Simulated: the clock, the traffic and the skipped cycles; HTTP is not exercised in that part.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench import procs
from bench.expositions import fixture_text, replicate
from bench.table import markdown, median, quantile

GOALS = {"cpu_share": 0.7, "p99_cycle": 2.0, "rss_mb": 200.0, "healthz_p99": 0.1}
PER_DEPLOYMENT = 8
ANCHOR_DP = 32


def _config(port: int, targets: int, interval: float, settings: dict | None = None):
    from monitor.config import Config, Deployment, SidecarSettings, Target

    deps = []
    for d in range(-(-targets // PER_DEPLOYMENT)):
        ids = range(d * PER_DEPLOYMENT, min((d + 1) * PER_DEPLOYMENT, targets))
        deps.append(Deployment(
            name=f"dep-{d}", tpot_target_seconds=0.04, ttft_target_seconds=1.0, itl_target_seconds=0.04,
            targets=[Target(role="server", url=f"http://{procs.HOST}:{port}/anchor/t{i}/metrics?variant={i}",
                            name=f"t{i}") for i in ids]))
    return Config(sidecar=SidecarSettings(scrape_interval_seconds=interval, scrape_timeout_seconds=min(3.0, interval),
                                          listen_port=0, **(settings or {})), deployments=deps)


def _say(*words: object) -> None:
    print(*words, flush=True)


def _gc_pauses() -> list[float]:
    """Every garbage collection's pause from now on (a full one can hold the event loop for a while)."""
    import gc

    pauses: list[float] = []
    began = [0.0]

    def track(phase: str, info: dict) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - began[0])
            if os.environ.get("FLEET_GC_DEBUG") and pauses[-1] > 0.05:
                print("GC", info, f"{pauses[-1]*1e3:.0f} ms", len(gc.get_objects()), gc.get_count(), file=sys.stderr, flush=True)

    gc.callbacks.append(track)
    return pauses


async def _loop_lag(stop: asyncio.Event, lags: list[float], period: float = 0.02) -> None:
    """How late the event loop runs a timer due every `period` s: what a /healthz request waits for at
    least, measured inside the sidecar (the poller's own latency adds the client's side and the kernel's)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + period
        await asyncio.sleep(period)
        lags.append(max(loop.time() - due, 0.0))


async def _live(sidecar, warm: int, cycles: int) -> dict[str, object]:
    scraper = sidecar.scraper
    stop = asyncio.Event()
    cycle_s: list[float] = []
    pauses = _gc_pauses()
    lags: list[float] = []
    lag_task = asyncio.create_task(_loop_lag(stop, lags))

    def on_cycle(_now: float) -> None:
        if scraper.cycles == warm:
            pauses.clear()
            lags.clear()
            _say("LIVE-START")
        elif scraper.cycles > warm:
            cycle_s.extend(scraper.deployment_cycle_seconds.values())
        if scraper.cycles >= warm + cycles:
            _say("LIVE-END")
            stop.set()

    await scraper.run(stop, on_cycle)
    await lag_task
    if os.environ.get("FLEET_GC_DEBUG"):
        import collections
        import gc

        gc.collect()
        kinds = collections.Counter(type(o).__name__ for o in gc.get_objects())
        print("TRACKED", sum(kinds.values()), kinds.most_common(25), file=sys.stderr, flush=True)
    failures = [s.last_error for s in sidecar.observations.statuses.values() if s.last_error]
    return {"cycle_seconds": cycle_s, "failures": len(failures), "first_failure": failures[0] if failures else None,
            "offloaded": scraper.parser.offloaded, "threaded": scraper.parser.threaded, "gc_max": max(pauses, default=0.0), "gc_count": len(pauses),
            "loop_lag": lags}


def _simulate(sidecar, offset: list[float], hours: float, interval: float, text: str) -> dict[str, object]:
    from prometheus_client import generate_latest

    from monitor.feeds import target_wanted
    from monitor.parse.exposition import parse

    engines = list(sidecar.observations.engines.values())
    # What the sidecar's scrapes of these targets read (one config for all: the first target's set).
    base = parse(text.encode(), target_wanted(engines[0].deployment, engines[0].deployment.targets[0]),
                 count_families=False)
    steps = int(hours * 3600 / interval)
    coarse = max(round(engines[0].store.coarse_step / interval), 1)
    # Only snapshots that the store keeps are taken: one per coarse step until the last fine horizon,
    # then every interval. Older 5 s snapshots would be thinned away anyway, so the held state (what
    # RSS measures) is the same as after 4,320 real cycles, at a fraction of the CPU.
    fine_from = steps - int(engines[0].store.fine_horizon / interval) - 6
    t0 = time.process_time()
    for step in range(1, steps + 1):
        offset[0] += interval
        if step % coarse == 0 or step >= fine_from:
            scale = 1.0 + step * 0.001  # uniform growth keeps buckets monotone
            expo = base._replace(selected=[s._replace(value=s.value * scale) for s in base.selected])
            now = sidecar.clock()
            for engine in engines:
                engine.observe(engine.deployment.targets[0], expo, now)
                engine.snapshot(now)
    sim_cpu = time.process_time() - t0
    t1 = time.process_time()
    body = generate_latest(sidecar.registry)
    store = engines[0].store
    return {"sim_cpu": sim_cpu, "render_after": time.process_time() - t1, "exported_bytes": len(body),
            "fine": len(store.fine), "coarse": len(store.coarse), "long": len(store.long)}


async def _child(args: argparse.Namespace) -> dict[str, object]:
    import gc

    from monitor.sidecar import Sidecar, keep_scrape_buffers

    keep_scrape_buffers()  # as `slo-monitor run` does
    offset = [0.0]
    if os.environ.get("FLEET_GC_DEBUG"):
        import logging

        logging.basicConfig(level=logging.WARNING)
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = 0.04
    sidecar = Sidecar(_config(args.port, args.targets, args.interval, json.loads(args.settings)),
                      clock=lambda: time.time() + offset[0])
    port = await sidecar.start_http(procs.HOST, 0)
    gc.freeze()  # as `slo-monitor run` does
    _say("PORT", port)
    try:
        out = await _live(sidecar, args.warm, args.cycles)
        if args.sim_hours:
            _say("SIM-START")
            out |= _simulate(sidecar, offset, args.sim_hours, args.interval, Path(args.text).read_text())
            out["rss_6h"] = procs.rss_tree_mb(os.getpid())
            out["hwm_6h"] = procs.rss_mb()[1]
    finally:
        await sidecar.close()
    return out


class _Poller(threading.Thread):
    """GET /healthz every `period` s and keep each latency (a failure counts as its timeout)."""

    def __init__(self, url: str, period: float = 0.1, timeout: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.url, self.period, self.timeout = url, period, timeout
        self.latencies: list[float] = []
        self.errors = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=self.timeout) as r:
                    r.read()
            except OSError:
                self.errors += 1
            self.latencies.append(time.perf_counter() - t0)
            self.stopped.wait(max(self.period - (time.perf_counter() - t0), 0.0))


def _expect(proc, word: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(word):
            return line
        if not line and proc.poll() is not None:
            break
    raise RuntimeError(f"fleet child: no {word} within {timeout:.0f} s (exit status {proc.poll()})")


def run_one(port: int, text_path: Path, tmp: Path, *, targets: int, interval: float, warm: int, cycles: int,
            sim_hours: float, cores: set[int] | None, settings: dict | None = None) -> dict[str, object]:
    out_path = tmp / f"out-{targets}.json"
    cmd = procs.python("-m", "bench.fleet", "--port", str(port), "--targets", str(targets), "--interval", str(interval),
                       "--warm", str(warm), "--cycles", str(cycles), "--sim-hours", str(sim_hours),
                       "--text", str(text_path), "--out", str(out_path), "--settings", json.dumps(settings or {}))
    log = (tmp / f"sidecar-{targets}.log").open("w+") if not os.environ.get("FLEET_GC_DEBUG") else sys.stderr
    with log, procs.started(cmd, cores=cores, stderr=log) as child:
        side_port = int(_expect(child, "PORT", 60).split()[1])
        poller = _Poller(f"http://{procs.HOST}:{side_port}/healthz")
        _expect(child, "LIVE-START", (warm + 2) * interval + 120)
        poller.start()
        c0, w0 = procs.cpu_ns(child.pid), time.monotonic()
        _expect(child, "LIVE-END", (cycles + 2) * interval + 120)
        c1, w1 = procs.cpu_ns(child.pid), time.monotonic()
        rss = procs.rss_tree_mb(child.pid)
        poller.stopped.set()
        poller.join()
        try:
            child.communicate(timeout=sim_hours * 600 + 120)
        except Exception:
            child.kill()
            raise
        if child.returncode != 0:
            log.seek(0)
            raise RuntimeError(f"fleet child failed ({child.returncode}): {log.read()[-3000:]}")
    result = json.loads(out_path.read_text())
    result.update(targets=targets, interval=interval, cycles=cycles, cpu_share=(c1 - c0) / 1e9 / (w1 - w0),
                  rss_live=rss, healthz=poller.latencies, healthz_errors=poller.errors)
    return result


def run(*, sizes: tuple[int, ...] = (100, 200, 400), interval: float = 5.0, warm: int = 2, cycles: int = 6,
        sim_hours: float = 6.0, dp_ranks: int = ANCHOR_DP, settings: dict | None = None) -> list[dict[str, object]]:
    """One live run per size (smallest first); the 6 h simulation at the largest."""
    two = len(os.sched_getaffinity(0)) >= 2
    server_core, sidecar_core = ({1}, {0}) if two else (None, None)
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    results = []
    try:
        text = replicate(fixture_text(), dp_ranks)
        (tmp / "anchor.txt").write_text(text)
        with procs.started(procs.python("-m", "bench.serve", str(tmp)), cores=server_core) as server:
            port = procs.read_port(server)
            for n in sizes:
                r = run_one(port, tmp / "anchor.txt", tmp, targets=n, interval=interval, warm=warm, cycles=cycles,
                            sim_hours=sim_hours if n == max(sizes) else 0.0, cores=sidecar_core, settings=settings)
                r.update(pinned=two, mb=len(text.encode()) / 1e6)
                results.append(r)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def goal_lines(results: list[dict]) -> list[tuple[str, str, str, str]]:
    """(goal, measured, target, verdict) for the largest size."""
    if not results:
        return []
    r = max(results, key=lambda x: x["targets"])
    n = r["targets"]
    p99 = quantile(r["cycle_seconds"], 0.99)
    hz = quantile(r["healthz"], 0.99)
    rss = max(r["rss_live"], r.get("rss_6h", 0.0))
    return [
        (f"2. CPU share of one core, {n} targets", f"{r['cpu_share'] * 100:.0f} %", "< 70 %",
         f"{_verdict(r['cpu_share'] < GOALS['cpu_share'])} ({r['cpu_share'] / GOALS['cpu_share']:.2f} of the goal)"),
        (f"2. scrape-cycle p99, {n} targets", f"{p99:.2f} s", "< 2 s",
         f"{_verdict(p99 < GOALS['p99_cycle'])} ({p99 / GOALS['p99_cycle']:.2f} of the goal)"),
        (f"2. RSS (sidecar + parser workers, live and after 6 h of windows), {n} targets", f"{rss:.0f} MB", "< 200 MB",
         f"{_verdict(rss < GOALS['rss_mb'])} ({rss / GOALS['rss_mb']:.2f} of the goal)"),
        (f"2. /healthz p99 under load, {n} targets", f"{hz * 1e3:.0f} ms", "< 100 ms",
         f"{_verdict(hz < GOALS['healthz_p99'])} ({hz / GOALS['healthz_p99']:.2f} of the goal)"),
    ]


def render(results: list[dict]) -> str:
    if not results:
        return "not run"
    rows = []
    for r in results:
        cyc, hz, lag = r["cycle_seconds"], r["healthz"], r.get("loop_lag") or [0.0]
        rows.append([str(r["targets"]), f"{r['targets'] // PER_DEPLOYMENT}",
                     f"{r['targets'] * r['mb'] / r['interval']:.0f}",
                     f"{r['cpu_share'] * 100:.0f} %",
                     f"{median(cyc):.2f} / {quantile(cyc, 0.99):.2f} / {max(cyc):.2f}",
                     f"{median(hz) * 1e3:.0f} / {quantile(hz, 0.99) * 1e3:.0f} / {max(hz) * 1e3:.0f}"
                     + (f" ({r['healthz_errors']} failed)" if r["healthz_errors"] else ""),
                     f"{quantile(lag, 0.99) * 1e3:.0f} / {max(lag) * 1e3:.0f}",
                     f"{r['rss_live']:.0f}", str(r["offloaded"]), f"{r['gc_max'] * 1e3:.0f} ({r['gc_count']})",
                     str(r["failures"]) + (f" ({r['first_failure']})" if r["first_failure"] else "")])
    big = max(results, key=lambda x: x["targets"])
    pin = "sidecar (and its parser workers) pinned to core 0, target server to core 1" if big["pinned"] else "not pinned"
    out = [f"The 32-DP-rank exposition ({big['mb']:.2f} MB, distinct pids per target), {PER_DEPLOYMENT} targets per "
           f"deployment, every {big['interval']:g} s, {big['cycles']} measured cycles after 2 warm-up cycles; {pin}; "
           "shipped settings (bodies of 256 KiB to 4 MiB are parsed in a thread beside the event loop, or on it "
           "when no other parse ran in the last 50 ms; larger ones in worker processes).", "",
           markdown(["targets", "deployments", "MB/s scraped", "CPU share of one core",
                     "cycle p50 / p99 / max s", "/healthz p50 / p99 / max ms", "event-loop lag p99 / max ms", "RSS MB", "parsed in workers", "longest GC pause ms (GCs)",
                     "failed targets"], rows)]
    if "rss_6h" in big:
        out += ["", f"After {big['targets']} targets' live cycles, 6 h of windows on a simulated clock "
                f"({big['sim_cpu']:.0f} s CPU): RSS {big['rss_6h']:.0f} MB (peak {big['hwm_6h']:.0f}); snapshots held "
                f"per deployment (fine, coarse, budget) {big['fine']}, {big['coarse']}, {big['long']}; the sidecar's own "
                f"/metrics then renders in {big['render_after'] * 1e3:.0f} ms CPU ({big['exported_bytes'] / 1e3:.0f} kB)."]
    return "\n".join(out)


def _main() -> None:
    ap = argparse.ArgumentParser(description="fleet benchmark child: the sidecar side")
    for name, typ in (("port", int), ("targets", int), ("interval", float), ("warm", int), ("cycles", int),
                      ("sim-hours", float), ("text", str), ("out", str), ("settings", str)):
        ap.add_argument(f"--{name}", type=typ, required=True)
    args = ap.parse_args()
    result = asyncio.run(_child(args))
    Path(args.out).write_text(json.dumps(result))
    sys.exit(0)


if __name__ == "__main__":
    _main()
