"""The sidecar runs a (fake) npu-smi and a DCGM endpoint and exports accelerator_* series."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import generate_latest

from monitor.config import Config, parse_config
from monitor.sidecar import Sidecar
from monitor.status_model import StatusResponse
from monitor.telemetry.fake_npu_smi import write_fake_npu_smi
from tests.components import assert_promtool_clean
from tests.conftest import REAL_FIXTURES, serve_routes

A3 = REAL_FIXTURES.parent / "npu-smi" / "910_93_info_nputop-test-npusmi25.2.0_mixedprocs.txt"


async def scrape_once(cfg: Config) -> tuple[str, StatusResponse]:
    """One sidecar cycle over `cfg`: its /metrics text and its status."""
    sc = Sidecar(cfg)
    try:
        await sc.run(once=True)
        return generate_latest(sc.registry).decode(), sc.status()
    finally:
        await sc.close()


def test_accelerator_series_from_npu_smi_and_dcgm(tmp_path):
    fake = write_fake_npu_smi(tmp_path / "npu-smi", A3.read_text())
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)

    async def go():
        async def dcgm(request):
            return web.Response(text=(REAL_FIXTURES / "dcgm_exporter_sample.txt").read_text())

        runner, base = await serve_routes({"/metrics": dcgm})
        cfg = parse_config({
            "sidecar": {"scrape_interval_seconds": 2, "scrape_timeout_seconds": 1},
            "deployments": [{"name": "a3", "tpot_target_seconds": 0.1, "targets": [
                {"role": "npu", "source": "npu-smi", "command": [str(fake)], "node": "node-a"},
                {"role": "npu", "source": "npu-smi", "command": [str(hang)], "node": "node-b"},
                {"role": "gpu", "source": "dcgm", "url": f"{base}/metrics"},
            ]}],
        })
        try:
            return await scrape_once(cfg)
        finally:
            await runner.cleanup()

    text, status = asyncio.run(go())
    assert 'accelerator_temperature_celsius{chip="0",deployment="a3"' in text
    assert 'vendor="huawei"' in text and 'vendor="nvidia"' in text
    down = [t for t in status.deployments[0].targets if not t.up]
    assert len(down) == 1 and "hang" in down[0].id and "no answer within 1s" in down[0].last_error  # never stalls
    assert_promtool_clean(text)


def test_npu_smi_ecc_details_are_exported_and_a_missing_detail_is_a_partial_status(tmp_path):
    ecc = (REAL_FIXTURES.parent / "npu-smi" / "910a_info-t-ecc_mindcluster-docs-faultdiag-collecting-logs.txt").read_text()
    ecc = ecc.replace("HBM Double Bit Error Count               : 0", "HBM Double Bit Error Count               : 2")
    fake = write_fake_npu_smi(tmp_path / "npu-smi", A3.read_text(), {"ecc": ecc})

    cfg = parse_config({"deployments": [{"name": "a3", "tpot_target_seconds": 0.1, "targets": [
        {"role": "npu", "command": [str(fake)], "node": "node-a", "npu_smi_details": ["ecc", "health"]}]}]})
    text, status = asyncio.run(scrape_once(cfg))
    errors = [line for line in text.splitlines() if line.startswith("accelerator_ecc_errors_total{")
              and 'type="uncorrectable"' in line]
    assert len(errors) == 4 and all(line.endswith(" 2.0") for line in errors)
    npu = status.deployments[0].targets[0]
    # `-t health` is not answered by this npu-smi: the table and ECC still count, the status says what is missing.
    assert npu.up and npu.last_error.startswith("partial: ") and "-t health" in npu.last_error
