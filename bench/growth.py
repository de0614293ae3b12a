"""Benchmark 6: what each deployment costs as its windows fill: RSS, recording bytes, /api/v1/status bytes.

One child process (a fresh interpreter, so its RSS is the sidecar's alone) runs the real `Sidecar` on a
simulated clock, every deployment fed the real SGLang 0.5.23 exposition (tests/fixtures/real, one
scheduler) with counts growing each cycle, one server target each, TPOT and TTFT targets:

- RSS: `deployments` deployments, 5 s scrapes for `hours` simulated hours. As in benchmark 2, only the
  cycles whose snapshot the windows keep are run (one per 60 s coarse step, and every cycle of the 7
  minutes before each hour mark), so the held state at each mark is that of a real run that long.
  Reported: VmRSS at each hour mark after a `gc.collect()`, and its growth per deployment.
- /api/v1/status after the fill: JSON bytes per deployment of the whole answer, CPU to build and dump it,
  and of the default page (monitor/export/status_query.py).
- Recording: `rec_deployments` deployments, the sidecar's own `record()` every 15 s (the default
  `recording_interval_seconds`) for `rec_minutes` simulated minutes at full resolution (file + WAL after a
  checkpoint): bytes per deployment per minute. Then the last tick's rows replayed (timestamps moved on)
  for one simulated day of 15 s ticks with the default thinning (`recording_full_resolution` 1h) and
  retention (1d): the file a day of recording leaves, per deployment.

Simulated: the clock, the traffic and the skipped cycles; HTTP is not exercised (benchmark 2 does that).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench import procs
from bench.expositions import fixture_text
from bench.table import markdown, median

INTERVAL = 5.0
RECORD_INTERVAL = 15.0
REPEATS = 5


def _config(n: int, recording: str | None):
    from monitor.config import Config, Deployment, SidecarSettings, Target

    deps = [Deployment(name=f"dep-{d:04d}", tpot_target_seconds=0.05, ttft_target_seconds=2.0,
                       targets=[Target(role="server", url=f"http://127.0.0.1:1/d{d}/metrics", name="s")])
            for d in range(n)]
    return Config(sidecar=SidecarSettings(scrape_interval_seconds=INTERVAL, recording_path=recording,
                                          recording_interval_seconds=RECORD_INTERVAL), deployments=deps)


class _Feed:
    """The fixture's samples, scaled up a little each cycle (uniform growth keeps buckets monotone)."""

    def __init__(self) -> None:
        from monitor.parse.exposition import parse
        from monitor.parse.families import engine_wanted

        self.base = parse(fixture_text().encode(), engine_wanted(), count_families=False)
        self.step = 0

    def next(self):
        self.step += 1
        scale = 1.0 + self.step * 0.001
        return self.base._replace(selected=[s._replace(value=s.value * scale) for s in self.base.selected])


def _cycle(sidecar, feed: _Feed, now: float) -> None:
    expo = feed.next()
    for engine in sidecar.observations.engines.values():
        engine.observe(engine.deployment.targets[0], expo, now)
        engine.snapshot(now)


def _rss() -> float:
    gc.collect()
    return procs.rss_mb()[0]


def _fill(n: int, hours: float) -> dict[str, object]:
    from monitor.export.status_query import DEFAULT_LIMIT, StatusQuery, dump, select_now
    from monitor.sidecar import Sidecar

    clock = [1_800_000_000.0]
    before = _rss()
    sidecar = Sidecar(_config(n, None), clock=lambda: clock[0])
    feed = _Feed()
    _cycle(sidecar, feed, clock[0])
    rss = [(0.0, _rss())]
    store = next(iter(sidecar.observations.engines.values())).store
    coarse = round(store.coarse_step / INTERVAL)
    fine = int(store.fine_horizon / INTERVAL) + 2
    per_hour = int(3600 / INTERVAL)
    t0 = time.process_time()
    for step in range(1, int(hours * per_hour) + 1):
        clock[0] += INTERVAL
        if step % coarse == 0 or (per_hour - step % per_hour) % per_hour <= fine:
            _cycle(sidecar, feed, clock[0])
        if step % per_hour == 0:
            rss.append((step / per_hour, _rss()))
    sim_cpu = time.process_time() - t0
    names = [d.name for d in sidecar.config.deployments]
    whole_cpu, page_cpu = [], []
    for _ in range(REPEATS):  # interleaved, medians: the machine is shared
        t1 = time.process_time()
        whole = sidecar.status().model_dump_json()
        whole_cpu.append(time.process_time() - t1)
        t2 = time.process_time()
        page = dump(select_now(StatusQuery(), sidecar.status, lambda: names))
        page_cpu.append(time.process_time() - t2)
    return {"deployments": n, "rss_before": before, "rss": rss, "sim_cpu": sim_cpu,
            "held": {"fine": len(store.fine), "coarse": len(store.coarse), "long": len(store.long)},
            "status_bytes": len(whole), "status_cpu": median(whole_cpu), "page_bytes": len(page),
            "page_cpu": median(page_cpu),
            "page_deployments": min(n, DEFAULT_LIMIT)}


