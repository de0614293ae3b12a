"""Benchmark 1: CPU per scrape of a large SGLang exposition: sidecar vs Prometheus 2.42 and 3 (and prometheus_client).

Live, the goal's measure (same served bytes, whole processes side by side): `bench.serve` serves the text,
the real sidecar (`python -m monitor run`), Prometheus 2.42 (Debian's) and Prometheus 3 (`make go-tools`)
all three scrape it every second at the same time; the CPU of each process tree (every thread, parser
workers included; /proc/*/task/*/schedstat, ns) over a window, divided by the scrapes the server counted
for each, is its CPU per scrape. Both ratios (sidecar / 2.42, sidecar / 3) come from the same windows.
`rounds` windows per exposition: medians with [min–max].

gzip on loopback (the anchor exposition): a sidecar asking for gzip and one asking for the plain text
scrape side by side (the server sends prometheus_client's level-9 gzip, compressed once, so the server's
cost is not in either number); what prometheus_client spends compressing per request is timed apart.

In-process (same text, contenders interleaved in rotating order, gc.collect() before each, CPU from
time.process_time): the sidecar's parse (block skipper, bytes in), the full scan it falls back to, the SLO
update (`DeploymentEngine.observe` + `snapshot`), `state()` (per read of /metrics, not per scrape), and
prometheus_client's parser, every sample iterated.
"""

from __future__ import annotations

import gc
import gzip
import json
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import procs
from bench.expositions import Exposition
from bench.table import markdown, median, ms, ms_iqr, ratio
from monitor.config import Deployment, Target
from monitor.feeds import target_wanted
from monitor.parse.exposition import full_scan, parse
from monitor.slo.engine import DeploymentEngine
from tests.components import PROMETHEUS_3, PROMETHEUS_242

PROMETHEUS = PROMETHEUS_242.server
# Who scrapes in the live part: `prom` is 2.42, `prom3` the current 3.x, `side` the sidecar.
PROMETHEUS_BY_WHO = {"prom": PROMETHEUS_242, "prom3": PROMETHEUS_3}
GOAL = {"single": 1.0, "large": 0.3}  # sidecar / Prometheus CPU per scrape (issue 16, goal 1)


@dataclass
class Result:
    expo: Exposition
    cpu: dict[str, list[float]] = field(default_factory=dict)  # contender -> seconds per run
    live: dict[str, list[float]] = field(default_factory=dict)  # measure -> one value per window

    @property
    def goal(self) -> float:
        return GOAL["single"] if self.expo.name.startswith("fixture, 1") else GOAL["large"]


def _deployment() -> Deployment:
    return Deployment(name="bench", tpot_target_seconds=0.04, ttft_target_seconds=1.0)


def contenders(text: str) -> dict[str, Callable[[dict[str, list[float]]], None]]:
    """Each contender runs once and appends its CPU seconds (several parts for the sidecar)."""
    body = text.encode()
    engine = DeploymentEngine(_deployment())
    target = Target(role="server", url="http://127.0.0.1:1/metrics")
    wanted = target_wanted(_deployment(), target)  # what the live sidecar's scrape of this target reads
    clock = [1_000_000.0]
    engine.observe(target, parse(body, wanted, count_families=False))  # first scrape creates the accumulators

    def sidecar(out: dict[str, list[float]]) -> None:
        t0 = time.process_time()
        expo = parse(body, wanted, count_families=False)  # as the scrape loop calls it
        t1 = time.process_time()
        clock[0] += 1.0
        engine.observe(target, expo, clock[0])
        engine.snapshot(clock[0])
        t2 = time.process_time()
        engine.state(clock[0])
        t3 = time.process_time()
        out.setdefault("sidecar parse", []).append(t1 - t0)
        out.setdefault("sidecar update", []).append(t2 - t1)
        out.setdefault("sidecar", []).append(t2 - t0)
        out.setdefault("sidecar state", []).append(t3 - t2)

    def scan(out: dict[str, list[float]]) -> None:
        t0 = time.process_time()
        full_scan(body, wanted, count_families=False)
        out.setdefault("full scan", []).append(time.process_time() - t0)

    def client(out: dict[str, list[float]]) -> None:
        t0 = time.process_time()
        for fam in text_string_to_metric_families(text):
            for _ in fam.samples:
                pass
        out.setdefault("prometheus_client", []).append(time.process_time() - t0)

    return {"sidecar": sidecar, "full_scan": scan, "prometheus_client": client}


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


