"""The SLIs: one record each (family, buckets, launch flag, roles, titles)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from monitor.conventions.names import (
    COUNTERS,
    E2E_FAMILY,
    ITL_FAMILY,
    LATENCY_FAMILIES,
    QUEUE_TIME,
    RECORDED_STAGES,
    STAGE_DECODE_WAITING,
    STAGE_PREFILL_BOOTSTRAP,
    STAGE_PREFILL_FORWARD,
    STAGE_PREFILL_TRANSFER,
    TPOT_FAMILY,
    TTFT_FAMILY,
    stage_counters,
)

# --- Which server roles feed which number ---------------------------------------------------
# SGLang 0.5.23 (tokenizer_manager.collect_metrics; docs/reference/sglang_metrics.md §1.4): a PD request
# passes a prefill and a decode server, and each records it. The prefill server records no TTFT, ITL or
# TPOT, but it does record an E2E latency and the request/token counters, covering its part only. Every
# per-request number is therefore taken where the request is answered, the unified (`server`) or
# `decode` server, so each request counts once and E2E is the client's whole request. PD failures and
# load gauges are per server and come from every engine role. `monitor.feeds` applies these to a
# deployment's targets (sidecar, rules, dashboards, analyzer alike).
ENGINE_ROLES: Final = ("server", "prefill", "decode")
REQUEST_ROLES: Final = ("server", "decode")
# Where a request waits for its first forward: the unified server, or a PD pair's prefill server (the
# decode server's own queue time is the KV-arrival wait, its `decode_waiting` stage, not the client's queue).
ADMISSION_ROLES: Final = ("server", "prefill")


@dataclass(frozen=True)
class SLI:
    """Everything the project knows about one latency SLI: sidecar, rules, dashboards, analyzer, OpenSLO and
    Sloth, status table and emulator all read it from here. A deployment has the SLI when its
    `<key>_target_seconds` is set."""

    key: str
    family: str  # SGLang's histogram, canonical colon spelling
    buckets: tuple[float, ...]  # SGLang 0.5.23's default edges (metrics_collector.py)
    bucket_flag: str | None  # the launch flag that sets them (None: fixed in SGLang 0.5.23)
    title: str
    long_name: str
    counts: str  # what one observation is: "requests" or "output tokens" (ITL is token-weighted)
    roles: tuple[str, ...] = REQUEST_ROLES  # the server roles whose observations count
    prefill_records: bool = False  # a PD prefill server exposes it too (counted only if "prefill" in roles)
    request_log: bool = False  # one SGLang request-log line judges it (goodput)
    # What is read of the histogram on a deployment with no target for it: "mean" (its _sum and _count only, a
    # 32-rank scheduler histogram is ~1,400 bucket lines a scrape) or "full" (every bucket). A target always
    # reads it full. The readers without a target: the leading TPOT warning (ITL's mean), the analyzer's decode
    # speed, queue wait and stage means (means), and its give-up test (the E2E buckets the aborts pile into).
    untargeted: Literal["mean", "full"] = "mean"

    @property
    def target_field(self) -> str:
        """The deployment's config field that sets the SLI's target."""
        return f"{self.key}_target_seconds"


_LATENCY_EDGES = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
                  400.0)
_TOKEN_EDGES = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
_ITL_FLAG = "--bucket-inter-token-latency"  # sets TPOT's buckets too
QUEUE_TIME_SLI: Final = "queue_time"  # recorded like an SLI; the analysis reads it as the queue wait
SLI_RECORDS: Final = (
    SLI("ttft", TTFT_FAMILY, _LATENCY_EDGES, "--bucket-time-to-first-token",
        "TTFT", "time to first token", "requests", request_log=True),
    SLI("tpot", TPOT_FAMILY, _TOKEN_EDGES, _ITL_FLAG,
        "TPOT", "time per output token", "requests", request_log=True),
    SLI("itl", ITL_FAMILY, _TOKEN_EDGES, _ITL_FLAG,
        "ITL", "inter-token latency", "output tokens"),
    SLI("e2e", E2E_FAMILY,
        (*_LATENCY_EDGES, 600.0, 1200.0, 1800.0, 2400.0), "--bucket-e2e-request-latency",
        "E2E latency", "end-to-end request latency", "requests", prefill_records=True, request_log=True,
        untargeted="full"),
    # One sample per request, the wait from the scheduler's waiting queue to its first forward
    # (req_time_stats.set_forward_entry_time); recorded by every role, counted where the request is admitted.
    SLI(QUEUE_TIME_SLI, QUEUE_TIME,
        (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
         60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0,
         1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0),
        None, "Queue time", "time queued before the first forward", "requests", roles=ADMISSION_ROLES,
        prefill_records=True),
)


def check_records(records: tuple[SLI, ...]) -> None:
    """The invariants every consumer relies on, checked where the records are built (at import): a record that
    breaks one is refused before anything reads it.

    - keys and families unique: the engine maps a family back to its SLI, the generated promtool cases and
      restored history select by family, so two records on one family would mix their series;
    - every family spelled once, in conventions/names.py (LATENCY_FAMILIES);
    - buckets strictly increasing, and the records one launch flag sets have the same buckets (SGLang's
      `--bucket-inter-token-latency` sets TPOT's and ITL's together);
    - roles and the prefill flag agree: a record counted on prefill servers must say the prefill server has it.
    """
    problems = []
    for attr in ("key", "family"):
        seen: dict[str, str] = {}
        for r in records:
            value = getattr(r, attr)
            if value in seen:
                problems.append(f"{attr} {value!r} is in two SLI records ({seen[value]!r} and {r.key!r})")
            seen[value] = r.key
    for r in records:
        if r.family not in LATENCY_FAMILIES:
            problems.append(f"{r.key}: family {r.family!r} is not spelled in conventions/names.py LATENCY_FAMILIES")
        if any(b <= a for a, b in zip(r.buckets, r.buckets[1:])):
            problems.append(f"{r.key}: buckets are not strictly increasing")
        if "prefill" in r.roles and not r.prefill_records:
            problems.append(f"{r.key}: counted on prefill servers (roles) but prefill_records is False")
    by_flag: dict[str, SLI] = {}
    for r in records:
        if r.bucket_flag is None:
            continue
        first = by_flag.setdefault(r.bucket_flag, r)
        if first.buckets != r.buckets:
            problems.append(f"{r.key} and {first.key} share the launch flag {r.bucket_flag} but not their buckets")
    if problems:
        raise ValueError("SLI records refused: " + "; ".join(problems))


check_records(SLI_RECORDS)
SLI_BY_KEY: Final[dict[str, SLI]] = {s.key: s for s in SLI_RECORDS}
SLIS: Final = tuple(SLI_BY_KEY)
# Views of the records that many readers want whole.
SLI_FAMILIES: Final[dict[str, str]] = {s.key: s.family for s in SLI_RECORDS}
DEFAULT_BUCKETS: Final[dict[str, tuple[float, ...]]] = {s.key: s.buckets for s in SLI_RECORDS}
SLI_ROLES: Final[dict[str, tuple[str, ...]]] = {s.key: s.roles for s in SLI_RECORDS}
# The latency SLIs a request's log line can be judged on (ITL is per token: no single verdict per request).
REQUEST_SLIS: Final = tuple(s.key for s in SLI_RECORDS if s.request_log)
# What SGLang itself exposes on a PD prefill server (the emulator reproduces it).
PREFILL_RECORDED_SLIS: Final = tuple(s.key for s in SLI_RECORDS if s.prefill_records)
# The optional per-request SLO (requests meeting every target), from a request-log target.
GOODPUT_SLI: Final = "goodput"
# Older SGLang (the docs sample) used this name for what is now ITL.
LEGACY_TPOT_FAMILY: Final = "sglang:time_per_output_token_seconds"


def sharing_flag(sli: str) -> list[str]:
    """The other SLIs whose buckets the same launch flag sets (TPOT and ITL share one)."""
    flag = SLI_BY_KEY[sli].bucket_flag
    return [s.key for s in SLI_RECORDS if flag is not None and s.bucket_flag == flag and s.key != sli]


# The role whose scheduler observes each recorded stage (SGLang 0.5.23 observability/req_time_stats.py): prefill
# compute on the server that admits the request, the bootstrap and the KV transfer on a PD prefill server, the
# wait for a decode slot on the PD decode server.
STAGE_ROLES: Final[dict[str, tuple[str, ...]]] = {
    STAGE_PREFILL_FORWARD: ADMISSION_ROLES, STAGE_PREFILL_BOOTSTRAP: ("prefill",),
    STAGE_PREFILL_TRANSFER: ("prefill",), STAGE_DECODE_WAITING: ("decode",),
}
_STAGE_OF_COUNTER: Final = {name: stage for stage in RECORDED_STAGES for name in stage_counters(stage)}
# PD failures are counted on the server that saw them (prefill or decode); stages where they are observed; the
# rest per request.
COUNTER_ROLES: Final[dict[str, tuple[str, ...]]] = {
    name: STAGE_ROLES[_STAGE_OF_COUNTER[name]] if name in _STAGE_OF_COUNTER
    else ENGINE_ROLES if name in ("bootstrap_failed_total", "transfer_failed_total", "retracted_total")
    else REQUEST_ROLES
    for name in COUNTERS
}
PREFILL_ENGINE_TYPE: Final = "prefill"

# SGLang labels every series with the server's engine type (DisaggregationMode.to_engine_type); the
# sidecar's target role for each.
ENGINE_TYPE_LABEL: Final = "engine_type"
ENGINE_TYPE_ROLES: Final[dict[str, str]] = {"unified": "server", "prefill": "prefill", "decode": "decode"}