def _size(path: Path) -> int:
    return sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal") if os.path.exists(f"{path}{s}"))


def _recording(n: int, minutes: float, tmp: Path, day_deployments: int, day_hours: float = 24.0) -> dict[str, object]:
    from monitor.conventions.units import parse_duration
    from monitor.record.store import Recording
    from monitor.sidecar import Sidecar, recording_thinning

    path = tmp / "rec.sqlite"
    clock = [1_800_000_000.0]
    sidecar = Sidecar(_config(n, str(path)), clock=lambda: clock[0])
    feed = _Feed()
    captured: list = []
    real = sidecar.recording.write_tick

    def write_tick(rows, **kw):
        captured[:] = rows
        return real(rows, **kw)
    sidecar.recording.write_tick = write_tick  # type: ignore[method-assign]
    _cycle(sidecar, feed, clock[0])
    sidecar.record(clock[0], force=True)
    sidecar.recording.checkpoint()
    start_size = _size(path)
    ticks = int(minutes * 60 / RECORD_INTERVAL)
    t0 = time.process_time()
    for _ in range(ticks):
        for _ in range(int(RECORD_INTERVAL / INTERVAL)):
            clock[0] += INTERVAL
            _cycle(sidecar, feed, clock[0])
        sidecar.record(clock[0])
    rec_cpu = time.process_time() - t0
    sidecar.recording.checkpoint()
    grown = _size(path) - start_size
    rows = captured[:day_deployments]
    sidecar.recording.close()
    # One day of the last tick's rows, 15 s apart, with the shipped thinning and retention.
    day_path = tmp / "day.sqlite"
    day = Recording(day_path)
    thin = recording_thinning("1h")
    retain = parse_duration("1d")
    t1 = time.process_time()
    base = rows[0][1].ts
    for i in range(int(day_hours * 3600 / RECORD_INTERVAL)):
        day.write_tick([(name, snap._replace(ts=base + i * RECORD_INTERVAL), state, book)
                        for name, snap, state, book in rows], retain_seconds=retain, thin=thin)
    day_cpu = time.process_time() - t1
    day.checkpoint()
    kept = sum(1 for _ in day.snapshots(rows[0][0]))
    pages = day.db.execute("PRAGMA page_count").fetchone()[0] - day.db.execute("PRAGMA freelist_count").fetchone()[0]
    page_size = day.db.execute("PRAGMA page_size").fetchone()[0]
    day.close()
    return {"rec_deployments": n, "rec_minutes": minutes, "rec_bytes": grown, "rec_cpu": rec_cpu,
            "rec_ticks": ticks, "day_deployments": len(rows), "day_rows_kept": kept, "day_file": _size(day_path),
            "day_used": pages * page_size, "day_cpu": day_cpu, "day_hours": day_hours,
            "full_rows_per_day": int(day_hours * 3600 / RECORD_INTERVAL)}


def _child(args: argparse.Namespace) -> None:
    out = _fill(args.deployments, args.hours)
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as tmp:
        out |= _recording(args.rec_deployments, args.rec_minutes, Path(tmp), args.day_deployments, args.day_hours)
    Path(args.out).write_text(json.dumps(out))


