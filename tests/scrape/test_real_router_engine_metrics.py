"""The real gateways' `/engine_metrics` and listener, scraped by the sidecar, in front of emulated workers.

sglang-router 0.3.2 renames names to `sglang_` and answers HTTP 500 when workers' label sets differ (a status
that says what to do); smg 1.13 keeps `sglang:` names and pads the missing label. Either way each worker's
requests count once: the merge gives the same counts as scraping the workers directly."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp

from monitor.config import parse_config
from monitor.conventions.names import GATEWAY_SGLANG_ROUTER, GATEWAY_SMG
from monitor.conventions.slis import SLI_FAMILIES
from monitor.emulate import Emulator
from monitor.emulate.router import launch_router
from monitor.observations import Observations
from monitor.scrape.loop import Scraper
from tests.emulate.conftest import make_config


def get(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def scrape_via_router(name: str, tmp_path: Path, gateway: str = GATEWAY_SGLANG_ROUTER):
    """Start the emulator and a real gateway in front of deployment `name`; scrape it once with the sidecar's
    scraper: deployment `name` through the gateway (listener + /engine_metrics), `direct` the same workers."""
    async with Emulator(make_config(), 0, speed=0) as emu:
        await emu.advance(120)  # some finished requests, so the request histograms have counts
        layout = emu.layout.deployment(name)
        router = await asyncio.to_thread(launch_router, layout, log_path=tmp_path / "router.log", gateway=gateway)
        try:
            url = router.url + "/engine_metrics"
            code, body = await asyncio.to_thread(get, url)
            cfg = parse_config({"deployments": [
                {"name": name, "tpot_target_seconds": 0.1, "ttft_target_seconds": 2, "targets": [
                    {"role": "decode" if name == "pd" else "server", "source": "router-engine-metrics", "url": url},
                    {"role": "router", "url": router.metrics_url, "gateway": gateway}]},
                {"name": "direct", "tpot_target_seconds": 0.1, "ttft_target_seconds": 2, "targets": [
                    {"role": s.role, "url": s.url + "/metrics"} for s in layout.servers]},
            ]})
            scraper = Scraper(cfg, Observations(cfg))
            async with aiohttp.ClientSession() as session:
                await scraper.cycle(session)
        finally:
            await asyncio.to_thread(router.stop)
    merged = next(st for st in scraper.sink.statuses.values() if st.source == "router-engine-metrics")
    return code, body, merged, scraper


def counted_once(scraper: Scraper, name: str) -> None:
    """The merge gives the SLO engine exactly what scraping each worker directly gives it."""
    # Raw cumulative values as scraped (the windows count from the first sight, so one cycle adds 0). Only the
    # workers' families: `name` also has the gateway's own counters, which count the test's own requests to it.
    def raw(engine) -> tuple[dict, dict]:
        counters: dict = {}
        for key, acc in engine.book.scalars.items():
            if key[1].startswith("sglang:"):
                counters[key[1]] = counters.get(key[1], 0.0) + (acc.last_raw or 0.0)
        hists: dict = {}
        for key, acc in engine.book.hists.items():
            hists[key[1]] = hists.get(key[1], 0.0) + (acc.last_raw.total if acc.last_raw else 0.0)
        return counters, hists

    via, direct = raw(scraper.sink.engines[name]), raw(scraper.sink.engines["direct"])
    assert via == direct and via[0]["sglang:num_requests_total"] > 0


def test_mixed_workers_merge_into_sglang_underscore_names_that_the_sidecar_reads(tmp_path):
    code, body, status, scraper = asyncio.run(asyncio.wait_for(scrape_via_router("mixed", tmp_path), 120))
    counted_once(scraper, "mixed")
    assert code == 200
    tpot = SLI_FAMILIES["tpot"].replace("sglang:", "sglang_")
    assert f"{tpot}_bucket{{" in body and 'worker_addr="http://127.0.0.1:' in body
    assert "\nsglang:" not in body  # every sample line was renamed
    assert status.up and status.samples > 0 and not status.last_error
    # The renamed TPOT histogram fed the SLO engine (its history before this first scrape is not counted).
    engine = scraper.sink.engines["mixed"]
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


def test_smg_1_13_mixed_merge_keeps_colon_names_and_counts_each_request_once(tmp_path):
    code, body, status, scraper = asyncio.run(asyncio.wait_for(
        scrape_via_router("mixed", tmp_path, GATEWAY_SMG), 120))
    assert code == 200 and f"\n{SLI_FAMILIES['tpot']}_bucket{{" in body and 'worker_addr="http://127.0.0.1:' in body
    assert "\nsglang_" not in body  # nothing renamed
    assert status.up and status.last_error is None and status.detail["workers"] == 1
    counted_once(scraper, "mixed")


def test_smg_1_13_pd_pads_the_label_decode_alone_has_and_counts_each_request_once(tmp_path):
    code, body, status, scraper = asyncio.run(asyncio.wait_for(scrape_via_router("pd", tmp_path, GATEWAY_SMG), 120))
    # The same PD pair (dp_rank on decode only) that makes 0.3.2 answer 500: smg 1.13 answers 200.
    assert code == 200
    running = [line for line in body.splitlines() if line.startswith("sglang:num_running_reqs{")]
    assert any('engine_type="decode"' in line and 'dp_rank="0"' in line for line in running)
    assert any('engine_type="prefill"' in line and 'dp_rank=""' in line for line in running)  # padded
    assert status.up and status.detail == {"workers": 2.0, "workers_scraped_directly": 0.0}
    counted_once(scraper, "pd")  # the prefill server's request counters are not read as decode's
    router = next(st for st in scraper.sink.statuses.values() if st.role == "router")
    assert router.up and router.detail["workers"] == 2 and router.detail["workers_healthy"] == 2


def test_the_sidecar_serves_what_it_scraped_from_the_real_smg_1_13(tmp_path):
    """`slo-monitor run`'s Sidecar in front of the real smg 1.13 (PD): /api/v1/status and /metrics show the
    gateway's worker health and the merged workers."""
    from monitor.sidecar import Sidecar

    async def main():
        async with Emulator(make_config(), 0, speed=0) as emu:
            await emu.advance(60)
            router = await asyncio.to_thread(launch_router, emu.layout.deployment("pd"),
                                             log_path=tmp_path / "router.log", gateway=GATEWAY_SMG)
            sidecar = Sidecar(parse_config({"deployments": [{"name": "pd", "tpot_target_seconds": 0.1, "targets": [
                {"role": "router", "url": router.metrics_url},
                {"role": "decode", "source": "router-engine-metrics", "url": router.url + "/engine_metrics"}]}]}))
            try:
                await sidecar.run(once=True)
                port = await sidecar.start_http("127.0.0.1", 0)
                _, status = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/api/v1/status")
                _, metrics = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/metrics")
            finally:
                await sidecar.close()
                await asyncio.to_thread(router.stop)
        return json.loads(status), metrics

    status, metrics = asyncio.run(asyncio.wait_for(main(), 120))
    targets = {t["source"]: t for t in status["deployments"][0]["targets"]}
    assert targets["router"]["up"] and targets["router"]["detail"]["workers_healthy"] == 2
    assert targets["router-engine-metrics"]["up"] and targets["router-engine-metrics"]["detail"]["workers"] == 2
    up = [line for line in metrics.splitlines() if line.startswith("slo_monitor_target_up{")]
    assert len(up) == 2 and all(line.endswith(" 1.0") for line in up)
