"""The real sglang-router 0.3.2's `/engine_metrics`, scraped by the sidecar: renamed names are understood, and the
HTTP 500 it answers when workers' label sets differ becomes a status that says what to do."""

from __future__ import annotations

import asyncio
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from monitor.config import parse_config
from monitor.conventions import SLI_FAMILIES
from monitor.emulate import Emulator
from monitor.emulate.router import launch_router
from monitor.scrape.loop import Scraper
from tests.emulate.conftest import make_config

pytestmark = pytest.mark.skipif(
    not (shutil.which("smg", path=str(Path(sys.executable).parent)) or shutil.which("smg")),
    reason="sglang-router (smg) not installed",
)


def get(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def scrape_via_router(name: str, tmp_path: Path):
    """Start the emulator and a real router in front of deployment `name`; scrape /engine_metrics once."""
    async with Emulator(make_config(), 0, speed=0) as emu:
        await emu.advance(120)  # some finished requests, so the request histograms have counts
        router = await asyncio.to_thread(launch_router, emu.layout.deployment(name), log_path=tmp_path / "router.log")
        try:
            url = router.url + "/engine_metrics"
            code, body = await asyncio.to_thread(get, url)
            cfg = parse_config({"deployments": [{"name": name, "tpot_target_seconds": 0.1, "targets": [
                {"role": "decode" if name == "pd" else "server", "source": "router-engine-metrics", "url": url}]}]})
            scraper = Scraper(cfg)
            async with aiohttp.ClientSession() as session:
                await scraper.cycle(session)
        finally:
            await asyncio.to_thread(router.stop)
    return code, body, next(iter(scraper.statuses.values())), scraper


def test_mixed_workers_merge_into_sglang_underscore_names_that_the_sidecar_reads(tmp_path):
    code, body, status, scraper = asyncio.run(asyncio.wait_for(scrape_via_router("mixed", tmp_path), 120))
    assert code == 200
    tpot = SLI_FAMILIES["tpot"].replace("sglang:", "sglang_")
    assert f"{tpot}_bucket{{" in body and 'worker_addr="http://127.0.0.1:' in body
    assert "\nsglang:" not in body  # every sample line was renamed
    assert status.up and status.samples > 0 and not status.last_error
    # The renamed TPOT histogram fed the SLO engine (its history before this first scrape is not counted).
    engine = scraper.engines["mixed"]
    tpot_raw = [acc.last_raw for key, acc in engine.book.hists.items() if key[1] == SLI_FAMILIES["tpot"]]
    assert tpot_raw and sum(h.count for h in tpot_raw if h) > 0 and "tpot" in engine.store.latest().hists


def test_pd_with_dp_rank_only_on_decode_gets_http_500_and_a_status_naming_the_fix(tmp_path):
    code, body, status, _ = asyncio.run(asyncio.wait_for(scrape_via_router("pd", tmp_path), 120))
    # The emulated decode server runs DP attention (dp_rank on its scheduler series), prefill does not:
    # exactly smg-project/smg#805, answered by the real router.
    assert code == 500 and "Label names should agree" in body
    assert not status.up
    assert "HTTP 500" in status.last_error and "Label names should agree" in status.last_error
    assert "scrape the workers directly" in status.last_error
