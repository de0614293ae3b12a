"""The emulator in-process: real HTTP listeners, content negotiation, control endpoint, down/up."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from monitor.emulate import Emulator


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def url_of(cfg, role: str) -> str:
    return next(t.url for d in cfg.deployments for t in d.targets if t.role == role)


async def get(session: aiohttp.ClientSession, url: str, **kw):
    async with session.get(url, **kw) as resp:
        return resp.status, resp.headers, await resp.read()


def test_serves_metrics_health_and_info_with_negotiation(config):
    async def main():
        async with Emulator(config, 0, speed=0, seed=1) as emu, aiohttp.ClientSession() as s:
            await emu.advance(600)
            local = emu.localized_config()
            metrics = url_of(local, "server")
            status, headers, body = await get(s, metrics)
            assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
            names = {f.name for f in text_string_to_metric_families(body.decode())}
            assert "sglang:request_time_per_output_token_seconds" in names
            status, headers, body = await get(s, metrics, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
            assert headers["Content-Type"].startswith("application/openmetrics-text")
            assert b"sglang_num_running_reqs{" in body
            base = metrics.removesuffix("/metrics")
            assert (await get(s, base + "/health"))[0] == 200
            status, _, body = await get(s, base + "/get_server_info")
            assert status == 200 and b'"tp_size": 8' in body
            assert (await get(s, base + "/get_model_info"))[0] == 200
            status, _, body = await get(s, url_of(local, "npu"))
            assert status == 200 and b"npu_chip_info_temperature{" in body

    run(main())


def test_control_endpoint_injects_down_and_metrics_disabled(config):
    async def main():
        async with Emulator(config, 0, speed=0, seed=1) as emu, aiohttp.ClientSession() as s:
            local = emu.localized_config()
            decode = next(t.url for t in local.deployment("pd").targets if t.role == "decode")
            ctl = emu.control_url
            async with s.post(ctl + "/control/incident", json={"deployment": "pd", "kind": "down", "role": "decode",
                                                               "duration_seconds": 30}) as r:
                assert r.status == 201
            async with s.post(ctl + "/control/advance", json={"seconds": 1}) as r:
                state = await r.json()
            assert state["deployments"]["pd"]["incidents"][0]["active"]
            try:
                async with aiohttp.ClientSession() as fresh:
                    await get(fresh, decode, timeout=aiohttp.ClientTimeout(total=3))
                raise AssertionError("a down server must not answer")
            except aiohttp.ClientError:
                pass
            async with s.post(ctl + "/control/advance", json={"seconds": 60}) as r:
                assert r.status == 200
            async with aiohttp.ClientSession() as fresh:
                assert (await get(fresh, decode))[0] == 200
            async with s.post(ctl + "/control/incident", json={"deployment": "pd", "kind": "metrics_disabled"}) as r:
                assert r.status == 201
            assert (await get(s, decode))[0] == 404
            async with s.post(ctl + "/control/clear") as r:
                assert r.status == 200
            assert (await get(s, decode))[0] == 200
            async with s.post(ctl + "/control/incident", json={"deployment": "nope", "kind": "down"}) as r:
                assert r.status == 404
            async with s.post(ctl + "/control/incident", json={"deployment": "pd", "kind": "melt"}) as r:
                assert r.status == 400

    run(main())


def test_restart_over_http_makes_counters_drop(config):
    async def main():
        async with Emulator(config, 0, speed=0, seed=2, incidents=["mixed:tpot_regression:1.5@+60"]) as emu, \
                aiohttp.ClientSession() as s:
            await emu.advance(900)
            url = url_of(emu.localized_config(), "server")

            async def requests_total() -> float:
                body = (await get(s, url))[2].decode()
                # A fresh process has no child (so no family) until a request finished: counts as 0.
                fams = [f for f in text_string_to_metric_families(body) if f.name == "sglang:num_requests"]
                return sum(x.value for f in fams for x in f.samples)

            before = await requests_total()
            assert before > 0
            async with s.post(emu.control_url + "/control/incident", json={"deployment": "mixed", "kind": "restart"}) as r:
                assert r.status == 201
            await emu.advance(1)
            assert await requests_total() < before

    run(main())


def test_real_time_clock_advances_with_speed(config):
    async def main():
        async with Emulator(config, 0, speed=200, seed=3, tick_seconds=0.05) as emu:
            await asyncio.sleep(0.5)
            assert emu.deployments["mixed"].now > 20

    run(main())
