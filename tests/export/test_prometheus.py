"""The sidecar's /metrics: promtool-clean, no NaN, labels as documented; endpoints and auth."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from monitor.config import parse_config
from monitor.sidecar import Sidecar
from tests.components import assert_promtool_clean
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
    assert_promtool_clean(text)


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
    from monitor.redaction import redact

    assert redact("http://user:s3cret@10.0.0.1:8000/metrics") == "http://***@10.0.0.1:8000/metrics"
    assert redact("connection failed to http://a:b@h/x") == "connection failed to http://***@h/x"


def test_metrics_labels_and_status_carry_no_password_with_a_raw_at_nor_a_query_token():
    """The issue's case: `user:pa@SSSECRET3@host` was shown as `***@SSSECRET3@host`."""
    from prometheus_client import generate_latest

    from monitor.sidecar import Sidecar

    url = "http://user:pa@SSSECRET3@127.0.0.1:1/metrics?token=TOKSECRET4"
    sc = Sidecar(parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04,
                                                "targets": [{"role": "server", "url": url}]}]}))
    metrics = generate_latest(sc.registry).decode()
    status = sc.status().model_dump_json()
    for text in (metrics, status):
        assert "SSSECRET3" not in text and "TOKSECRET4" not in text
    assert 'target="server@http://***@127.0.0.1:1/metrics?token=***"' in metrics


def test_a_stuck_deployment_loop_fails_healthz_with_the_reason_and_shows_in_metrics_and_status():
    """One deployment's loop cannot complete a cycle (a persistent bug): /healthz says which and since
    when, /metrics carries every loop's last cycle, its age and its restarts, the API the same."""
    async def handler(request):
        return web.Response(text=exposition(tpot=[0.03] * 5))

    async def go():
        runner, base = await serve_routes({"/metrics": handler})
        cfg = parse_config({
            "sidecar": {"scrape_interval_seconds": 0.2, "scrape_timeout_seconds": 0.2},
            "deployments": [{"name": n, "tpot_target_seconds": 0.04,
                             "targets": [{"role": "server", "url": f"{base}/metrics"}]} for n in ("fine", "stuck")],
        })
        sc = Sidecar(cfg)
        real = sc.observations.snapshot

        def snapshot(deployment, ts, elapsed=None):
            if deployment == "stuck":
                raise RuntimeError("a bug in closing the cycle")
            real(deployment, ts)

        sc.observations.snapshot = snapshot
        port = await sc.start_http("127.0.0.1", 0)
        url = f"http://127.0.0.1:{port}"
        task = asyncio.create_task(sc.run())
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(url + "/healthz") as r:
                    early = r.status  # no loop is overdue yet
                await asyncio.sleep(1.5)  # > 3 intervals
                async with s.get(url + "/healthz") as r:
                    health = (r.status, await r.json())
                async with s.get(url + "/metrics") as r:
                    metrics = await r.text()
                async with s.get(url + "/api/v1/status") as r:
                    status = await r.json()
        finally:
            sc.stop()
            await asyncio.wait_for(task, 10)
            await sc.close()
            await runner.cleanup()
        return early, health, metrics, status

    early, (code, body), metrics, status = asyncio.run(go())
    assert early == 200
    assert code == 503 and body["status"] == "unhealthy"
    (problem,) = body["problems"]
    assert "stuck" in problem and "scrape loop" in problem and "no completed cycle" in problem
    assert "a bug in closing the cycle" in problem and "restart" in problem
    lines = metrics.splitlines()
    assert any(line.startswith('slo_monitor_loop_last_cycle_timestamp_seconds{deployment="fine",loop="scrape"}')
               for line in lines)
    assert not any(line.startswith('slo_monitor_loop_last_cycle_timestamp_seconds{deployment="stuck"') for line in lines)
    age = next(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith('slo_monitor_loop_last_cycle_age_seconds{deployment="stuck",loop="scrape"}'))
    assert age > 0.6
    restarts = next(float(line.rsplit(" ", 1)[1]) for line in lines
                    if line.startswith('slo_monitor_loop_restarts_total{deployment="stuck",loop="scrape"}'))
    assert restarts >= 2
    assert 'slo_monitor_loop_restarts_total{deployment="fine",loop="scrape"} 0.0' in lines
    assert any(line.startswith('slo_monitor_loop_last_cycle_timestamp_seconds{deployment="",loop="sidecar"}')
               for line in lines)
    assert "slo_monitor_scrape_interval_seconds 0.2" in lines
    assert_promtool_clean(metrics)
    loops = {(lp["loop"], lp["deployment"]): lp for lp in status["sidecar"]["loops"]}
    assert loops[("scrape", "stuck")]["stale"] and loops[("scrape", "stuck")]["last_cycle_ts"] is None
    assert not loops[("scrape", "fine")]["stale"] and not loops[("sidecar", None)]["stale"]
