"""The real sglang-router 0.3.2 binary uses emulated servers as workers (regular and PD mode)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import urllib.request
from pathlib import Path

import pytest

from monitor.emulate import Emulator
from monitor.emulate.router import launch_router

pytestmark = pytest.mark.skipif(
    not (shutil.which("smg", path=str(Path(sys.executable).parent)) or shutil.which("smg")),
    reason="sglang-router (smg) not installed",
)


def fetch(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as resp:
        return resp.read().decode()


@pytest.mark.parametrize("name, types", [("mixed", {"regular"}), ("pd", {"prefill", "decode"})])
def test_router_lists_emulated_workers_healthy_and_serves_smg_metrics(config, tmp_path, name, types):
    async def main():
        async with Emulator(config, 0, speed=0) as emu:
            layout = emu.layout.deployment(name)
            router = await asyncio.to_thread(launch_router, layout, log_path=tmp_path / "router.log", timeout=60)
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
