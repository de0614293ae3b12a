"""The incidents of the lab: one deployment per incident kind, each with what the analysis must name.

Every scenario is its own deployment of one config, run together in one emulator (each deployment has its
own scheduler and random stream), so one lockstep run and one Prometheus hold them all. Times are emulated
seconds from the start; the sidecar's clock is EPOCH + t.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitor.analyze import diagnose as m
from monitor.config import Config, parse_config

EPOCH = 1_700_000_000.0  # the sidecar's (and Prometheus's) clock at emulated time 0
INTERVAL = 10.0  # scrape = recording = capture interval (emulated seconds)
WINDOW = 60.0  # SLI short window the analysis runs with
INCIDENT_AT = 240.0
DURATION = 120.0
T1, T2 = 180.0, 480.0  # the analysed range; its default baseline [T1 - (T2 - T1), T1] starts before the data
UNTIL = T2

# A mixed Llama server (16 slots) with its recipe baseline; TPOT 80 ms and TTFT 2 s are edges of SGLang's
# default buckets. The PD pair and the speculative server are the same model and targets.
LLAMA: dict[str, Any] = {
    "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "Atlas 800I A2", "cards": 2,
    "tpot_target_seconds": 0.08, "ttft_target_seconds": 2.0, "input_tokens": 1000, "output_tokens": 64,
    "baseline": {"tpot_mean_seconds": 0.055, "ttft_mean_seconds": 0.9},
    "launch": {"max_running_requests": 16},
}
PD: dict[str, Any] = {
    **LLAMA, "mode": "pd-disaggregated", "cards": 4,
    "launch": {"prefill": {"max_running_requests": 8}, "decode": {"max_running_requests": 16}},
}
SPEC: dict[str, Any] = {
    **LLAMA,
    "launch": {"max_running_requests": 16, "speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4},
}
RATE = 1.5  # requests/s: a third of the mixed server's slots busy
SEED = 1  # the emulator's seed of the confusion table (the grid runs many: tools/incident_lab/grid.py)


@dataclass(frozen=True)
class Scenario:
    name: str  # its deployment's name
    kind: str  # the emulator's incident kind ("none": the healthy control)
    expect: str  # the mechanism the verdict must name (monitor.analyze.diagnose)
    template: dict[str, Any]
    incident: str | None  # `[/role]:KIND[:FACTOR]@START+DURATION` after the deployment name
    rate: float = RATE
    note: str = ""

    @property
    def spec(self) -> str | None:
        return f"{self.name}{self.incident}" if self.incident else None

    @property
    def specs(self) -> tuple[str, ...]:
        """Every incident spec of the deployment (the lockstep run injects these)."""
        return (self.spec,) if self.spec else ()


def _at(kind: str, factor: str = "", duration: float = DURATION, role: str = "") -> str:
    f = f":{factor}" if factor else ""
    d = f"+{duration:g}" if duration else ""
    return f"{role}:{kind}{f}@{INCIDENT_AT:g}{d}"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("healthy", "none", m.HEALTHY, LLAMA, None),
    Scenario("tpot-regression", "tpot_regression", m.DECODE_SLOWDOWN, LLAMA, _at("tpot_regression", "2")),
    Scenario("ttft-spike", "ttft_spike", m.PREFILL_SLOWDOWN, LLAMA, _at("ttft_spike", "4")),
    Scenario("queue-buildup", "queue_buildup", m.OVERLOAD, LLAMA, _at("queue_buildup", "3")),
    Scenario("restart", "restart", m.RESTART, LLAMA, _at("restart", duration=0)),
    Scenario("down", "down", m.SERVER_DOWN, LLAMA, _at("down", duration=60)),
    Scenario("npu-overheat", "npu_overheat", m.ACCELERATOR_OVERHEAT, LLAMA, _at("npu_overheat", "2")),
    Scenario("hbm-full", "hbm_full", m.KV_CAPACITY, LLAMA, _at("hbm_full", "0.25")),
    Scenario("kv-transfer-failure", "kv_transfer_failure", m.KV_TRANSFER_FAILURE, PD,
             _at("kv_transfer_failure", "0.5"), note="PD"),
    Scenario("pd-prefill-slow", "ttft_spike", m.PREFILL_SLOWDOWN, PD, _at("ttft_spike", "4", role="/prefill"),
             note="PD, prefill servers only"),
    Scenario("spec-accept-drop", "spec_accept_drop", m.SPEC_ACCEPT_DROP, SPEC, _at("spec_accept_drop", "2"),
             note="EAGLE, 4 draft tokens"),
    Scenario("client-timeout", "client_timeout", m.CLIENT_GIVE_UP, LLAMA, _at("client_timeout", "2"),
             note="clients give up at 2 s"),
)


def by_name(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)


def lab_config(scenarios: tuple[Scenario, ...] = SCENARIOS) -> Config:
    return parse_config({
        # A scrape may take as long as an interval: the clock waits for it (lockstep), and a busy machine must
        # not turn a slow render into a target that looks down.
        "sidecar": {"scrape_interval_seconds": INTERVAL, "scrape_timeout_seconds": INTERVAL},
        "deployments": [{"name": s.name, **s.template} for s in scenarios],
    })
