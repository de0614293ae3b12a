"""Benchmark 1: CPU per scrape of a large SGLang exposition: sidecar vs prometheus_client vs Prometheus.

In-process (same text, contenders interleaved in rotating order, gc.collect() before each so one does
not pay for another's garbage, CPU from time.process_time):
  - sidecar: `parse(text, engine_wanted())`, then `DeploymentEngine.observe` + `snapshot` (its whole
    per-scrape work short of HTTP); `state()` is timed too, it runs per read of the sidecar's /metrics.
  - prometheus_client: `text_string_to_metric_families`, every sample iterated.
Live (same text served over HTTP, both scrapers at 1 s side by side for the same seconds):
  - the real sidecar process (`python -m monitor run`) and Prometheus 2.42, CPU from /proc/PID/stat
    divided by the scrapes the target server counted for each.
"""

from __future__ import annotations

import gc
import json
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench import procs
from bench.expositions import Exposition
from bench.table import markdown, median, ms, ms_iqr, ratio
from monitor.config import Deployment, Target
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.slo.engine import DeploymentEngine

PROMETHEUS = "/usr/bin/prometheus"


@dataclass
class Result:
    expo: Exposition
    cpu: dict[str, list[float]] = field(default_factory=dict)  # contender -> seconds per run
    live: dict[str, float] = field(default_factory=dict)


def _deployment() -> Deployment:
    return Deployment(name="bench", tpot_target_seconds=0.04, ttft_target_seconds=1.0)


def contenders(text: str) -> dict[str, Callable[[dict[str, list[float]]], None]]:
    """Each contender runs once and appends its CPU seconds (several parts for the sidecar)."""
    wanted = engine_wanted()
    engine = DeploymentEngine(_deployment())
    target = Target(role="server", url="http://127.0.0.1:1/metrics")
    clock = [1_000_000.0]
    engine.observe(target, parse(text, wanted, count_families=False))  # first scrape creates the accumulators: not steady state

    def sidecar(out: dict[str, list[float]]) -> None:
        t0 = time.process_time()
        expo = parse(text, wanted, count_families=False)  # as the scrape loop calls it
        t1 = time.process_time()
        engine.observe(target, expo)
        clock[0] += 1.0
        engine.snapshot(clock[0])
        t2 = time.process_time()
        engine.state(clock[0])
        t3 = time.process_time()
        out.setdefault("sidecar parse", []).append(t1 - t0)
        out.setdefault("sidecar update", []).append(t2 - t1)
        out.setdefault("sidecar", []).append(t2 - t0)
        out.setdefault("sidecar state", []).append(t3 - t2)

    def client(out: dict[str, list[float]]) -> None:
        t0 = time.process_time()
        for fam in text_string_to_metric_families(text):
            for _ in fam.samples:
                pass
        out.setdefault("prometheus_client", []).append(time.process_time() - t0)

    def parse_all(out: dict[str, list[float]]) -> None:
        t0 = time.process_time()
        parse(text, None)
        out.setdefault("sidecar parse, all kept", []).append(time.process_time() - t0)

    return {"sidecar": sidecar, "prometheus_client": client, "parse_all": parse_all}


def run_inprocess(expos: list[Exposition], repeats: int) -> list[Result]:
    results = [Result(e) for e in expos]
    runners = [contenders(e.text) for e in expos]
    for r in range(repeats):
        for res, funcs in zip(results, runners):
            names = list(funcs)
            for name in names[r % len(names):] + names[: r % len(names)]:
                gc.collect()
                funcs[name](res.cpu)
    return results


def _prometheus_config(port: int, name: str, interval: str) -> str:
    return json.dumps({
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": "1m"},
        "scrape_configs": [{"job_name": "bench", "metrics_path": f"/{name}/prom/metrics",
                            "static_configs": [{"targets": [f"{procs.HOST}:{port}"]}]}],
    })


def _sidecar_config(port: int, name: str) -> str:
    return json.dumps({
        "sidecar": {"scrape_interval_seconds": 1, "scrape_timeout_seconds": 1},
        "deployments": [{"name": "bench", "tpot_target_seconds": 0.04, "ttft_target_seconds": 1.0,
                         "targets": [{"role": "server", "url": f"http://{procs.HOST}:{port}/{name}/side/metrics"}]}],
    })


def _prom_query(port: int, query: str) -> float:
    url = f"http://{procs.HOST}:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    data = procs.get_json(url)
    found = data["data"]["result"]  # type: ignore[index]
    return float(found[0]["value"][1]) if found else float("nan")


