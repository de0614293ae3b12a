"""The sidecar's availability SLI through each real gateway: requests that succeed, fail (worker 500s, a
stream broken mid-body) or are abandoned by their client go through smg 1.13 or sglang-router 0.3.2 in front
of two capture workers (tools/gateway_capture/worker.py answers in SGLang's wire formats, with behaviour set
per request); the sidecar scrapes the gateway and shows what happened in /api/v1/status, /metrics and the
status table."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import generate_latest

from monitor.commands.status import render_table
from monitor.config import parse_config
from monitor.conventions.names import GATEWAY_SMG, GATEWAYS
from monitor.emulate.router import RouterProcess, find_gateway, gateway_argv
from monitor.sidecar import Sidecar
from tests.conftest import free_port
from tools.gateway_capture.capture import MODEL, Client, generate, worker_metrics
from tools.gateway_capture.worker import CaptureWorker


async def _traffic(router: RouterProcess) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        client = Client(session, router.url)
        for i in range(8):
            await client.send("/generate", generate(f"[id=ok-{i}] hello", stream=i % 2 == 1))
        # A worker 500 whose retries fail too (a server-side failure the gateway answers as 500) ...
        await client.send("/generate", generate("[id=fail][status=500] x"))
        await client.send("/generate", generate("[id=ok-8] hello"))
        # ... a stream the worker breaks mid-body (smg 1.13 sees it; 0.3.2 counts it 200) ...
        await client.send("/generate", generate("[id=broken][break=2][itl=0.05][tokens=10] x", True))
        # ... and a client that leaves mid-stream: a 499 in smg 1.13, no failure in either.
        await client.send("/generate", generate("[id=gone][itl=0.2][tokens=20] x", True), read_chunks=2)


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_requests_through_the_real_gateway_show_in_the_sidecars_availability(tmp_path: Path, gateway: str):
    async def main():
        workers = [await CaptureWorker("server", MODEL, worker_metrics("server")).start() for _ in range(2)]
        port, metrics_port = free_port(), free_port()
        gw = find_gateway(gateway)
        router = RouterProcess(gateway_argv(gw, worker_urls=[w.url for w in workers], port=port,
                                            metrics_port=metrics_port),
                               port, metrics_port, tmp_path / "router.log", expected_workers=2, gateway=gw)
        cfg = parse_config({"deployments": [{"name": "gw", "availability_objective": 0.99, "targets": [
            {"role": "router", "url": router.metrics_url, "gateway": gateway}]}]})
        sc = Sidecar(cfg)
        try:
            await asyncio.to_thread(router.start, 60)
            await sc.run(once=True)  # what came before the sidecar looked is not counted
            await _traffic(router)
            await asyncio.sleep(1.0)  # smg 1.13 counts a response when its last frame has gone out
            await sc.run(once=True)
            return sc.status(), generate_latest(sc.registry).decode()
        finally:
            await sc.close()
            await asyncio.to_thread(router.stop)
            for w in workers:
                await w.stop()

    status, text = asyncio.run(asyncio.wait_for(main(), 120))
    dep = status.deployments[0]
    router = dep.targets[0]
    assert router.up and not router.warnings, router
    av = dep.availability
    assert av is not None and av.gateway == gateway and av.objective == 0.99
    five = next(w for w in av.windows if w.window == "5m")
    # 12 requests: the 500 failed; smg 1.13 also sees the broken stream.
    failed = 2 if gateway == GATEWAY_SMG else 1
    assert (five.requests, five.failed) == (12, failed)
    assert five.good_ratio == pytest.approx((12 - failed) / 12) and av.breaching
    assert f'slo_monitor_sli_good_ratio{{deployment="gw",sli="availability",window="5m"}} {(12 - failed) / 12}' in text
    assert 'slo_monitor_sli_objective_ratio{deployment="gw",sli="availability"} 0.99' in text
    table = render_table(status, color=False)
    assert "avail 5m" in table and f"{(12 - failed) / 12 * 100:.2f}%" in table and "BREACH" in table
