"""The emulated history both rule sets read: two deployments (a unified server with an interpolated TTFT target and a
goodput SLO, and a PD pair) with a TPOT regression, run in lockstep (the emulator frozen and moved by `advance()`, the
sidecar on the same clock for its request-log goodput counters) and read at every scrape as a Prometheus scraping the
same targets would store it: the SLI histograms of the SGLang servers and the sidecar's two goodput counters, with the
labels the generated scrape config adds (job, instance, deployment, role)."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.config import Config, parse_config
from monitor.conventions.names import GOODPUT_REQUESTS_TOTAL, LOG_FINISHED_TOTAL, SIDECAR_JOB
from monitor.conventions.slis import SLI_FAMILIES
from monitor.emulate import Emulator
from monitor.emulate.exposition import server_families
from monitor.generate.prometheus_config import job_name
from monitor.sidecar import Sidecar
from tools.incident_lab.scenarios import LLAMA, PD

STEP = 60  # scrape = rule evaluation interval (s)
HOURS = 5
UNTIL = HOURS * 3600
REGRESSION_AT, REGRESSION_FOR, REGRESSION_FACTOR = 2 * 3600, 3600, 2.0
RATE = 1.5  # requests/s per deployment
# Later the PD deployment has no traffic for a while: its counters stand still, as a server no client reaches exposes
# them (the increments the emulator made meanwhile are taken out of every later scrape). Sloth's and our ratios
# part there: 0/0 is NaN for Sloth, no series for us.
IDLE, IDLE_AT, IDLE_FOR = "pd", 4 * 3600, 20 * 60
SIDECAR_INSTANCE = "127.0.0.1:9464"
# TTFT 1.5 s is not an edge of SGLang's buckets (1, 2): both sides interpolate the same way (`approximate`).
DEPLOYMENTS: list[dict[str, Any]] = [
    {"name": "unified", **LLAMA, "objective": 0.99, "ttft_target_seconds": 1.5, "e2e_target_seconds": 20.0,
     "approximate": True, "goodput_objective": 0.95,
     # Replaced by the emulator's own targets (localized_config); goodput needs a request log to be valid.
     "targets": [{"role": "request-log", "path": "/var/log/sglang/request-metrics"}]},
    {"name": "pd", **PD, "objective": 0.99},
]
INCIDENTS = [f"{d['name']}:tpot_regression:{REGRESSION_FACTOR:g}@{REGRESSION_AT}+{REGRESSION_FOR}" for d in DEPLOYMENTS]
SIDECAR_SERIES = (GOODPUT_REQUESTS_TOTAL, LOG_FINISHED_TOTAL)


def config() -> Config:
    return parse_config({"sidecar": {"scrape_interval_seconds": STEP, "scrape_timeout_seconds": STEP},
                         "deployments": DEPLOYMENTS})


@dataclass
class History:
    """Series (as promtool's input_series writes them) -> one value per step from 0, None where not scraped."""

    series: dict[str, list[float | None]]
    steps: int
    config: Config  # with the targets the history was scraped from (the emulator's ports)


def _series(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


async def _run(workdir: Path, until: int) -> History:
    emu = Emulator(config(), 0, speed=0, seed=1, incidents=INCIDENTS, rates={d["name"]: RATE for d in DEPLOYMENTS},
                   request_log_dir=workdir / "request-logs")
    await emu.start()
    try:
        local = emu.localized_config()
        now = [0.0]
        # The sidecar only reads the request logs: its scrapes are not what is compared, and cost most of the run.
        logs_only = local.model_copy(update={"deployments": [
            d.model_copy(update={"targets": [t for t in d.targets if t.role == "request-log"]})
            for d in local.deployments]})
        sidecar = Sidecar(logs_only, clock=lambda: now[0])
        series: dict[str, list[float | None]] = {}
        steps = until // STEP + 1
        only = set(SLI_FAMILIES.values())
        try:
            for step in range(steps):
                await sidecar.run(once=True)  # reads the request logs up to now (goodput counters)
                seen: dict[str, float] = {}
                for dep in local.deployments:
                    edep = emu.deployments[dep.name]
                    by_port = {srv.spec.port: srv for srv in edep.servers}
                    for t in dep.targets:
                        port = int((t.url or ":0/").rsplit(":", 1)[1].split("/", 1)[0]) if t.url else 0
                        srv = by_port.get(port)
                        if srv is None:
                            continue
                        extra = {"job": job_name(t), "instance": f"127.0.0.1:{port}", "deployment": dep.name,
                                 "role": t.role}
                        for fam in server_families(edep, srv, only):
                            for s in fam.samples:
                                if not s.name.endswith("_created"):
                                    seen[_series(s.name, {**s.labels, **extra})] = s.value
                for fam in sidecar.registry.collect():
                    for s in fam.samples:
                        if s.name in SIDECAR_SERIES:
                            labels = {**s.labels, "job": SIDECAR_JOB, "instance": SIDECAR_INSTANCE, "role": "sidecar"}
                            seen[_series(s.name, labels)] = s.value
                for key, value in seen.items():
                    series.setdefault(key, [None] * step).append(value)
                for values in series.values():
                    if len(values) < step + 1:
                        values.append(None)
                await emu.advance(STEP)
                now[0] += STEP
        finally:
            await sidecar.close()
        _idle(series, f'deployment="{IDLE}"', IDLE_AT // STEP, (IDLE_AT + IDLE_FOR) // STEP)
        return History(series, steps, local)
    finally:
        await emu.stop()


def _idle(series: dict[str, list[float | None]], match: str, start: int, end: int) -> None:
    """Hold the matching counters at their value at `start` until `end`; later ones lose what came in between."""
    for key, values in series.items():
        if match not in key or values[start] is None or values[end] is None:
            continue
        held, gone = values[start], values[end] - values[start]  # type: ignore[operator]
        for s in range(start, len(values)):
            v = values[s]
            if v is not None:
                values[s] = held if s <= end else v - gone


def run_history(until: int = UNTIL) -> History:
    with tempfile.TemporaryDirectory(prefix="sloth-compare-") as tmp:
        return asyncio.run(_run(Path(tmp), until))
