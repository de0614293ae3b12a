"""Run the lab's deployments on an advanced clock: the emulator frozen (speed 0) and moved by `advance()`,
the sidecar on an injected clock (one scrape and one recording tick per interval), and a capture of what a
Prometheus scraping the same targets at the same instants would store, written as OpenMetrics with
timestamps for `promtool tsdb create-blocks-from openmetrics`.

The capture reads each scraped target at the instant the sidecar scraped it: the emulated servers'
families (what their /metrics renders; rendering them a second time would double the run's cost), the
npu-exporter text, and the sidecar's own /metrics (its SLO targets, loads, restarts, accelerator series);
it adds the labels the generated scrape config attaches (job, instance, deployment, role) and writes `up`
1 or 0 as Prometheus does for every scrape. Names keep SGLang's `sglang:` spelling, which the generated
scrape config restores anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from monitor.config import Config, Deployment, Target
from monitor.conventions.names import (
    COUNTERS,
    GAUGES,
    KV_TRANSFER_LATENCY,
    QUEUE_TIME,
    SIDECAR_JOB,
    STAGE_LATENCY,
)
from monitor.conventions.slis import SLI_FAMILIES
from monitor.emulate import Emulator
from monitor.emulate.exposition import render_npu, server_families
from monitor.escaping import matchers
from monitor.generate.prometheus_config import job_name
from monitor.sidecar import Sidecar
from monitor.slo_plan import SCRAPED_SOURCES
from tools.incident_lab.scenarios import EPOCH, INTERVAL, SCENARIOS, SEED, UNTIL, Scenario, lab_config

SIDECAR_INSTANCE = "127.0.0.1:9464"
# The SGLang families the analysis queries (the rest of an exposition is never read; leaving it out keeps
# the capture small, as a metric_relabel_configs `keep` would).
ANALYSED_FAMILIES: frozenset[str] = frozenset({
    *SLI_FAMILIES.values(), *(c.removesuffix("_total") for c in COUNTERS.values()), *GAUGES.values(), QUEUE_TIME,
    STAGE_LATENCY, KV_TRANSFER_LATENCY})


@dataclass
class LabRun:
    recording: Path
    openmetrics: Path | None  # None: run without the capture (nothing to backfill a Prometheus from)
    config: Config  # localized: targets on the emulator's ports
    scenarios: tuple[Scenario, ...]
    interval: float
    # Ground truth per deployment: emulated time -> requests waiting and running in the emulator.
    truth: dict[str, dict[float, tuple[int, int]]] = field(default_factory=dict)
    # Wall seconds of the slowest scrape round (every target at once, each bounded by the scrape timeout):
    # near the timeout, a slow render would read as a target that is down.
    slowest_scrape: float = 0.0

    def deployment(self, name: str) -> Deployment:
        return self.config.deployment(name)


def _labels(extra: dict[str, str]) -> str:
    return matchers(extra)[1:-1]


def scraped(config: Config) -> list[tuple[Deployment, Target]]:
    return [(d, t) for d in config.deployments for t in d.targets
            if t.source in SCRAPED_SOURCES and t.url and not t.has_placeholder]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family_lines(families: Iterable[Metric], extra: dict[str, str], ts: float) -> list[str]:
    """Sample lines with the target's labels; an exposed label that clashes with one is kept as
    `exported_<name>`, as Prometheus does without honor_labels."""
    add = _labels(extra)
    out = []
    for fam in families:
        for smp in fam.samples:
            inner = ",".join(f'{"exported_" + k if k in extra else k}="{_escape(v)}"' for k, v in smp.labels.items())
            out.append(f"{smp.name}{{{add}{',' if inner else ''}{inner}}} {floatToGoString(smp.value)} {ts:.3f}")
    return out


def _capture(emu: Emulator, targets: list[tuple[Deployment, Target]], sidecar: Sidecar, ts: float,
             out: IO[str]) -> None:
    """What Prometheus would store from one scrape of every target at `ts`. The emulated servers' families
    are read in process (what their /metrics renders at this instant, without rendering it a second time:
    the sidecar already fetched it over HTTP); a server that is down or answers 404 is `up` 0."""
    servers = {srv.spec.port: (dep, srv) for dep in emu.deployments.values() for srv in dep.servers}
    for dep, t in targets:
        port = int((t.url or "").removeprefix("http://").split("/", 1)[0].rsplit(":", 1)[1])
        instance = f"127.0.0.1:{port}"
        extra = {"job": job_name(t), "instance": instance, "deployment": dep.name, "role": t.role}
        lines: list[str] | None = None
        edep = emu.deployments[dep.name]
        if t.source == "npu-exporter":
            text = render_npu(edep, emu.layout.deployment(dep.name).chips)
            lines = _family_lines(text_string_to_metric_families(text), extra, ts)
        elif port in servers:
            _, srv = servers[port]
            eff = edep.effects(srv.spec.role)
            if not (eff.down or eff.metrics_disabled):
                lines = _family_lines(server_families(edep, srv, ANALYSED_FAMILIES), extra, ts)
        out.write(f"up{{{_labels(extra)}}} {1 if lines is not None else 0} {ts:.3f}\n")
        if lines:
            out.write("\n".join(lines) + "\n")
    side = {"job": SIDECAR_JOB, "instance": SIDECAR_INSTANCE, "role": "sidecar"}  # the generated sidecar job
    out.write("\n".join(_family_lines(sidecar.registry.collect(), side, ts)) + "\n")


async def _run(scenarios: tuple[Scenario, ...], workdir: Path, interval: float, until: float, seed: int,
               capture: bool) -> LabRun:
    workdir.mkdir(parents=True, exist_ok=True)
    config = lab_config(scenarios)
    emu = Emulator(config, 0, speed=0, seed=seed, incidents=[x for s in scenarios for x in s.specs],
                   rates={s.name: s.rate for s in scenarios})
    await emu.start()
    try:
        local = emu.localized_config()
        side = local.sidecar.model_copy(update={"recording_path": str(workdir / "recording.sqlite"),
                                                "recording_interval_seconds": interval,
                                                "scrape_interval_seconds": interval})
        local = local.model_copy(update={"sidecar": side})
        now = [EPOCH]
        sidecar = Sidecar(local, clock=lambda: now[0])
        run = LabRun(workdir / "recording.sqlite", workdir / "capture.om" if capture else None, local, scenarios,
                     interval)
        targets = scraped(local)
        try:
            with run.openmetrics.open("w") if run.openmetrics else contextlib.nullcontext() as om:
                t = 0.0
                while t <= until + 1e-9:
                    began = time.monotonic()
                    await sidecar.run(once=True)  # scrapes at emulated t, records one tick
                    run.slowest_scrape = max(run.slowest_scrape, time.monotonic() - began)
                    if om is not None:
                        _capture(emu, targets, sidecar, EPOCH + t, om)
                    for s in scenarios:
                        st = emu.deployments[s.name].state()["servers"]
                        run.truth.setdefault(s.name, {})[t] = (sum(x["queued"] for x in st),
                                                               sum(x["running"] for x in st))
                    await emu.advance(interval)
                    t += interval
                    now[0] = EPOCH + t
                if om is not None:
                    om.write("# EOF\n")
        finally:
            await sidecar.close()
        return run
    finally:
        await emu.stop()


def run_lab(workdir: Path, scenarios: tuple[Scenario, ...] = SCENARIOS, *, interval: float = INTERVAL,
            until: float = UNTIL, seed: int = SEED, capture: bool = True) -> LabRun:
    """Every scenario from emulated 0 to `until` (inclusive): the recording and (`capture`) the OpenMetrics
    capture. `scenarios`: anything with a name, a template, a rate and incident specs (the grid's runs too)."""
    return asyncio.run(_run(scenarios, workdir, interval, until, seed, capture))
