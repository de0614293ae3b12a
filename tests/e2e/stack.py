"""The real paging stack for end-to-end tests, all on 127.0.0.1, all stopped on teardown.

emulated SGLang (mixed + PD pair, writing request logs) -> real smg 1.13 in front of the PD pair, real
  sglang-router 0.3.2 in front of the mixed server
+ gw-c: real smg 1.13 in front of two capture workers (SGLang's wire formats, behaviour per request), with an
  availability SLO, driven by a client in the test (requests that succeed, fail with the workers' 500s, or
  leave mid-stream)
  -> sidecar (`slo-monitor run`) and real Prometheus 2.42 with generated config + rules (time-scaled)
  -> real Alertmanager with the generated routing -> a webhook receiver in the test.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from monitor.config import Config, parse_config
from monitor.conventions.names import GATEWAY_SGLANG_ROUTER, GATEWAY_SMG
from monitor.emulate import Emulator, find_free_base_port, plan
from monitor.emulate.router import RouterProcess, find_gateway, gateway_argv, launch_router
from tests.components import ALERTMANAGER_DEBIAN, PROMETHEUS_242, Build
from tests.conftest import free_port
from tests.procs import answers, stop, wait_until  # noqa: F401 - wait_until re-exported for the e2e tests
from tools.gateway_capture.capture import MODEL, Client, generate, worker_metrics
from tools.gateway_capture.worker import CaptureWorker

GATEWAYS = {"pd-b": GATEWAY_SMG, "mixed-a": GATEWAY_SGLANG_ROUTER}  # the real gateway in front of each
AVAILABILITY = "gw-c"  # smg 1.13 in front of capture workers, with an availability SLO
AVAILABILITY_OBJECTIVE = 0.99
TIME_SCALE = 60  # 1h window -> 60 s, 5m -> 5 s, `for: 2m` -> 2 s (see monitor/generate/options.py)

BASE_CONFIG = {
    "sidecar": {"scrape_interval_seconds": 1, "scrape_timeout_seconds": 1},
    "deployments": [
        {"name": "mixed-a", "model": "Kimi-K2.6", "hardware": "Atlas 800I A3", "cards": 8, "mode": "pd-mixed",
         "tpot_target_seconds": 0.04, "ttft_target_seconds": 2.0, "input_tokens": 512, "output_tokens": 48,
         "prefix_cache_hit": 0.5,
         "targets": [{"role": "server", "url": "http://127.0.0.1:1/metrics"},
                     {"role": "router", "url": "http://127.0.0.1:4/metrics", "gateway": GATEWAYS["mixed-a"]}]},
        {"name": "pd-b", "model": "Kimi-K2.6", "hardware": "Atlas 800I A3", "cards": 16,
         "mode": "pd-disaggregated", "tpot_target_seconds": 0.04, "ttft_target_seconds": 2.0,
         "input_tokens": 512, "output_tokens": 48,
         "targets": [{"role": "prefill", "url": "http://127.0.0.1:1/metrics"},
                     {"role": "decode", "url": "http://127.0.0.1:2/metrics"},
                     {"role": "router", "url": "http://127.0.0.1:3/metrics", "gateway": GATEWAYS["pd-b"]}]},
    ],
}
GOODPUT_OBJECTIVE = {"pd-b": 0.95}  # pd-b also has a goodput SLO, from its decode server's request log
RATES: dict[str, float] = {}  # the emulator's nominal rates: ~40 % of the binding resource busy


class Webhook:
    """Alertmanager webhook receiver: keeps every notification with its arrival time."""

    def __init__(self) -> None:
        self.messages: list[tuple[float, str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with hook.lock:
                    hook.messages.append((time.time(), self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def alerts(self, since: float = 0.0) -> list[tuple[float, str, str, dict[str, Any]]]:
        """(received, receiver path, status, alert) for every alert in every notification."""
        with self.lock:
            msgs = list(self.messages)
        return [(t, path, a["status"], a) for t, path, m in msgs if t >= since for a in m["alerts"]]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class EmulatorThread:
    """The emulator on its own event loop, so the test thread stays synchronous."""

    def __init__(self, config: Config, base_port: int, request_log_dir: Path | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.emulator = Emulator(config, base_port, speed=1.0, seed=11, rates=RATES, request_log_dir=request_log_dir)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.emulator.start(), self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.emulator.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class GatewayTraffic:
    """gw-c: two capture workers and the client that sends requests through the gateway in front of them, on
    their own event loop. The client keeps a steady stream of short requests going; `failing` makes every
    third one a request all workers answer 500 to (the gateway retries, then answers 500; successes in between
    keep the workers' circuit breakers closed); `leave` sends streams whose client closes after the first chunk
    (smg 1.13: 499 client_closed_request)."""

    RATE = 8.0  # requests per second

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.workers: list[CaptureWorker] = self._run(self._start_workers())
        self.failing = False
        self.leave = False
        self.sent: dict[str, int] = {"ok": 0, "fail": 0, "leave": 0}
        self._task: Any = None

    def _run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start_workers(self) -> list[CaptureWorker]:
        return [await CaptureWorker("server", MODEL, worker_metrics("server")).start() for _ in range(2)]

    def start(self, base_url: str) -> None:
        self._task = asyncio.run_coroutine_threadsafe(self._drive(base_url), self.loop)

    async def _one(self, client: Client, kind: str, i: int) -> None:
        if kind == "fail":
            await client.send("/generate", generate(f"[id=fail-{i}][status=500] x"))
        elif kind == "leave":
            await client.send("/generate", generate(f"[id=leave-{i}][itl=0.2][tokens=20] x", True), read_chunks=1)
        else:
            await client.send("/generate", generate(f"[id=ok-{i}][itl=0][tokens=2] x", i % 2 == 1, tokens=2))
        self.sent[kind] += 1

    async def _drive(self, base_url: str) -> None:
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            client = Client(session, base_url)
            pending: set[asyncio.Task[None]] = set()
            i = 0
            while True:
                kind = "leave" if self.leave else "fail" if self.failing and i % 3 == 0 else "ok"
                task = asyncio.create_task(self._one(client, kind, i))
                pending.add(task)
                task.add_done_callback(pending.discard)
                i += 1
                await asyncio.sleep(1.0 / self.RATE)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for w in self.workers:
            self._run(w.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def http_json(url: str, data: dict[str, Any] | None = None, timeout: float = 5.0) -> Any:
    req = urllib.request.Request(url, data=json.dumps(data).encode() if data is not None else None,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    return json.loads(body) if body else None


@dataclass
class Stack:
    tmp: Path
    config: Config
    control_url: str
    sidecar_url: str
    prometheus_url: str
    alertmanager_url: str
    webhook: Webhook
    routers: dict[str, RouterProcess]  # deployment -> the real gateway in front of it
    emulator: EmulatorThread
    traffic: GatewayTraffic | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?query={urllib.parse.quote(expr)}"
        return http_json(url)["data"]["result"]

    def incident(self, deployment: str, kind: str, **extra: Any) -> float:
        t = time.time()
        http_json(f"{self.control_url}/control/incident", {"deployment": deployment, "kind": kind, **extra})
        return t

    def clear(self) -> float:
        t = time.time()
        http_json(f"{self.control_url}/control/clear", {})
        return t

    def status(self) -> dict[str, Any]:
        return http_json(f"{self.sidecar_url}/api/v1/status")

    def close(self) -> None:
        for name, proc in reversed(list(self.procs.items())):
            stop(proc)
            log = self.tmp / f"{name}.log"
            if log.exists():
                (self.tmp / f"{name}.log.kept").write_bytes(log.read_bytes()[-20000:])
        if self.traffic is not None:
            self.traffic.stop()
        for router in self.routers.values():
            router.stop()
        self.emulator.stop()
        self.webhook.stop()


def _spawn(stack: Stack, name: str, argv: list[str]) -> None:
    log = open(stack.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    stack.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=stack.tmp)


def start_stack(tmp: Path, prometheus: Build = PROMETHEUS_242, alertmanager: Build = ALERTMANAGER_DEBIAN) -> Stack:
    """The whole paging path on one Prometheus build and one Alertmanager build (tests/components.py)."""
    for build in (prometheus, alertmanager):
        if not Path(build.server).exists():
            raise RuntimeError(f"{build.server} is missing ({build.install})")
    gateways = {name: find_gateway(name) for name in {*GATEWAYS.values(), GATEWAY_SMG}}  # says what is missing
    base_cfg = parse_config(BASE_CONFIG)
    base_port = find_free_base_port(plan(base_cfg, 0).port_count)
    emulator = EmulatorThread(base_cfg, base_port, tmp / "request-logs")
    webhook = Webhook()
    stack = Stack(tmp, base_cfg, emulator.emulator.control_url, "", "", "", webhook, {}, emulator)
    try:
        local = emulator.emulator.localized_config()  # + request-log targets for mixed and decode servers
        local = local.model_copy(update={"deployments": [
            d.model_copy(update={"goodput_objective": GOODPUT_OBJECTIVE.get(d.name)}) for d in local.deployments]})
        for name, gw in GATEWAYS.items():
            stack.routers[name] = launch_router(emulator.emulator.layout.deployment(name),
                                                log_path=tmp / f"router-{name}.log", gateway=gateways[gw])
        stack.traffic = GatewayTraffic()
        port, metrics_port = free_port(), free_port()
        gw_c = RouterProcess(gateway_argv(gateways[GATEWAY_SMG], worker_urls=[w.url for w in stack.traffic.workers],
                                          port=port, metrics_port=metrics_port),
                             port, metrics_port, tmp / f"router-{AVAILABILITY}.log", expected_workers=2,
                             gateway=gateways[GATEWAY_SMG])
        stack.routers[AVAILABILITY] = gw_c.start()
        local = local.model_copy(update={"deployments": [*local.deployments, *parse_config({"deployments": [{
            "name": AVAILABILITY, "model": "Llama-3.1-8B", "availability_objective": AVAILABILITY_OBJECTIVE,
            "targets": [{"role": "router", "url": gw_c.metrics_url, "gateway": GATEWAY_SMG}]}]}).deployments]})
        stack.traffic.start(gw_c.url)
        side_port, prom_port, am_port = free_port(), free_port(), free_port()
        local = local.model_copy(update={"sidecar": local.sidecar.model_copy(update={
            "listen_port": side_port, "recording_path": str(tmp / "recording.sqlite")})})
        stack.config = local
        cfg_path = tmp / "config.yaml"
        cfg_path.write_text(yaml.safe_dump(local.model_dump(mode="json", exclude_none=True), sort_keys=False))
        gen = tmp / "gen"
        subprocess.run([sys.executable, "-m", "monitor", "generate", "-c", str(cfg_path), "--out", str(gen),
                        "--time-scale", str(TIME_SCALE),
                        "--page-webhook-url", f"http://127.0.0.1:{webhook.port}/page",
                        "--ticket-webhook-url", f"http://127.0.0.1:{webhook.port}/ticket",
                        "--alertmanager", f"127.0.0.1:{am_port}"], check=True, capture_output=True)
        _spawn(stack, "sidecar", [sys.executable, "-m", "monitor", "run", "-c", str(cfg_path)])
        _spawn(stack, "alertmanager", [
            alertmanager.server, f"--config.file={gen / 'alerts' / 'alertmanager.yml'}",
            f"--storage.path={tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address="])
        _spawn(stack, "prometheus", [
            prometheus.server, f"--config.file={gen / 'alerts' / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'prom-data'}", f"--web.listen-address=127.0.0.1:{prom_port}"])
        stack.sidecar_url = f"http://127.0.0.1:{side_port}"
        stack.prometheus_url = f"http://127.0.0.1:{prom_port}"
        stack.alertmanager_url = f"http://127.0.0.1:{am_port}"
        wait_until(lambda: answers(stack.sidecar_url + "/healthz"), 30, what="sidecar")
        wait_until(lambda: answers(stack.alertmanager_url + "/-/ready"), 30, what="alertmanager")
        wait_until(lambda: answers(stack.prometheus_url + "/-/ready"), 30, what="prometheus")
        return stack
    except BaseException:
        stack.close()
        raise
