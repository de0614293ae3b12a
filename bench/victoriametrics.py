"""Benchmark 9: VictoriaMetrics beside Prometheus 3 on the same synthetic fleet (issue #35 item 5): samples/s
ingested, rule evaluation time for the generated rules, RSS of every process.

For N deployments (`generate_fleet.fleet_config(N)`: the shipped examples' deployments cycled, each renamed),
every SGLang target (pd-mixed: its server; pd-disaggregated: its prefill and decode, the router dropped) is
pointed at one `bench.serve` process serving the captured SGLang 0.5.23 exposition (tests/fixtures/real), each
under a path of its own, and `python -m monitor generate` writes the rules and the scrape config (each target
labelled {deployment, role} there). Then, side by side in one run on the same targets:

- VictoriaMetrics single node, fed by one vmagent (remote write) scraping with the generated prometheus.yml
  (`-promscrape.config.strictParse=false`), and vmalert evaluating the generated rule files against it
  (`-notifier.blackhole`, its recording results written back into VictoriaMetrics);
- Prometheus 3 scraping the same targets itself and evaluating the same rule files (the generated config,
  with the sidecar's job and the Alertmanager dropped).

Over a measured window after a warm-up each engine's own counters are read at both ends:
- ingested samples/s: VictoriaMetrics' `vm_rows_inserted_total` less the rows vmalert sent
  (`vmalert_remotewrite_sent_rows_total`), i.e. what came from vmagent; Prometheus'
  `prometheus_tsdb_head_samples_appended_total` less its rules' output (`prometheus_rule_group_last_evaluation_samples`
  summed over groups, once per round);
- evaluation time per round: the time spent in every group's evaluation, summed over the groups (Δ `_sum` /
  Δ `_count` of the group-duration summary over all groups, times the number of groups): vmalert's
  `vmalert_iteration_duration_seconds`, Prometheus' `prometheus_rule_group_duration_seconds`;
- RSS: VmRSS of each process, sampled every 2 s over the window, the median.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from bench import procs
from bench.expositions import FIXTURE
from bench.generate_fleet import fleet_config
from bench.table import markdown, median
from tests.components import GO_BIN

VICTORIA_METRICS, VMAGENT, VMALERT, PROMETHEUS = (GO_BIN / n for n in ("victoria-metrics", "vmagent", "vmalert",
                                                                     "prometheus"))
INSTALL = "make go-tools (tools/go_tools.sh)"
ENGINES = ("victoria-metrics", "vmagent", "vmalert", "prometheus")
SERVED_SAMPLES = sum(1 for line in FIXTURE.read_text().splitlines() if line and not line.startswith("#"))
AUTO_SAMPLES = 5  # up, scrape_duration_seconds, scrape_samples_scraped, ..._post_metric_relabeling, scrape_series_added
ROLES = ("server", "prefill", "decode")  # the SGLang targets; a deployment's router is dropped
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


def versions() -> dict[str, str]:
    out = {}
    for path in (VICTORIA_METRICS, VMAGENT, VMALERT):
        res = subprocess.run([str(path), "-version"], capture_output=True, text=True, timeout=30)
        out[path.name] = (res.stdout or res.stderr).strip().splitlines()[0]
    res = subprocess.run([str(PROMETHEUS), "--version"], capture_output=True, text=True, timeout=30)
    out["prometheus"] = (res.stdout or res.stderr).splitlines()[0].split(" (", 1)[0]
    return out


def bench_config(n: int, port: int) -> dict[str, Any]:
    """`fleet_config(n)` with every SGLang target at /sglang/DEPLOYMENT-ROLE/metrics of the one server."""
    cfg = fleet_config(n)
    for d in cfg["deployments"]:
        d["targets"] = [{**t, "url": f"http://{procs.HOST}:{port}/sglang/{d['name']}-{t['role']}/metrics"}
                        for t in d["targets"] if t["role"] in ROLES]
    return cfg


def scrape_config(generated: Path, interval: str, eval_interval: str) -> Path:
    """The generated prometheus.yml beside itself (its rule_files are relative to it), with the intervals given,
    without the sidecar's job (nothing of this benchmark listens there) and without an Alertmanager."""
    cfg = yaml.safe_load(generated.read_text())
    timeout = cfg["global"].get("scrape_timeout", "10s")
    cfg["global"].update({"scrape_interval": interval, "evaluation_interval": eval_interval,
                          "scrape_timeout": interval if _seconds(interval) < _seconds(timeout) else timeout})
    cfg.pop("alerting", None)
    cfg["scrape_configs"] = [j for j in cfg["scrape_configs"] if j["job_name"] != "slo-monitor"]
    out = generated.with_name("bench-prometheus.yml")
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def metrics(url: str) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            with contextlib.suppress(ValueError):
                out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **where: str) -> float:
    return sum(v for n, labels, v in samples if n == name and all(labels.get(k) == x for k, x in where.items()))