def run_live(results: list[Result], seconds: float, warmup: float = 3.0) -> None:
    """Prometheus and the sidecar scrape the same text at 1 s, side by side, one exposition at a time."""
    if not Path(PROMETHEUS).exists():
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-parse-"))
    try:
        for i, res in enumerate(results):
            (tmp / f"e{i}.txt").write_text(res.expo.text)
        with procs.started(procs.python("-m", "bench.serve", str(tmp))) as server:
            port = procs.read_port(server)
            for i, res in enumerate(results):
                res.live = _live_one(tmp, port, f"e{i}", seconds, warmup)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _live_one(tmp: Path, port: int, name: str, seconds: float, warmup: float) -> dict[str, float]:
    prom_port, side_port = procs.free_port(), procs.free_port()
    (tmp / f"{name}.prom.yml").write_text(_prometheus_config(port, name, "1s"))
    (tmp / f"{name}.side.yml").write_text(_sidecar_config(port, name))
    prom_cmd = [PROMETHEUS, f"--config.file={tmp / f'{name}.prom.yml'}", f"--storage.tsdb.path={tmp / f'{name}.tsdb'}",
                f"--web.listen-address={procs.HOST}:{prom_port}", "--log.level=warn"]
    side_cmd = procs.python("-m", "monitor", "run", "-c", str(tmp / f"{name}.side.yml"),
                            "--listen", f"{procs.HOST}:{side_port}")
    counts_url = f"http://{procs.HOST}:{port}/_counts"
    with procs.started(prom_cmd, stdout=None) as prom, procs.started(side_cmd, stdout=None) as side:
        procs.wait_http(f"http://{procs.HOST}:{prom_port}/-/ready", proc=prom)
        procs.wait_http(f"http://{procs.HOST}:{side_port}/healthz", proc=side)
        time.sleep(warmup)
        c0, p0, s0 = procs.get_json(counts_url), procs.cpu_seconds(prom.pid), procs.cpu_seconds(side.pid)
        t0 = time.monotonic()
        time.sleep(seconds)
        c1, p1, s1 = procs.get_json(counts_url), procs.cpu_seconds(prom.pid), procs.cpu_seconds(side.pid)
        span = time.monotonic() - t0
        n_prom = c1.get(f"{name}/prom", 0) - c0.get(f"{name}/prom", 0)  # type: ignore[union-attr]
        n_side = c1.get(f"{name}/side", 0) - c0.get(f"{name}/side", 0)  # type: ignore[union-attr]
        window = f"{max(int(span), 2)}s"
        return {
            "prometheus_cpu": (p1 - p0) / max(n_prom, 1),
            "prometheus_scrapes": n_prom,
            "prometheus_duration": _prom_query(prom_port, f'quantile_over_time(0.5, scrape_duration_seconds{{job="bench"}}[{window}])'),
            "prometheus_samples": _prom_query(prom_port, 'scrape_samples_scraped{job="bench"}'),
            "sidecar_cpu": (s1 - s0) / max(n_side, 1),
            "sidecar_scrapes": n_side,
            "seconds": span,
        }


def run(expos: list[Exposition], *, repeats: int, live_seconds: float) -> list[Result]:
    results = run_inprocess(expos, repeats)
    run_live(results, live_seconds)
    return results


def render(results: list[Result]) -> str:
    head = ["exposition", "samples", "MB", "sidecar parse", "SLO update", "sidecar total", "state()",
            "prometheus_client", "client / sidecar", "parse, all kept"]
    rows = []
    for r in results:
        c = r.cpu
        rows.append([r.expo.name, str(r.expo.samples), f"{r.expo.size_bytes / 1e6:.2f}",
                     ms_iqr(c["sidecar parse"]), ms_iqr(c["sidecar update"]), ms_iqr(c["sidecar"]),
                     ms_iqr(c["sidecar state"]), ms_iqr(c["prometheus_client"]),
                     ratio(median(c["prometheus_client"]), median(c["sidecar"])),
                     ms_iqr(c["sidecar parse, all kept"])])
    n = len(next(iter(results)).cpu["sidecar"]) if results else 0
    out = [f"In-process CPU per scrape, ms: median [IQR] of {n} interleaved runs each.", "",
           markdown(head, rows)]
    live = [r for r in results if r.live]
    if live:
        head = ["exposition", "sidecar CPU/scrape", "Prometheus CPU/scrape", "sidecar / Prometheus",
                "Prometheus scrape_duration p50", "scrapes (sidecar, Prometheus)", "Prometheus samples"]
        rows = [[r.expo.name, ms(r.live["sidecar_cpu"]), ms(r.live["prometheus_cpu"]),
                 ratio(r.live["sidecar_cpu"], r.live["prometheus_cpu"]), ms(r.live["prometheus_duration"]),
                 f"{r.live['sidecar_scrapes']:.0f}, {r.live['prometheus_scrapes']:.0f}",
                 f"{r.live['prometheus_samples']:.0f}"] for r in live]
        secs = live[0].live["seconds"]
        verdict = ", ".join(
            f"{r.expo.name}: {'met' if r.live['sidecar_cpu'] <= r.live['prometheus_cpu'] else 'MISSED'}"
            f" ({ratio(r.live['sidecar_cpu'], r.live['prometheus_cpu'])})" for r in live)
        out += ["", f"Live, ms: both scraping the same served text at 1 s side by side for {secs:.0f} s; "
                "process CPU (/proc/PID/stat, 10 ms ticks) over that span / scrapes counted by the target.", "",
                markdown(head, rows), "",
                f"Goal, sidecar CPU per scrape <= Prometheus's (live): {verdict}."]
    return "\n".join(out)