def _prometheus_config(port: int, path: str) -> str:
    return json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1m"},
        "scrape_configs": [{"job_name": "bench", "metrics_path": path,
                            "static_configs": [{"targets": [f"{procs.HOST}:{port}"]}]}],
    })


def _sidecar_config(port: int, path: str, compression: bool) -> str:
    return json.dumps({
        "sidecar": {"scrape_interval_seconds": 1, "scrape_timeout_seconds": 1},
        "deployments": [{"name": "bench", "tpot_target_seconds": 0.04, "ttft_target_seconds": 1.0,
                         "targets": [{"role": "server", "url": f"http://{procs.HOST}:{port}{path}",
                                      "enable_compression": compression}]}],
    })


def _prom_query(port: int, query: str) -> float:
    url = f"http://{procs.HOST}:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    data = procs.get_json(url)
    found = data["data"]["result"]  # type: ignore[index]
    return float(found[0]["value"][1]) if found else float("nan")


def _command(tmp: Path, port: int, name: str, who: str) -> tuple[list[str], str]:
    """(command line, readiness URL) of one scraper of /NAME/WHO/metrics: `prom*` or `side*`."""
    listen = procs.free_port()
    path = f"/{name}/{who}/metrics"
    if who.startswith("prom"):
        (tmp / f"{name}.{who}.yml").write_text(_prometheus_config(port, path))
        return ([PROMETHEUS_BY_WHO[who].server, f"--config.file={tmp / f'{name}.{who}.yml'}", f"--storage.tsdb.path={tmp / f'{name}.{who}.tsdb'}",
                 f"--web.listen-address={procs.HOST}:{listen}", "--log.level=warn"],
                f"http://{procs.HOST}:{listen}/-/ready")
    (tmp / f"{name}.{who}.yml").write_text(_sidecar_config(port, path, who.endswith("-gz")))
    return (procs.python("-m", "monitor", "run", "-c", str(tmp / f"{name}.{who}.yml"), "--listen", f"{procs.HOST}:{listen}"),
            f"http://{procs.HOST}:{listen}/healthz")


def side_by_side(tmp: Path, port: int, name: str, who: tuple[str, ...], *, rounds: int, seconds: float,
                 warmup: float) -> dict[str, list[float]]:
    """Scrapers of the same text at the same time; per window each one's CPU per scrape (s), and for each
    Prometheus (`prom*`) its scrape_duration p50 (`WHO_duration`) and samples per scrape (`WHO_samples`)."""
    import contextlib

    out: dict[str, list[float]] = {w: [] for w in who}
    counts_url = f"http://{procs.HOST}:{port}/_counts"
    with contextlib.ExitStack() as stack:
        started = {}
        for w in who:
            cmd, ready = _command(tmp, port, name, w)
            proc = stack.enter_context(procs.started(cmd, stdout=None))
            started[w] = (proc, ready)
        for proc, ready in started.values():
            procs.wait_http(ready, proc=proc)
        # Prometheus applies its targets ~5 s after start: measure from its first scrapes on, not its start-up.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = procs.get_json(counts_url)
            if all(counts.get(f"{name}/{w}", 0) >= 2 for w in who):  # type: ignore[union-attr]
                break
            time.sleep(0.2)
        time.sleep(warmup)
        for _ in range(rounds):
            c0 = procs.get_json(counts_url)
            cpu0 = {w: procs.cpu_ns(p.pid) for w, (p, _) in started.items()}
            time.sleep(seconds)
            c1 = procs.get_json(counts_url)
            cpu1 = {w: procs.cpu_ns(p.pid) for w, (p, _) in started.items()}
            for w in who:
                n = c1.get(f"{name}/{w}", 0) - c0.get(f"{name}/{w}", 0)  # type: ignore[union-attr]
                out[w].append((cpu1[w] - cpu0[w]) / 1e9 / max(n, 1))
        for w in who:
            if not w.startswith("prom"):
                continue
            prom_port = int(started[w][1].rsplit(":", 1)[1].split("/")[0])
            window = f"{max(int(seconds), 2)}s"
            out[f"{w}_duration"] = [_prom_query(prom_port, "quantile_over_time(0.5, "
                                                f'scrape_duration_seconds{{job="bench"}}[{window}])')]
            out[f"{w}_samples"] = [_prom_query(prom_port, 'scrape_samples_scraped{job="bench"}')]
    return out


