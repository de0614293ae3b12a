"""Benchmark 5: one 50 MB target beside a normal one: /healthz and the other target's cycle while it is parsed.

Issue 19's cases: a 51 MB exposition without HELP/TYPE lines (nothing to skip: the full scan reads every
line, ~1 s of CPU on this machine) and a 59 MB one holding 1M series of a gauge the sidecar reads (over
the default series limit of 50,000: the scrape fails with the reason). Each is served by `bench.serve`
(pinned to core 1) beside the one-scheduler fixture in another deployment; the sidecar (its own process,
pinned to core 0 with its parser workers, shipped settings) scrapes both every 5 s; this process polls
/healthz every 100 ms meanwhile. Reported: /healthz latency, the other deployment's cycle time, the big
target's status and the sidecar's RSS (with its parser workers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench import procs
from bench.expositions import fixture_text
from bench.fleet import _expect, _Poller
from bench.table import markdown, median, quantile

CASES = ("ungrouped 51 MB", "1M series of a read gauge, 59 MB")


def big_text(kind: str, scale: float = 1.0) -> str:
    if kind == CASES[0]:
        line = 'vllm_like_metric{model_name="meta-llama/Llama-3.1-8B-Instruct",engine_type="unified",idx="%d"} 1.0\n'
        return "".join(line % i for i in range(int(500_000 * scale)))
    head = "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n"
    # Short lines: 1M of them stay under the 64 MiB body limit, so the series limit is what stops the scrape.
    line = 'sglang:num_running_reqs{engine_type="u",tp_rank="%d"} 1\n'
    return head + "".join(line % i for i in range(int(1_000_000 * scale)))


async def _child(port: int, interval: float, cycles: int, out: Path) -> None:
    from monitor.config import parse_config
    from monitor.sidecar import Sidecar, keep_scrape_buffers

    keep_scrape_buffers()
    cfg = parse_config({"sidecar": {"scrape_interval_seconds": interval, "scrape_timeout_seconds": interval,
                                    "listen_port": 0},
                        "deployments": [
                            {"name": "big", "tpot_target_seconds": 0.1, "targets": [
                                {"role": "server", "url": f"http://{procs.HOST}:{port}/big/side/metrics"}]},
                            {"name": "normal", "tpot_target_seconds": 0.1, "targets": [
                                {"role": "server", "url": f"http://{procs.HOST}:{port}/normal/side/metrics"}]}]})
    sidecar = Sidecar(cfg)
    side = await sidecar.start_http(procs.HOST, 0)
    print("PORT", side, flush=True)
    stop = asyncio.Event()
    normal: list[float] = []

    def on_cycle(_now: float) -> None:
        if sidecar.scraper.cycles == 1:
            print("LIVE-START", flush=True)
        elif sidecar.scraper.cycles > 1:
            normal.append(sidecar.scraper.deployment_cycle_seconds.get("normal", float("nan")))
        if sidecar.scraper.cycles > cycles:
            print("LIVE-END", flush=True)
            stop.set()

    try:
        await sidecar.scraper.run(stop, on_cycle)
        big = sidecar.observations.statuses[("big", sidecar.config.deployments[0].targets[0].id)]
        out.write_text(json.dumps({"normal_cycle": normal, "big_up": big.up, "big_error": big.last_error,
                                   "big_samples": big.samples, "offloaded": sidecar.scraper.parser.offloaded}))
    finally:
        await sidecar.close()


def run(*, interval: float = 5.0, cycles: int = 4, scale: float = 1.0) -> list[dict[str, object]]:
    two = len(os.sched_getaffinity(0)) >= 2
    server_core, sidecar_core = ({1}, {0}) if two else (None, None)
    results = []
    for kind in CASES:
        tmp = Path(tempfile.mkdtemp(prefix="bench-big-"))
        try:
            text = big_text(kind, scale)
            (tmp / "big.txt").write_text(text)
            (tmp / "normal.txt").write_text(fixture_text())
            with procs.started(procs.python("-m", "bench.serve", str(tmp)), cores=server_core) as server:
                port = procs.read_port(server)
                cmd = procs.python("-m", "bench.big", "--port", str(port), "--interval", str(interval),
                                   "--cycles", str(cycles), "--out", str(tmp / "out.json"))
                log = (tmp / "sidecar.log").open("w+")
                with log, procs.started(cmd, cores=sidecar_core, stderr=log) as child:
                    side = int(_expect(child, "PORT", 60).split()[1])
                    poller = _Poller(f"http://{procs.HOST}:{side}/healthz")
                    _expect(child, "LIVE-START", 3 * interval + 120)
                    poller.start()
                    _expect(child, "LIVE-END", (cycles + 2) * interval + 120)
                    rss = procs.rss_tree_mb(child.pid)
                    poller.stopped.set()
                    poller.join()
                    child.communicate(timeout=60)
                r = json.loads((tmp / "out.json").read_text())
            r.update(kind=kind, mb=len(text.encode()) / 1e6, healthz=poller.latencies, healthz_errors=poller.errors,
                     rss=rss, interval=interval, cycles=cycles)
            results.append(r)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return results


def goal_lines(results: list[dict]) -> list[tuple[str, str, str, str]]:
    out = []
    for r in results:
        hz = quantile(r["healthz"], 0.99)
        out.append((f"19.4 /healthz p99 while a {r['kind']} target is parsed", f"{hz * 1e3:.0f} ms",
                    "< 1 s (the test's bound)", "met" if hz < 1.0 else "MISSED"))
    return out


def render(results: list[dict]) -> str:
    rows = []
    for r in results:
        hz, cyc = r["healthz"], [c for c in r["normal_cycle"] if c == c]
        rows.append([r["kind"], f"{r['mb']:.0f}", "up" if r["big_up"] else f"failed: {r['big_error']}",
                     str(r["offloaded"]),
                     f"{median(hz) * 1e3:.0f} / {quantile(hz, 0.99) * 1e3:.0f} / {max(hz) * 1e3:.0f}"
                     + (f" ({r['healthz_errors']} failed)" if r["healthz_errors"] else ""),
                     f"{median(cyc):.2f} / {max(cyc):.2f}" if cyc else "–", f"{r['rss']:.0f}"])
    first = results[0] if results else {"interval": 5.0, "cycles": 0}
    return (f"Every {first['interval']:g} s for {first['cycles']} cycles, beside a deployment scraping the one-scheduler "
            "fixture; /healthz polled every 100 ms from another process.\n\n"
            + markdown(["big target", "MB", "its scrape", "parsed in workers", "/healthz p50 / p99 / max ms",
                        "other deployment's cycle p50 / max s", "RSS MB (with workers)"], rows))


def _main() -> None:
    ap = argparse.ArgumentParser(description="big-target benchmark child: the sidecar side")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--interval", type=float, required=True)
    ap.add_argument("--cycles", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    asyncio.run(_child(args.port, args.interval, args.cycles, args.out))
    sys.exit(0)


if __name__ == "__main__":
    _main()
