"""Capture what the real gateways count when the service fails or sheds load (tests/fixtures/gateway/).

    .venv/bin/python -m tools.gateway_capture.availability [--out tests/fixtures/gateway] [--gateway NAME ...]

Complements `capture.py` (worker answers and broken streams) with the failures that decide the availability
SLI's expressions (docs/gateways.md, "The availability SLI"):
  workers-down  regular (both workers) and PD (the decode worker): the worker processes stop, so the gateway's
                connections are refused; two requests right away, one after the gateway's health checks have
                listed the workers unhealthy, then the gateway's own probe endpoints (/health, /health_generate,
                /liveness, /readiness, /engine_metrics), which answer 5xx while no worker is healthy
  admission     regular, launched with `--max-concurrent-requests 1 --queue-size 1 --queue-timeout-secs 1`:
                five slow requests at once, so one runs, one waits in the admission queue until it times out
                and three find the queue full
It writes, next to capture.py's files:
  <gateway>_<version>_<mode>_workers_down_metrics.txt   the listener after the workers-down probes
  <gateway>_<version>_regular_admission_metrics.txt     the listener after the admission probe
  availability.json   per gateway, mode and probe: what each client saw and every listener sample that changed
Nothing here runs at test time; the tests read only what it wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from monitor.conventions.names import GATEWAYS
from monitor.emulate.router import RouterProcess, find_gateway, gateway_argv
from tests.conftest import free_port
from tools.gateway_capture.capture import (
    FILE_PREFIX,
    MODEL,
    ROOT,
    SETTLE,
    Client,
    changes,
    generate,
    merged_into,
    samples,
    scrape,
    shutdown,
    worker_metrics,
)
from tools.gateway_capture.worker import CaptureWorker

PROBE_PATHS = ("/health", "/health_generate", "/liveness", "/readiness", "/engine_metrics")
ADMISSION_FLAGS = ["--max-concurrent-requests", "1", "--queue-size", "1", "--queue-timeout-secs", "1"]


def _round(seen: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in seen.items() if k != "sent"}


async def _get(session: aiohttp.ClientSession, base: str, path: str) -> dict[str, Any]:
    t0 = time.time()
    try:
        async with session.get(base + path) as resp:
            body = await resp.text()
            return {"path": path, "method": "GET", "status": resp.status, "end": round(time.time() - t0, 4),
                    "body": body[:200]}
    except aiohttp.ClientError as err:
        return {"path": path, "method": "GET", "error": f"{type(err).__name__}: {err}"}


class Run:
    """One gateway in front of capture workers; each probe scrapes the listener before and after."""

    def __init__(self, session: aiohttp.ClientSession, router: RouterProcess) -> None:
        self.session = session
        self.router = router
        self.probes: list[dict[str, Any]] = []

    async def probe(self, name: str, what: str, requests: list[Any]) -> None:
        """`requests`: coroutines sent at once; each returns what its client saw."""
        _, text = await scrape(self.session, self.router.metrics_url)
        before = samples(text)
        seen = await asyncio.gather(*requests)
        await asyncio.sleep(SETTLE)
        _, text = await scrape(self.session, self.router.metrics_url)
        self.probes.append({"name": name, "what": what, "clients": [_round(s) for s in seen],
                            "changes": changes(before, samples(text))})
        print(f"  {name}: {[s.get('status', s.get('error')) for s in seen]}", file=sys.stderr)

    def post(self, prompt: str, stream: bool = False) -> Any:
        return Client(self.session, self.router.url).send("/generate", generate(prompt, stream))


async def _start(gateway_name: str, roles: list[str], logs: Path, tag: str,
                 extra: list[str] | None = None) -> tuple[RouterProcess, list[CaptureWorker], list[str]]:
    gateway = find_gateway(gateway_name)
    workers = [await CaptureWorker(role, MODEL, worker_metrics(role), dp_size=1).start() for role in roles]
    port, metrics_port = free_port(), free_port()
    if roles[0] == "server":
        argv = gateway_argv(gateway, worker_urls=[w.url for w in workers], port=port, metrics_port=metrics_port,
                            log_level="info", extra=extra)
    else:  # no bootstrap port: what the workers-down probes test does not involve the KV handoff
        argv = gateway_argv(gateway, prefill=[(workers[0].url, None)], decode=[workers[1].url], port=port,
                            metrics_port=metrics_port, log_level="info", extra=extra)
    router = RouterProcess(argv, port, metrics_port, logs / f"{FILE_PREFIX[gateway_name]}_{tag}.log",
                           expected_workers=len(workers), gateway=gateway)
    try:
        await asyncio.to_thread(router.start, 60)
    except BaseException:
        await shutdown(router, workers)
        raise
    return router, workers, [Path(argv[0]).name, *argv[1:]]


async def wait_unhealthy(session: aiohttp.ClientSession, router: RouterProcess, urls: list[str],
                         timeout: float = 60.0) -> float | None:
    start = time.time()
    while time.time() - start < timeout:
        async with session.get(router.url + "/workers") as resp:
            listed = (await resp.json()).get("workers", [])
        if all(any(w.get("url") == u and not w.get("is_healthy", True) for w in listed) for u in urls):
            return round(time.time() - start, 1)
        await asyncio.sleep(0.5)
    return None


async def workers_down(gateway_name: str, mode: str, out: Path, logs: Path) -> dict[str, Any]:
    roles = ["server", "server"] if mode == "regular" else ["prefill", "decode"]
    router, workers, argv = await _start(gateway_name, roles, logs, f"{mode}_workers_down")
    stopped = workers if mode == "regular" else workers[1:]
    result: dict[str, Any] = {"gateway": gateway_name, "version": router.gateway.version if router.gateway else "",
                              "mode": mode, "scenario": "workers-down", "argv": argv,
                              "stopped": [w.role for w in stopped]}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            run = Run(session, router)
            await asyncio.sleep(2.0)
            await run.probe("ok", "a plain request while every worker is up", [run.post("[id=ok] hello")])
            for w in stopped:
                await w.stop()
            await run.probe("refused", f"the {' and '.join(w.role for w in stopped)} worker process(es) stopped: "
                            "connections refused", [run.post("[id=refused] hello")])
            await run.probe("refused-stream", "the same, streamed", [run.post("[id=refused-stream] hello", True)])
            result["seconds_until_listed_unhealthy"] = await wait_unhealthy(session, router, [w.url for w in stopped])
            await run.probe("unhealthy", "after the gateway's health checks listed the stopped workers unhealthy",
                            [run.post("[id=unhealthy] hello")])
            for path in PROBE_PATHS:
                await run.probe(f"get{path.replace('/', '-')}", f"GET {path} while workers are down",
                                [_get(session, router.url, path)])
            _, metrics = await scrape(session, router.metrics_url)
        (out / f"{FILE_PREFIX[gateway_name]}_{mode}_workers_down_metrics.txt").write_text(metrics)
        result["probes"] = run.probes
    finally:
        await shutdown(router, workers)
    return result


async def admission(gateway_name: str, out: Path, logs: Path) -> dict[str, Any]:
    router, workers, argv = await _start(gateway_name, ["server", "server"], logs, "admission", ADMISSION_FLAGS)
    result: dict[str, Any] = {"gateway": gateway_name, "version": router.gateway.version if router.gateway else "",
                              "mode": "regular", "scenario": "admission", "argv": argv}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            run = Run(session, router)
            await asyncio.sleep(2.0)
            await run.probe("admission", "five requests at once whose answers take 2 s, through a gateway that "
                            "admits one at a time and queues one for at most 1 s",
                            [run.post(f"[id=admission-{i}][head=2.0] hello") for i in range(5)])
            _, metrics = await scrape(session, router.metrics_url)
        (out / f"{FILE_PREFIX[gateway_name]}_regular_admission_metrics.txt").write_text(metrics)
        result["probes"] = run.probes
    finally:
        await shutdown(router, workers)
    return result


async def main_async(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="gateway-availability-"))
    runs = {}
    for gateway in args.gateway or GATEWAYS:
        print(f"capturing {gateway} (router logs in {logs})", file=sys.stderr)
        for mode in ("regular", "pd"):
            runs[f"{gateway} {mode} workers-down"] = await workers_down(gateway, mode, out, logs)
        runs[f"{gateway} regular admission"] = await admission(gateway, out, logs)
    merged_into(out / "availability.json", runs)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "gateway"))
    p.add_argument("--gateway", action="append", choices=GATEWAYS)
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
