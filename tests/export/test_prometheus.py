"""The sidecar's /metrics: promtool-clean, no NaN, labels as documented; endpoints and auth."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import aiohttp
import pytest
from aiohttp import web

from monitor.config import parse_config
from monitor.sidecar import Sidecar
from tests.conftest import serve_routes
from tests.slo.helpers import exposition


async def _sidecar_with_traffic(token=None):
    texts = [exposition(tpot=[0.03] * 5), exposition(tpot=[0.03] * 50 + [0.2] * 5, running=2)]

    state = {"n": 0}

    async def handler(request):
        return web.Response(text=texts[state["n"]])

    runner, base = await serve_routes({"/metrics": handler})
    cfg = parse_config({
        "sidecar": {"api_bearer_token": token},
        "deployments": [
            {"name": "busy", "tpot_target_seconds": 0.04, "ttft_target_seconds": 1.0,
             "targets": [{"role": "server", "url": f"{base}/metrics"}]},
            {"name": "idle", "tpot_target_seconds": 0.05, "targets": []},
        ],
    })
    sc = Sidecar(cfg)
    await sc.run(once=True)
    state["n"] = 1
    await sc.run(once=True)
    sport = await sc.start_http("127.0.0.1", 0)
    return sc, runner, f"http://127.0.0.1:{sport}"


def test_metrics_endpoint_is_promtool_clean_and_has_no_nan():
    async def go():
        sc, runner, base = await _sidecar_with_traffic()
        try:
            async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
                return await r.text()
        finally:
            await sc.close()
            await runner.cleanup()

    text = asyncio.run(go())
    assert "NaN" not in text
    burn = next(line for line in text.splitlines()
                if line.startswith('slo_monitor_sli_burn_rate{deployment="busy",sli="tpot",window="5m"}'))
    assert abs(float(burn.rsplit(" ", 1)[1]) - 10.0) < 1e-9  # 10 % bad against a 1 % budget
    assert 'slo_monitor_latency_seconds{deployment="busy",quantile="0.99",sli="tpot",window="5m"}' in text
    assert 'slo_monitor_target_up{deployment="busy",role="server"' in text
    assert 'slo_monitor_deployment_load{deployment="busy",metric="num_running_reqs",role="all"} 2.0' in text
    if shutil.which("promtool"):
        res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr


def test_status_api_and_bearer_token():
    async def go():
        sc, runner, base = await _sidecar_with_traffic(token="s3cr3t-t0k3n")
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(base + "/api/v1/status") as r:
                    denied = r.status
                async with s.get(base + "/api/v1/status", headers={"Authorization": "Bearer s3cr3t-t0k3n"}) as r:
                    body = await r.json()
                async with s.get(base + "/healthz") as r:
                    health = r.status
                async with s.get(base + "/metrics") as r:
                    metrics = r.status
            return denied, body, health, metrics
        finally:
            await sc.close()
            await runner.cleanup()

    denied, body, health, metrics = asyncio.run(go())
    assert (denied, health, metrics) == (401, 200, 200)
    busy = next(d for d in body["deployments"] if d["name"] == "busy")
    tpot = next(s for s in busy["slis"] if s["sli"] == "tpot")
    assert tpot["breaching"] and tpot["windows"][0]["events"] == 50
    assert "s3cr3t-t0k3n" not in json.dumps(body)


@pytest.mark.parametrize("bind", ["127.0.0.1"])
def test_default_bind_is_loopback(bind):
    assert parse_config({}).sidecar.listen_host == bind


def test_credentials_in_target_urls_are_redacted():
    from monitor.state import redact

    assert redact("http://user:s3cret@10.0.0.1:8000/metrics") == "http://***@10.0.0.1:8000/metrics"
    assert redact("connection failed to http://a:b@h/x") == "connection failed to http://***@h/x"