def run_live(results: list[Result], *, rounds: int, seconds: float, warmup: float = 3.0,
             gzip_for: str | None = None) -> dict[str, Any]:
    """The live rows of every exposition; returns the gzip comparison for the exposition named `gzip_for`.

    Both Prometheus builds must be installed: a report with one of them silently left out would read as
    the whole comparison."""
    for build in PROMETHEUS_BY_WHO.values():
        if not Path(build.server).exists():
            raise FileNotFoundError(f"{build.server} is missing ({build.install})")
    tmp = Path(tempfile.mkdtemp(prefix="bench-parse-"))
    gz: dict[str, Any] = {}
    try:
        for i, res in enumerate(results):
            (tmp / f"e{i}.txt").write_text(res.expo.text)
        with procs.started(procs.python("-m", "bench.serve", str(tmp))) as server:
            port = procs.read_port(server)
            for i, res in enumerate(results):
                # One run, the same bytes: both Prometheus builds and the sidecar scrape side by side.
                got = side_by_side(tmp, port, f"e{i}", ("prom", "prom3", "side"), rounds=rounds, seconds=seconds,
                                   warmup=warmup)
                res.live = {"prometheus_cpu": got["prom"], "prometheus3_cpu": got["prom3"], "sidecar_cpu": got["side"],
                            "ratio": [s / p for s, p in zip(got["side"], got["prom"]) if p > 0],
                            "ratio3": [s / p for s, p in zip(got["side"], got["prom3"]) if p > 0],
                            "prometheus_duration": got["prom_duration"],
                            "prometheus3_duration": got["prom3_duration"],
                            "prometheus_samples": got["prom_samples"],
                            "prometheus3_samples": got["prom3_samples"]}
                if res.expo.name == gzip_for:
                    gz = side_by_side(tmp, port, f"e{i}", ("side", "side-gz"), rounds=rounds, seconds=seconds,
                                      warmup=warmup)
                    body = res.expo.text.encode()
                    t0 = time.process_time()
                    for _ in range(3):
                        gzip.compress(body, 9)
                    gz["server_gzip"] = [(time.process_time() - t0) / 3]
                    gz["bytes"] = [float(len(body)), float(len(gzip.compress(body, 9)))]
                    gz["name"] = res.expo.name  # type: ignore[assignment]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return gz


