"""Emulated incidents recorded by the sidecar in lockstep: the emulator frozen (speed 0) and moved by
`advance()`, the sidecar on an injected clock, one scrape and one recording tick per interval."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from monitor.config import Config, parse_config
from monitor.emulate import Emulator
from monitor.sidecar import Sidecar

EPOCH = 1_700_000_000.0  # the sidecar's clock at emulated time 0
INTERVAL = 5.0  # scrape = recording interval of the lockstep runs (emulated seconds)
WINDOW = 60.0  # SLI short window the tests analyse with
T1, T2 = 300.0, 960.0  # analysed range, emulated seconds
INCIDENT_AT = 400.0
RATE = 1.5  # requests/s into the deployment (its 16 slots are ~30 % busy)
QUEUE_INCIDENT = f"llama:queue_buildup:3@{INCIDENT_AT:g}+80"
OVERHEAT_INCIDENT = f"llama:npu_overheat:2@{INCIDENT_AT:g}+200"


def make_config() -> Config:
    # TPOT target 80 ms and TTFT 2 s are bucket edges of SGLang's default buckets (exact SLIs).
    return parse_config({
        "sidecar": {"scrape_interval_seconds": INTERVAL, "scrape_timeout_seconds": 2},
        "deployments": [{
            "name": "llama", "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "Atlas 800I A2", "cards": 2,
            "tpot_target_seconds": 0.08, "ttft_target_seconds": 2.0, "input_tokens": 1000, "output_tokens": 64,
            "baseline": {"tpot_mean_seconds": 0.055, "ttft_mean_seconds": 0.9},
            "launch": {"max_running_requests": 16}}],
    })


@dataclass
class Run:
    recording: Path
    config: Config  # localized: targets on the emulator's ports
    queued: dict[float, int] = field(default_factory=dict)  # emulated time -> requests waiting (ground truth)


async def _lockstep(incident: str, path: Path, until: float, request_log_dir: Path | None = None,
                    goodput_objective: float | None = None) -> Run:
    emu = Emulator(make_config(), 0, speed=0, seed=1, incidents=[incident], rates={"llama": RATE},
                   request_log_dir=request_log_dir)
    await emu.start()
    try:
        emu.deployments["llama"].wall_start = EPOCH  # request-log timestamps on the sidecar's clock
        local = emu.localized_config()
        side = local.sidecar.model_copy(update={"recording_path": str(path), "recording_interval_seconds": INTERVAL})
        deps = [d.model_copy(update={"goodput_objective": goodput_objective}) for d in local.deployments]
        local = local.model_copy(update={"sidecar": side, "deployments": deps})
        now = [EPOCH]
        sidecar = Sidecar(local, clock=lambda: now[0])
        run = Run(path, local)
        try:
            t = 0.0
            while t <= until:
                await sidecar.run(once=True)  # scrapes at emulated t, records one tick
                run.queued[t] = sum(s["queued"] for s in emu.deployments["llama"].state()["servers"])
                await emu.advance(INTERVAL)
                t += INTERVAL
                now[0] = EPOCH + t
        finally:
            await sidecar.close()
        return run
    finally:
        await emu.stop()


def record_incident(incident: str, path: Path, until: float = T2, **request_log) -> Run:
    """`request_log`: request_log_dir (the emulator writes SGLang's request logs there, the sidecar
    tails them) and goodput_objective."""
    return asyncio.run(_lockstep(incident, path, until, **request_log))


@pytest.fixture(scope="session")
def queue_run(tmp_path_factory) -> Run:
    return record_incident(QUEUE_INCIDENT, tmp_path_factory.mktemp("queue") / "recording.sqlite")


@pytest.fixture(scope="session")
def overheat_run(tmp_path_factory) -> Run:
    return record_incident(OVERHEAT_INCIDENT, tmp_path_factory.mktemp("overheat") / "recording.sqlite")
