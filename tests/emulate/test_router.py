"""The real gateways (smg 1.13 and sglang-router 0.3.2) use emulated servers as workers (regular and PD
mode), and the launcher finds each one where the project installs it, or says what is missing."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path

import pytest

from monitor.conventions.names import GATEWAY_SGLANG_ROUTER, GATEWAY_SMG, GATEWAYS
from monitor.emulate import Emulator
from monitor.emulate.router import GatewayNotFound, GatewaySpec, find_gateway, launch_router, router_command


def fetch(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as resp:
        return resp.read().decode()


@pytest.mark.parametrize("gateway", GATEWAYS)
@pytest.mark.parametrize("name, types", [("mixed", {"regular"}), ("pd", {"prefill", "decode"})])
def test_router_lists_emulated_workers_healthy_and_serves_smg_metrics(config, tmp_path, name, types, gateway):
    async def main():
        async with Emulator(config, 0, speed=0) as emu:
            layout = emu.layout.deployment(name)
            router = await asyncio.to_thread(launch_router, layout, log_path=tmp_path / "router.log", timeout=60,
                                             gateway=gateway)
            try:
                workers = json.loads(await asyncio.to_thread(fetch, router.url + "/workers"))["workers"]
                metrics = await asyncio.to_thread(fetch, router.metrics_url)
            finally:
                await asyncio.to_thread(router.stop)
            assert {w["worker_type"] for w in workers} == types
            assert all(w["is_healthy"] for w in workers)
            assert {w["url"] for w in workers} == {s.url for s in layout.servers}
            assert "smg_worker_health{" in metrics and "smg_worker_pool_size{" in metrics

    asyncio.run(asyncio.wait_for(main(), 120))


def test_each_gateway_is_found_in_the_project_venv_with_its_own_version():
    smg, old = find_gateway(GATEWAY_SMG), find_gateway(GATEWAY_SGLANG_ROUTER)
    assert (smg.spec.product, smg.version.split(".")[:2]) == ("smg", ["1", "13"])
    assert (old.spec.product, old.version) == ("sgl-model-gateway", "0.3.2")
    assert smg.binary != old.binary  # both are called `smg`: each lives in its own environment
    # Found through the running interpreter's environment, not PATH (`make demo` has no .venv/bin on PATH).
    assert Path(sys.prefix) in smg.binary.parents and Path(sys.prefix) in old.binary.parents


def test_a_gateway_found_without_path(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert find_gateway(GATEWAY_SMG).version.startswith("1.13.")


def test_a_missing_gateway_says_where_it_looked_what_it_found_and_how_to_install(monkeypatch):
    import monitor.emulate.router as router

    spec = GatewaySpec("smg-9.9", "smg", "9.9.0", "smg-9.9.0", "`pip install smg==9.9.0`")
    monkeypatch.setitem(router.GATEWAY_SPECS, "smg-9.9", spec)
    with pytest.raises(GatewayNotFound) as err:
        find_gateway("smg-9.9")
    msg = str(err.value)
    assert "smg-9.9" in msg and "gateways/smg-9.9.0/bin" in msg and "pip install smg==9.9.0" in msg
    assert "is smg 1.13." in msg or "is sgl-model-gateway 0.3.2" in msg  # the binaries it did find


def test_an_unknown_gateway_name_lists_the_choices(config):
    from monitor.emulate.topology import plan

    with pytest.raises(ValueError, match="smg-1.13, sglang-router-0.3.2"):
        router_command(plan(config, 30000).deployment("mixed"), gateway="nginx")