def run(*, deployments: int = 200, hours: float = 6.0, rec_deployments: int = 20, rec_minutes: float = 30.0,
        day_deployments: int = 5, day_hours: float = 24.0) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as tmp:
        out = Path(tmp) / "out.json"
        cmd = procs.python("-m", "bench.growth", "--child", "--deployments", str(deployments), "--hours", str(hours),
                           "--rec-deployments", str(rec_deployments), "--rec-minutes", str(rec_minutes),
                           "--day-deployments", str(day_deployments), "--day-hours", str(day_hours), "--out", str(out))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"growth child failed ({done.returncode}): {done.stderr[-3000:]}")
        return json.loads(out.read_text())


def render(r: dict) -> str:
    n = r["deployments"]
    rss = r["rss"]
    base = rss[0][1]
    rows = [[f"{h:g} h", f"{mb:.0f}", f"{(mb - base) / n:.3f}",
             "-" if i == 0 else f"{(mb - rss[i - 1][1]) / n / ((h - rss[i - 1][0]) * 3600) * 1e3:.2f}"]
            for i, (h, mb) in enumerate(rss)]
    table = markdown(["windows filled", "RSS MB", "MB per deployment over the start", "kB/s per deployment since the last mark"],
                     rows)
    minute = r["rec_bytes"] / r["rec_deployments"] / r["rec_minutes"]
    day_full = minute * 1440
    day_thin = r["day_used"] / r["day_deployments"]
    return "\n".join([
        f"{n} deployments (one server target each, the real SGLang 0.5.23 exposition, TPOT and TTFT targets), "
        f"5 s scrapes on a simulated clock ({r['sim_cpu']:.0f} s CPU); RSS {r['rss_before']:.0f} MB before the "
        f"sidecar was made. Snapshots held per deployment at the end (fine, coarse, budget): "
        f"{r['held']['fine']}, {r['held']['coarse']}, {r['held']['long']}.", "", table, "",
        f"/api/v1/status with these windows: {r['status_bytes'] / n / 1024:.1f} kB per deployment "
        f"({r['status_bytes'] / 1e6:.2f} MB for {n}, {r['status_cpu'] * 1e3:.0f} ms CPU to build and dump, median of {REPEATS}; "
        f"x{2000 / n:g} for 2,000: ~{r['status_bytes'] / n * 2000 / 1e6:.1f} MB); the default page of "
        f"{r['page_deployments']}: {r['page_bytes'] / 1e6:.2f} MB, {r['page_cpu'] * 1e3:.0f} ms CPU.", "",
        f"Recording, {r['rec_deployments']} deployments, a tick every 15 s for {r['rec_minutes']:g} simulated minutes "
        f"({r['rec_cpu']:.1f} s CPU): **{minute / 1024:.1f} kB per deployment per minute** at full resolution "
        f"({minute * 60 / 1e6:.2f} MB per deployment per hour; unthinned, a day is {day_full / 1e6:.1f} MB per "
        f"deployment, {day_full * 2000 / 1e9:.1f} GB for 2,000). With the shipped thinning (every tick for 1 h, then "
        f"one a minute, past 6 h one per 5 minutes) and 1 d retention, {r['day_hours']:g} h of {r['full_rows_per_day']} ticks keep "
        f"{r['day_rows_kept']} rows per deployment: **{day_thin / 1e6:.2f} MB per deployment** "
        f"({day_thin * 2000 / 1e9:.1f} GB for 2,000; {minute * 60 * r['day_hours'] / day_thin:.1f}x less; file with free pages "
        f"{r['day_file'] / r['day_deployments'] / 1e6:.2f} MB per deployment; {r['day_cpu']:.0f} s CPU for "
        f"{r['day_deployments']} deployments' {r['day_hours']:g} h).",
    ])


def _main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.growth", description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--deployments", type=int, default=200)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--rec-deployments", type=int, default=20)
    ap.add_argument("--rec-minutes", type=float, default=30.0)
    ap.add_argument("--day-deployments", type=int, default=5)
    ap.add_argument("--day-hours", type=float, default=24.0, help="length of the replayed 'day' (24 unless testing)")
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    print(render(run(deployments=args.deployments, hours=args.hours, rec_deployments=args.rec_deployments,
                     rec_minutes=args.rec_minutes, day_deployments=args.day_deployments, day_hours=args.day_hours)))


if __name__ == "__main__":
    _main()