def _range_ms(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{ms(median(values))} [{ms(min(values))}–{ms(max(values))}]"


def _ratio_range(rs: list[float]) -> str:
    return f"{median(rs):.2f}x [{min(rs):.2f}–{max(rs):.2f}]" if rs else "–"


def goal_lines(results: list[Result]) -> list[tuple[str, str, str, str]]:
    """(goal, measured, target, verdict) per exposition measured live, against each Prometheus."""
    out = []
    for key, against in (("ratio", "Prometheus 2.42"), ("ratio3", "Prometheus 3")):
        for r in results:
            rs = r.live.get(key)
            if not rs:
                continue
            value = median(rs)
            out.append((f"1. CPU per scrape vs {against}, {r.expo.name}", _ratio_range(rs), f"<= {r.goal:g}x",
                        f"{'met' if value <= r.goal else 'MISSED'} ({value / r.goal:.2f} of the goal)"))
    return out


def render(results: list[Result], gz: dict[str, Any] | None = None) -> str:
    live = [r for r in results if r.live.get("ratio")]
    out = []
    if live:
        n = len(live[0].live["ratio"])
        head = ["exposition", "samples", "MB", "sidecar CPU/scrape ms", "Prometheus 2.42 CPU/scrape ms",
                "Prometheus 3 CPU/scrape ms", "sidecar / 2.42", "sidecar / 3", "goal",
                "scrape_duration p50 ms 2.42 / 3", "samples stored 2.42 / 3"]
        rows = [[r.expo.name, str(r.expo.samples), f"{r.expo.size_bytes / 1e6:.2f}",
                 _range_ms(r.live["sidecar_cpu"]), _range_ms(r.live["prometheus_cpu"]),
                 _range_ms(r.live["prometheus3_cpu"]), _ratio_range(r.live["ratio"]), _ratio_range(r.live["ratio3"]),
                 f"<= {r.goal:g}x",
                 f"{ms(r.live['prometheus_duration'][0])} / {ms(r.live['prometheus3_duration'][0])}",
                 f"{r.live['prometheus_samples'][0]:.0f} / {r.live['prometheus3_samples'][0]:.0f}"]
                for r in live]
        out += [f"Live, whole processes, the same served bytes, the sidecar, Prometheus 2.42 and Prometheus 3 all "
                f"scraping every 1 s at the same time (one run, both ratios from the same windows): median "
                f"[min–max] of {n} windows per exposition (CPU of the process tree over a window / scrapes the "
                "server counted for it).", "", markdown(head, rows)]
    if gz and gz.get("side"):
        plain, zipped = gz["side"], gz["side-gz"]
        raw, packed = gz["bytes"]
        out += ["", f"gzip on loopback, the {gz['name']} exposition ({raw / 1e6:.2f} MB, "
                f"{packed / 1e3:.0f} kB gzipped): sidecar CPU per scrape asking for gzip "
                f"{_range_ms(zipped)} ms vs plain {_range_ms(plain)} ms ({ratio(median(zipped), median(plain))}), "
                f"side by side; prometheus_client gzips every scrape that asks, here "
                f"{ms(gz['server_gzip'][0])} ms of the server's CPU per scrape (level 9, in-process). So the sidecar "
                "does not ask for gzip on loopback unless told to (`enable_compression: true`); over a network "
                f"it asks (the body is {raw / packed:.0f}x smaller)."]
    c = results[0].cpu if results else {}
    if c:
        head = ["exposition", "samples", "MB", "sidecar parse", "full scan", "SLO update", "sidecar total",
                "state()", "prometheus_client", "client / sidecar"]
        rows = [[r.expo.name, str(r.expo.samples), f"{r.expo.size_bytes / 1e6:.2f}",
                 ms_iqr(r.cpu["sidecar parse"]), ms_iqr(r.cpu["full scan"]), ms_iqr(r.cpu["sidecar update"]),
                 ms_iqr(r.cpu["sidecar"]), ms_iqr(r.cpu["sidecar state"]), ms_iqr(r.cpu["prometheus_client"]),
                 ratio(median(r.cpu["prometheus_client"]), median(r.cpu["sidecar"]))] for r in results]
        out += ["", f"In-process CPU per scrape, ms: median [IQR] of {len(c['sidecar'])} interleaved runs each "
                "(`sidecar parse` skips unwanted blocks; `full scan` is what it falls back to on ungrouped text).",
                "", markdown(head, rows)]
    return "\n".join(out)
