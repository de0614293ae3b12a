"""A sharded fleet on VictoriaMetrics, all real processes on 127.0.0.1 (issue #35).

    emulated SGLang (N deployments, mixed and PD)
      <- 3 sidecars (`slo-monitor run --shard i/3`)
      <- 2 vmagents sharing the scrape (`-promscrape.cluster.membersCount=2`) of the servers and the sidecars,
         from the generated prometheus.yml, remote-writing every sample to
           - VictoriaMetrics single node, where vmalert evaluates the generated rules and notifies
             Alertmanager 0.35 (-> a webhook in this process), and
           - Prometheus 3 (its remote-write receiver), evaluating the same rules on the same samples
             (no Alertmanager: it only says what it would have paged, in its ALERTS series).

Everything runs at the generated rules' time scale (`--time-scale`, 30: the 1h/5m page pair is 120 s/10 s).
Servers and sidecars are scraped, and rules evaluated, every 2 s, not the generated 1 s: one emulator process
serving 30 deployments' full SGLang expositions to two scrapers a second would take a core of its own, and
VictoriaMetrics answering vmalert's 1,800 queries a second another. Prometheus 3 evaluates the rules of the
`COMPARED` deployments only (it is the reference for the side-by-side numbers, not part of the fleet). The
VictoriaMetrics delays that no rule scales are scaled by hand with the evaluation interval (`latency_offset`).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from monitor.config import Config, parse_config
from monitor.emulate import Emulator, find_free_base_port, plan
from tests.components import GO_BIN
from tests.conftest import free_port
from tests.e2e.stack import Webhook, http_json  # the paging stack's receiver and JSON client
from tests.procs import answers, stop, wait_until

ROOT = Path(__file__).resolve().parents[2]
__all__ = ["GO_BIN", "Fleet", "wait_until"]
TIME_SCALE = 30
SCRAPE_SECONDS = 2
EVAL_SECONDS = 2
COMPARED = ("mixed-004", "pd-005")  # the deployments Prometheus 3 evaluates too, for the side-by-side numbers
SHARDS = 3
VMAGENTS = 2
TPOT_TARGET = 0.04


def fleet_config(n: int) -> dict[str, Any]:
    """N deployments, mixed and PD in turn, each with TPOT and TTFT targets (as the e2e paging stack's)."""
    deps = []
    for i in range(n):
        pd = i % 2 == 1
        roles = ("prefill", "decode") if pd else ("server",)
        deps.append({
            "name": f"{'pd' if pd else 'mixed'}-{i:03d}", "model": "Kimi-K2.6", "hardware": "Atlas 800I A3",
            "cards": 16 if pd else 8, "mode": "pd-disaggregated" if pd else "pd-mixed",
            "tpot_target_seconds": TPOT_TARGET, "ttft_target_seconds": 2.0, "input_tokens": 512,
            "output_tokens": 48,
            "targets": [{"role": r, "url": f"http://127.0.0.1:{j + 1}/metrics"} for j, r in enumerate(roles)]})
    return {"sidecar": {"scrape_interval_seconds": SCRAPE_SECONDS, "scrape_timeout_seconds": 1},
            "deployments": deps}


def require(path: Path) -> str:
    if not path.exists():
        raise RuntimeError(f"{path} is missing (make go-tools builds it)")
    return str(path)


class EmulatorThread:
    def __init__(self, config: Config, base_port: int, seed: int = 11) -> None:
        self.loop = asyncio.new_event_loop()
        self.emulator = Emulator(config, base_port, speed=1.0, seed=seed)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.emulator.start(), self.loop).result(60)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.emulator.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class Proc:
    argv: list[str]
    log: Path
    ready: str  # a URL that answers 200 once it serves
    popen: subprocess.Popen | None = None

    def start(self) -> Proc:
        log = self.log.open("ab")
        self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.log.parent)
        log.close()
        return self

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (then SIGKILL, as tests.procs.stop does), or SIGKILL at once: a crash."""
        if self.popen is None:
            return
        if kill and self.popen.poll() is None:
            self.popen.kill()
        stop(self.popen)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while not answers(self.ready):
            if self.popen is not None and self.popen.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited ({self.popen.returncode}):\n{self.tail()}")
            if time.time() > deadline:
                raise RuntimeError(f"{self.argv[0]} did not answer {self.ready} in {timeout:g} s:\n{self.tail()}")
            time.sleep(0.2)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


@dataclass
class Fleet:
    tmp: Path
    n: int
    config: Config | None = None
    emulator: EmulatorThread | None = None
    webhook: Webhook | None = None
    procs: dict[str, Proc] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    gen: Path | None = None

    # --- queries -------------------------------------------------------------------------------------------------
    def query(self, engine: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query on `vm` (VictoriaMetrics) or `prom` (Prometheus 3)."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        if engine == "vm":
            params["nocache"] = "1"
        url = f"{self.urls[engine]}/api/v1/query?{urllib.parse.urlencode(params)}"
        return http_json(url)["data"]["result"]

    def query_range(self, engine: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        if engine == "vm":
            params["nocache"] = "1"
        url = f"{self.urls[engine]}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        return http_json(url, timeout=30)["data"]["result"]

    def incident(self, deployment: str, kind: str, **extra: Any) -> float:
        t = time.time()
        http_json(f"{self.emulator.emulator.control_url}/control/incident",
                  {"deployment": deployment, "kind": kind, **extra})
        return t

    def clear(self) -> float:
        t = time.time()
        http_json(f"{self.emulator.emulator.control_url}/control/clear", {})
        return t

    def pages(self, since: float, status: str = "firing", **labels: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, a) for t, path, st, a in self.webhook.alerts(since)
                if path == "/page" and st == status and all(a["labels"].get(k) == v for k, v in labels.items())]

    # --- processes -----------------------------------------------------------------------------------------------
    def sidecar(self, i: int) -> Proc:
        port = self.urls[f"sidecar-{i}"].rsplit(":", 1)[1]
        return Proc([sys.executable, "-m", "monitor", "run", "-c", str(self.tmp / "config.yaml"),
                     "--shard", f"{i}/{SHARDS}", "--listen", f"127.0.0.1:{port}"],
                    self.tmp / f"sidecar-{i}.log", self.urls[f"sidecar-{i}"] + "/healthz")

    def vmagent(self, member: int, members: int = VMAGENTS) -> Proc:
        port = self.urls[f"vmagent-{member}"].rsplit(":", 1)[1]
        return Proc([require(GO_BIN / "vmagent"), f"-httpListenAddr=127.0.0.1:{port}",
                     f"-promscrape.config={self.tmp / 'scrape.yml'}", "-promscrape.config.strictParse=false",
                     f"-promscrape.cluster.membersCount={members}", f"-promscrape.cluster.memberNum={member}",
                     f"-remoteWrite.url={self.urls['vm']}/api/v1/write",
                     f"-remoteWrite.url={self.urls['prom']}/api/v1/write",
                     f"-remoteWrite.tmpDataPath={self.tmp / f'vmagent-{member}-queue'}",
                     "-remoteWrite.flushInterval=100ms", "-loggerLevel=WARN"],
                    self.tmp / f"vmagent-{member}.log", self.urls[f"vmagent-{member}"] + "/health")

    def victoriametrics(self) -> Proc:
        port = self.urls["vm"].rsplit(":", 1)[1]
        return Proc([require(GO_BIN / "victoria-metrics"), f"-httpListenAddr=127.0.0.1:{port}",
                     f"-storageDataPath={self.tmp / 'vm-data'}", "-retentionPeriod=1d",
                     f"-search.latencyOffset={self.latency_offset}",
                     "-loggerLevel=WARN"],
                    self.tmp / "victoria-metrics.log", self.urls["vm"] + "/health")

    @property
    def interval(self) -> str:
        return f"{EVAL_SECONDS}s"

    @property
    def latency_offset(self) -> str:
        # VictoriaMetrics hides the last 30 s from queries by default, two 15 s evaluation intervals; vmalert's
        # -rule.evalDelay (30 s) shifts every evaluation back by as much. Here: two evaluation intervals too.
        return f"{2 * EVAL_SECONDS}s"

    def vmalert(self) -> Proc:
        port = self.urls["vmalert"].rsplit(":", 1)[1]
        return Proc([require(GO_BIN / "vmalert"), f"-httpListenAddr=127.0.0.1:{port}",
                     f"-rule={self.gen / 'alerts' / 'rules'}/*.rules.yml",
                     f"-datasource.url={self.urls['vm']}", f"-remoteWrite.url={self.urls['vm']}",
                     f"-remoteRead.url={self.urls['vm']}", f"-notifier.url={self.urls['am']}",
                     f"-evaluationInterval={self.interval}", f"-rule.evalDelay={self.latency_offset}",
                     "-remoteWrite.flushInterval=100ms", "-loggerLevel=WARN"],
                    self.tmp / "vmalert.log", self.urls["vmalert"] + "/health")

    def prometheus(self) -> Proc:
        port = self.urls["prom"].rsplit(":", 1)[1]
        cfg = self.tmp / "prometheus-rules-only.yml"
        cfg.write_text(yaml.safe_dump({"global": {"evaluation_interval": self.interval},
                                       "rule_files": [str(self.gen / "alerts" / "rules" / f"{d}.rules.yml")
                                                      for d in COMPARED]}))
        return Proc([require(GO_BIN / "prometheus"), f"--config.file={cfg}", f"--storage.tsdb.path={self.tmp / 'prom-data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--web.enable-remote-write-receiver",
                     "--log.level=warn"],
                    self.tmp / "prometheus.log", self.urls["prom"] + "/-/ready")

    def alertmanager(self) -> Proc:
        port = self.urls["am"].rsplit(":", 1)[1]
        return Proc([require(GO_BIN / "alertmanager"), f"--config.file={self.gen / 'alerts' / 'alertmanager.yml'}",
                     f"--storage.path={self.tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{port}",
                     "--cluster.listen-address=", "--log.level=warn"],
                    self.tmp / "alertmanager.log", self.urls["am"] + "/-/ready")

    def start(self) -> Fleet:
        try:
            return self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> Fleet:
        base = parse_config(fleet_config(self.n))
        self.emulator = EmulatorThread(base, find_free_base_port(plan(base, 0).port_count))
        self.webhook = Webhook()
        for name in ("vm", "prom", "am", "vmalert", *(f"sidecar-{i}" for i in range(SHARDS)),
                     *(f"vmagent-{i}" for i in range(VMAGENTS))):
            self.urls[name] = f"http://127.0.0.1:{free_port()}"
        local = self.emulator.emulator.localized_config()
        # No accelerator exporters: the fleet is about the SLO path, and they would double the emulator's load.
        local = local.model_copy(update={
            "sidecar": local.sidecar.model_copy(update={"recording_path": None}),
            "deployments": [d.model_copy(update={"targets": [t for t in d.targets if t.role != "npu"]})
                            for d in local.deployments]})
        self.config = local
        cfg = self.tmp / "config.yaml"
        cfg.write_text(yaml.safe_dump(local.model_dump(mode="json", exclude_none=True), sort_keys=False))
        self.gen = self.tmp / "gen"
        am = self.urls["am"].removeprefix("http://")
        hook = f"http://127.0.0.1:{self.webhook.port}"
        subprocess.run([sys.executable, "-m", "monitor", "generate", "-c", str(cfg), "--out", str(self.gen),
                        "--time-scale", str(TIME_SCALE), "--page-webhook-url", f"{hook}/page",
                        "--ticket-webhook-url", f"{hook}/ticket", "--alertmanager", am],
                       check=True, capture_output=True, cwd=ROOT)
        self.write_scrape_config()
        order = ["vm", "prom", "am", *(f"sidecar-{i}" for i in range(SHARDS)), "vmalert",
                 *(f"vmagent-{i}" for i in range(VMAGENTS))]
        makers = {"vm": self.victoriametrics, "prom": self.prometheus, "am": self.alertmanager,
                  "vmalert": self.vmalert, **{f"sidecar-{i}": (lambda i=i: self.sidecar(i)) for i in range(SHARDS)},
                  **{f"vmagent-{i}": (lambda i=i: self.vmagent(i)) for i in range(VMAGENTS)}}
        for name in order:
            self.procs[name] = makers[name]().start()
        for name in order:
            self.procs[name].wait_ready()
        return self

    def write_scrape_config(self) -> None:
        """The generated prometheus.yml, its sidecar job pointed at the three shards (vmagent ignores its
        rule_files and alerting sections with -promscrape.config.strictParse=false)."""
        doc = yaml.safe_load((self.gen / "alerts" / "prometheus.yml").read_text())
        doc["global"].update({"scrape_interval": f"{SCRAPE_SECONDS}s", "scrape_timeout": f"{SCRAPE_SECONDS}s"})
        for job in doc["scrape_configs"]:
            if job["job_name"] == "slo-monitor":
                job["static_configs"] = [{"targets": [self.urls[f"sidecar-{i}"].removeprefix("http://")
                                                      for i in range(SHARDS)], "labels": {"role": "sidecar"}}]
        (self.tmp / "scrape.yml").write_text(yaml.safe_dump(doc, sort_keys=False))

    def restart(self, name: str, kill: bool = True, down_seconds: float = 0.0) -> tuple[float, float]:
        """Kill (or stop) one process and start it again after `down_seconds`: (stopped, answering again)."""
        proc = self.procs[name]
        proc.stop(kill=kill)
        t_down = time.time()
        time.sleep(down_seconds)
        proc.start().wait_ready()
        return t_down, time.time()

    def close(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        if self.emulator is not None:
            self.emulator.stop()
        if self.webhook is not None:
            self.webhook.stop()

    def keep_logs(self, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        for proc in self.procs.values():
            if proc.log.exists():
                shutil.copy(proc.log, dest / proc.log.name)
