"""An emulator and a sidecar in lockstep on a fake clock: the emulator advances, the sidecar scrapes once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from prometheus_client import generate_latest

from monitor.config import Config
from monitor.emulate import Emulator
from monitor.sidecar import Sidecar
from monitor.status_model import StatusResponse


def run_lockstep(cfg: Config, logs: Path, *, seed: int, rates: dict[str, float], steps: int, step: float = 5.0,
                 recording: Path | None = None) -> tuple[str, StatusResponse]:
    """(the sidecar's /metrics text, its status) after `steps` scrapes `step` emulated seconds apart."""

    async def go() -> tuple[str, StatusResponse]:
        emu = Emulator(cfg, 0, speed=0, seed=seed, request_log_dir=logs, rates=rates)
        await emu.start()
        local = emu.localized_config()
        if recording is not None:
            local = local.model_copy(update={"sidecar": local.sidecar.model_copy(
                update={"recording_path": str(recording)})})
        clock = {"t": time.time()}
        sc = Sidecar(local, clock=lambda: clock["t"])
        try:
            for _ in range(steps):
                await emu.advance(step)
                clock["t"] += step
                await sc.run(once=True)
            return generate_latest(sc.registry).decode(), sc.status()
        finally:
            await sc.close()
            await emu.stop()

    return asyncio.run(go())