def count(samples: list[tuple[str, dict[str, str], float]], name: str) -> int:
    return sum(1 for n, _, _ in samples if n == name)


def _wait(what: str, check: Callable[[], bool], limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if check():
                return
        time.sleep(1.0)
    raise RuntimeError(f"{what}: not within {limit:.0f} s")


def _prom_up(url: str) -> float:
    data = procs.get_json(url + "/api/v1/query?query=count(up%3D%3D1)")
    found = data["data"]["result"]  # type: ignore[index]
    return float(found[0]["value"][1]) if found else 0.0


class Reading(NamedTuple):
    at: float  # time.monotonic() when read
    samples: list[tuple[str, dict[str, str], float]]
    cpu: float  # the process's CPU seconds then


def _read(url: str, pid: int) -> Reading:
    samples = metrics(url)
    return Reading(time.monotonic(), samples, procs.cpu_seconds(pid))


def run_size(tmp: Path, n: int, *, interval: str, eval_interval: str, warmup: float, window: float,
             drain_limit: float = 60.0) -> dict[str, Any]:
    """One fleet of `n` deployments: start everything, wait until both engines scrape every target, `warmup`
    seconds more and until vmagent's queue is drained (at most `drain_limit` s), then measure over `window` s."""
    for path in (VICTORIA_METRICS, VMAGENT, VMALERT, PROMETHEUS):
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing ({INSTALL})")
    began = time.monotonic()
    work = tmp / f"n{n}"
    (work / "targets").mkdir(parents=True)
    shutil.copy(FIXTURE, work / "targets" / "sglang.txt")
    logs = {name: (work / f"{name}.log").open("w") for name in ("serve", *ENGINES)}
    try:
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(procs.started(procs.python("-m", "bench.serve", str(work / "targets")),
                                                       stderr=logs["serve"]))
            port = procs.read_port(server)
            config = work / "fleet.json"
            cfg = bench_config(n, port)
            config.write_text(json.dumps(cfg))
            gen = work / "gen"
            res = subprocess.run([sys.executable, "-m", "monitor", "generate", "-c", str(config), "--out", str(gen)],
                                 cwd=procs.ROOT, capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"generate failed: {res.stderr[-2000:]}")
            scrape = scrape_config(gen / "alerts" / "prometheus.yml", interval, eval_interval)
            rules = gen / "alerts" / "rules"
            targets = sum(1 for d in cfg["deployments"] for _ in d["targets"])
            port_of = {name: procs.free_port() for name in ENGINES}
            url = {name: f"http://{procs.HOST}:{p}" for name, p in port_of.items()}
            commands = {
                "victoria-metrics": [str(VICTORIA_METRICS), f"-httpListenAddr={procs.HOST}:{port_of['victoria-metrics']}",
                                     f"-storageDataPath={work / 'vm-data'}", "-retentionPeriod=1d", "-loggerLevel=WARN"],
                "vmagent": [str(VMAGENT), f"-httpListenAddr={procs.HOST}:{port_of['vmagent']}",
                            f"-promscrape.config={scrape}", "-promscrape.config.strictParse=false",
                            f"-remoteWrite.url={url['victoria-metrics']}/api/v1/write",
                            f"-remoteWrite.tmpDataPath={work / 'vmagent-queue'}", "-loggerLevel=WARN"],
                "vmalert": [str(VMALERT), f"-httpListenAddr={procs.HOST}:{port_of['vmalert']}",
                            f"-rule={rules}/*.rules.yml", f"-datasource.url={url['victoria-metrics']}",
                            f"-remoteWrite.url={url['victoria-metrics']}", "-notifier.blackhole",
                            f"-evaluationInterval={eval_interval}", "-loggerLevel=WARN"],
                "prometheus": [str(PROMETHEUS), f"--config.file={scrape}", f"--storage.tsdb.path={work / 'prom-data'}",
                               f"--web.listen-address={procs.HOST}:{port_of['prometheus']}", "--log.level=warn"],
            }
            started: dict[str, subprocess.Popen] = {}
            for name, cmd in commands.items():  # VictoriaMetrics before its clients
                started[name] = stack.enter_context(procs.started(cmd, stdout=subprocess.DEVNULL, stderr=logs[name]))
                ready = url[name] + ("/-/ready" if name == "prometheus" else "/health")
                try:
                    procs.wait_http(ready, timeout=60, proc=started[name])
                except RuntimeError as err:
                    logs[name].flush()
                    raise RuntimeError(f"{err}; its log: {(work / f'{name}.log').read_text()[-2000:]}") from None
            own = {name: url[name] + "/metrics" for name in ENGINES}
            _wait("every target up in vmagent",
                  lambda: total(metrics(own["vmagent"]), "vm_promscrape_targets", status="up") >= targets, 120)
            _wait("every target up in Prometheus", lambda: _prom_up(url["prometheus"]) >= targets, 120)
            time.sleep(warmup)
            _wait("vmagent's queue drained", lambda: total(metrics(own["vmagent"]),
                                                           "vmagent_remotewrite_pending_data_bytes") < 1e6, drain_limit)
            ready_s = time.monotonic() - began
            before = {name: _read(own[name], started[name].pid) for name in ENGINES}
            t0 = time.monotonic()
            rss: dict[str, list[float]] = {name: [] for name in ENGINES}
            rule_samples: list[float] = []  # Prometheus' rules' output per round, summed over the groups
            while time.monotonic() - t0 < window:
                for name, proc in started.items():
                    if proc.poll() is not None:
                        raise RuntimeError(f"{name} exited with {proc.returncode} during the run: {_tail(work, name)}")
                    rss[name].append(procs.rss_mb(proc.pid)[0])
                with contextlib.suppress(OSError):
                    rule_samples.append(total(metrics(own["prometheus"]), "prometheus_rule_group_last_evaluation_samples"))
                time.sleep(2.0)
            after = {name: _read(own[name], started[name].pid) for name in ENGINES}
    finally:
        for f in logs.values():
            f.close()
    return {"deployments": n, "targets": targets, "interval": interval, "eval_interval": eval_interval,
            "rules": _rules(rules), "ready_s": ready_s, "wall_s": time.monotonic() - began,
            **_measures(before, after, rule_samples), "rss": {name: median(v) for name, v in rss.items()},
            "log_errors": {name: _tail(work, name) for name in ENGINES if _tail(work, name)}}


def _rules(rules: Path) -> int:
    return sum(len(g["rules"]) for f in rules.glob("*.rules.yml")
               for g in (yaml.safe_load(f.read_text()) or {}).get("groups", []))


def _tail(work: Path, name: str) -> str:
    lines = [line for line in (work / f"{name}.log").read_text(errors="replace").splitlines()
             if "error" in line.lower() or "fatal" in line.lower() or "panic" in line.lower()]
    return f"{len(lines)} error line(s), the last: {lines[-1][:300]}" if lines else ""


def _measures(before: dict[str, Reading], after: dict[str, Reading], rule_samples: list[float]) -> dict[str, Any]:
    def rate(name: str, metric: str) -> float:
        return ((total(after[name].samples, metric) - total(before[name].samples, metric))
                / (after[name].at - before[name].at))

    def delta(name: str, metric: str) -> float:
        return total(after[name].samples, metric) - total(before[name].samples, metric)

    vm_groups = count(after["vmalert"].samples, "vmalert_iteration_duration_seconds_count")
    prom_groups = count(after["prometheus"].samples, "prometheus_rule_group_last_duration_seconds")
    vm_iters = delta("vmalert", "vmalert_iteration_duration_seconds_count")
    prom_iters = delta("prometheus", "prometheus_rule_group_duration_seconds_count")
    prom_seconds = after["prometheus"].at - before["prometheus"].at
    return {
        "window_s": after["prometheus"].at - before["prometheus"].at,
        "groups": {"vmalert": vm_groups, "prometheus": prom_groups},
        # Ingested samples/s: all rows stored, and those of the scrapes (the rules' output taken off).
        "vm_rows": rate("victoria-metrics", "vm_rows_inserted_total"),
        "vm_scraped": rate("victoria-metrics", "vm_rows_inserted_total")
                      - rate("vmalert", "vmalert_remotewrite_sent_rows_total"),
        "vmagent_scraped": rate("vmagent", "vm_promscrape_scraped_samples_sum"),
        "prom_rows": rate("prometheus", "prometheus_tsdb_head_samples_appended_total"),
        "prom_scraped": rate("prometheus", "prometheus_tsdb_head_samples_appended_total")
                        - median(rule_samples) * prom_iters / max(prom_groups, 1) / prom_seconds,
        # Evaluation time per round: the mean group evaluation over the window times the groups.
        "vm_eval": delta("vmalert", "vmalert_iteration_duration_seconds_sum") / max(vm_iters, 1) * vm_groups,
        "prom_eval": delta("prometheus", "prometheus_rule_group_duration_seconds_sum") / max(prom_iters, 1) * prom_groups,
        "vm_rounds": vm_iters / max(vm_groups, 1), "prom_rounds": prom_iters / max(prom_groups, 1),
        "failures": {"vmalert": delta("vmalert", "vmalert_recording_rules_errors_total")
                     + delta("vmalert", "vmalert_alerting_rules_errors_total"),
                     "prometheus": delta("prometheus", "prometheus_rule_evaluation_failures_total")},
        "missed": {"vmalert": delta("vmalert", "vmalert_iteration_missed_total"),
                   "prometheus": delta("prometheus", "prometheus_rule_group_iterations_missed_total")},
        "cores": {name: (after[name].cpu - before[name].cpu) / (after[name].at - before[name].at) for name in ENGINES},
    }


SIZES: dict[int, tuple[str, str]] = {30: ("15s", "15s"), 300: ("15s", "60s")}  # deployments: scrape, evaluation


def run(sizes: dict[int, tuple[str, str]] | None = None, *, warmup: float = 35.0, window: float = 75.0
        ) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-vm-"))
    try:
        out: dict[str, Any] = {"versions": versions(), "rows": []}
        for n, (interval, eval_interval) in (sizes or SIZES).items():
            out["rows"].append(run_size(tmp, n, interval=interval, eval_interval=eval_interval, warmup=warmup,
                                        window=window))
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _k(x: float) -> str:
    return f"{x:,.0f}"


OVERRUN = (" The 300-deployment fleet is evaluated every 60 s: at 15 s, in a trial run here with other jobs loading "
           "the 2 cores, both engines missed iterations (Prometheus 1,243 group evaluations, vmalert 364, in 76 s) "
           "and vmalert's queries met connection resets.")


def render(res: dict[str, Any]) -> str:
    v = res["versions"]
    head = ["deployments", "targets", "rules (groups)", "scrape / eval interval", "samples/s VM (vmagent)",
            "samples/s Prom 3", "expected", "eval s/round vmalert", "eval s/round Prom 3", "RSS MB victoria-metrics",
            "RSS MB vmagent", "RSS MB vmalert", "RSS MB prometheus", "CPU cores VM+vmagent+vmalert",
            "CPU cores prometheus"]
    rows, notes = [], []
    for r in res["rows"]:
        expected = r["targets"] * (SERVED_SAMPLES + AUTO_SAMPLES) / _seconds(r["interval"])
        rss, cores = r["rss"], r["cores"]
        rows.append([str(r["deployments"]), str(r["targets"]), f"{r['rules']:,} ({r['groups']['prometheus']})",
                     f"{r['interval']} / {r['eval_interval']}", _k(r["vm_scraped"]), _k(r["prom_scraped"]),
                     _k(expected), f"{r['vm_eval']:.2f}", f"{r['prom_eval']:.2f}",
                     *(f"{rss[name]:.0f}" for name in ENGINES),
                     f"{cores['victoria-metrics'] + cores['vmagent'] + cores['vmalert']:.2f}",
                     f"{cores['prometheus']:.2f}"])
        bad = {**{f"{e} failed rule evaluations": x for e, x in r["failures"].items() if x},
               **{f"{e} missed iterations": x for e, x in r["missed"].items() if x}}
        notes.append(
            f"- {r['deployments']} deployments: window {r['window_s']:.0f} s after {r['ready_s']:.0f} s of start-up and "
            f"warm-up, {r['wall_s']:.0f} s in all; evaluation rounds in the window: vmalert {r['vm_rounds']:.1f}, "
            f"Prometheus {r['prom_rounds']:.1f}; all samples stored/s (rules' output included): VictoriaMetrics "
            f"{_k(r['vm_rows'])}, Prometheus {_k(r['prom_rows'])}; vmagent's scraped samples/s "
            f"(`vm_promscrape_scraped_samples_sum`) {_k(r['vmagent_scraped'])}; CPU cores victoria-metrics "
            f"{cores['victoria-metrics']:.2f}, vmagent {cores['vmagent']:.2f}, vmalert {cores['vmalert']:.2f}"
            + "".join(f"; {k}: {x:.0f}" for k, x in bad.items())
            + "".join(f"; {k}'s log: {x}" for k, x in r["log_errors"].items()) + ".")
    return (f"{v['victoria-metrics']} fed by one vmagent ({v['vmagent']}, remote write) with {v['vmalert']} "
            f"(`-notifier.blackhole`), and {v['prometheus']} scraping and evaluating itself: both side by side in one "
            "run per size, scraping the same targets (one `bench.serve` process serving the captured SGLang 0.5.23 "
            f"exposition, {SERVED_SAMPLES} samples, at a path of its own to every SGLang target of the fleet: a "
            "pd-mixed deployment's server, a pd-disaggregated one's prefill and decode) with the scrape config "
            "`monitor generate` wrote (each target labelled with its deployment), evaluating the rule files it wrote "
            "for the fleet (`generate_fleet.fleet_config`). Read from each engine's own counters over the window: "
            "samples/s ingested from the scrapes is VictoriaMetrics' `vm_rows_inserted_total` less vmalert's "
            "`vmalert_remotewrite_sent_rows_total`, Prometheus' `prometheus_tsdb_head_samples_appended_total` less "
            "its rules' output (`prometheus_rule_group_last_evaluation_samples` summed over the groups, per round); "
            f"expected is targets x ({SERVED_SAMPLES} served + {AUTO_SAMPLES} per scrape) / interval. Eval s/round: "
            "the mean group evaluation over the window (Δ `_sum` / Δ `_count` of the group-duration summary over "
            "every group: `vmalert_iteration_duration_seconds`, `prometheus_rule_group_duration_seconds`) times the "
            "groups, i.e. every group's evaluation wall time summed per round (not the median group; groups run "
            "concurrently, vmalert's include a query over HTTP per rule). RSS: median VmRSS of samples every 2 s "
            "over the window; CPU: cores used over the window (/proc/PID/stat). The served counters do not move (a static exposition), so every rate "
            "is 0; the rules' cost is their series selection and arithmetic."
            + (OVERRUN if any(r["deployments"] == 300 and r["eval_interval"] != "15s" for r in res["rows"]) else "")
            + "\n\n"
            + markdown(head, rows) + "\n\n" + "\n".join(notes))


def _seconds(interval: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", interval)
    if m is None:
        raise ValueError(f"{interval!r}: a duration like 15s")
    return float(m.group(1)) * units[m.group(2)]
