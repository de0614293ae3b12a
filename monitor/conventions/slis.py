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


# --- What an SLI measures of a request -------------------------------------------------------------
# An SLI's kind (as Sloth's event/raw SLIs and Pyrra's indicator types): what one observation of its histogram
# is. "per-request": one observation per request, a latency of that request, so one request meets the target
# or misses it (the request log can judge it, goodput counts it); "per-token": one observation per output
# token (weighted), no verdict per request. The third kind of SLO, a ratio of good to total events (goodput
# from the request log, availability from the gateway's counters), is not a histogram and has no record here:
# `slo_plan.GoodputPlan` and `slo_plan.AvailabilityPlan`.
SLIKind = Literal["per-request", "per-token"]
PER_REQUEST: Final = "per-request"
PER_TOKEN: Final = "per-token"
KIND_COUNTS: Final[dict[str, str]] = {PER_REQUEST: "requests", PER_TOKEN: "output tokens"}


@dataclass(frozen=True)
class Measure:
    """One latency of a request that SGLang 0.5.23 observes into a histogram: what an SLI record measures.

    Every consumer that sees requests one at a time reads it through this: the request log computes it from a
    line's fields (`monitor.requestlog.records` has one reading per measure), the emulator observes it at the
    moment SGLang's collector does (`monitor.emulate.observe` has one observation point per measure). An SLI on
    another histogram of one of these latencies is one more record; a new latency is one more measure here and
    its reading and observation point there (both refuse at import a measure they do not know)."""

    name: str
    kind: SLIKind
    observer: Literal["tokenizer", "scheduler"]  # the SGLang process whose collector observes it
    # The request-log (meta_info) fields it is computed from; () when a line does not carry it (ITL: a line
    # has no per-token intervals), and then no SLI of it can have `request_log=True`.
    log_fields: tuple[str, ...]
    on_prefill: bool  # a PD prefill server observes it too (its tokenizer finishes the request at the KV's send)
    description: str


FIRST_TOKEN_LATENCY: Final = Measure(
    "first_token_latency", PER_REQUEST, "tokenizer", ("first_token_latency",), False,
    "receipt to the first output token")
# bench_serving's and SGLang's per-request TPOT: (e2e - ttft) / (completion_tokens - 1), over stop/length
# finishes with more than one token.
OUTPUT_TOKEN_LATENCY: Final = Measure(
    "time_per_output_token", PER_REQUEST, "tokenizer", ("e2e_latency", "first_token_latency", "completion_tokens"),
    False, "(e2e latency - time to first token) / (completion tokens - 1)")
INTER_TOKEN_LATENCY: Final = Measure(
    "inter_token_latency", PER_TOKEN, "tokenizer", (), False, "the interval before each output token")
E2E_LATENCY: Final = Measure(
    "e2e_latency", PER_REQUEST, "tokenizer", ("e2e_latency",), True, "receipt to the finishing batch")
# From the scheduler's waiting queue to the request's first forward (req_time_stats.set_forward_entry_time).
QUEUE_WAIT: Final = Measure(
    "queue_time", PER_REQUEST, "scheduler", ("queue_time",), True, "waiting queue to the first forward")
MEASURES: Final = (FIRST_TOKEN_LATENCY, OUTPUT_TOKEN_LATENCY, INTER_TOKEN_LATENCY, E2E_LATENCY, QUEUE_WAIT)


@dataclass(frozen=True)
class SLI:
    """Everything the project knows about one latency SLI: sidecar, request log, rules, dashboards, analyzer,
    OpenSLO and Sloth, status table and emulator all read it from here. A deployment has the SLI when its
    `<key>_target_seconds` is set. Its kind (per-request or per-token) is its measure's."""

    key: str
    family: str  # SGLang's histogram, canonical colon spelling
    buckets: tuple[float, ...]  # SGLang 0.5.23's default edges (metrics_collector.py)
    bucket_flag: str | None  # the launch flag that sets them (None: fixed in SGLang 0.5.23)
    title: str
    long_name: str
    counts: str  # what one observation is: "requests" or "output tokens" (KIND_COUNTS of its kind)
    measure: Measure  # the latency of a request its histogram observes (its kind is the measure's)
    roles: tuple[str, ...] = REQUEST_ROLES  # the server roles whose observations count
    prefill_records: bool = False  # a PD prefill server exposes it too (counted only if "prefill" in roles)
    # One SGLang request-log line judges it (goodput, and the request log's good ratio beside the histogram's):
    # only a per-request SLI whose measure a line carries.
    request_log: bool = False
    # What is read of the histogram on a deployment with no target for it: "mean" (its _sum and _count only, a
    # 32-rank scheduler histogram is ~1,400 bucket lines a scrape) or "full" (every bucket). A target always
    # reads it full. The readers without a target: the leading TPOT warning (ITL's mean), the analyzer's decode
    # speed, queue wait and stage means (means), and its give-up test (the E2E buckets the aborts pile into).
    untargeted: Literal["mean", "full"] = "mean"

    @property
    def kind(self) -> SLIKind:
        """Per-request or per-token: what one observation of its histogram is."""
        return self.measure.kind

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
        "TTFT", "time to first token", "requests", FIRST_TOKEN_LATENCY, request_log=True),
    SLI("tpot", TPOT_FAMILY, _TOKEN_EDGES, _ITL_FLAG,
        "TPOT", "time per output token", "requests", OUTPUT_TOKEN_LATENCY, request_log=True),
    SLI("itl", ITL_FAMILY, _TOKEN_EDGES, _ITL_FLAG,
        "ITL", "inter-token latency", "output tokens", INTER_TOKEN_LATENCY),
    SLI("e2e", E2E_FAMILY,
        (*_LATENCY_EDGES, 600.0, 1200.0, 1800.0, 2400.0), "--bucket-e2e-request-latency",
        "E2E latency", "end-to-end request latency", "requests", E2E_LATENCY, prefill_records=True,
        request_log=True,
        untargeted="full"),
    # One sample per request, the wait from the scheduler's waiting queue to its first forward
    # (req_time_stats.set_forward_entry_time); recorded by every role, counted where the request is admitted.
    SLI(QUEUE_TIME_SLI, QUEUE_TIME,
        (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
         60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0,
         1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0),
        None, "Queue time", "time queued before the first forward", "requests", QUEUE_WAIT, roles=ADMISSION_ROLES,
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
    - roles and the prefill flag agree: a record counted on prefill servers must say the prefill server has it;
    - the measure is one of MEASURES, and the record agrees with its kind: what one observation counts
      (KIND_COUNTS), a request-log judgement only for a per-request measure a line carries (the request log
      would have nothing to judge it on), the prefill flag only for a measure a PD prefill server observes.
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
        if r.measure not in MEASURES:
            problems.append(f"{r.key}: measure {r.measure.name!r} is not one of conventions/slis.py MEASURES")
            continue
        if r.counts != KIND_COUNTS[r.kind]:
            problems.append(f"{r.key}: a {r.kind} SLI counts {KIND_COUNTS[r.kind]!r}, not {r.counts!r}")
        if r.request_log and (r.kind != PER_REQUEST or not r.measure.log_fields):
            why = "per token: no verdict per request" if r.kind != PER_REQUEST else "no request-log field has it"
            problems.append(f"{r.key}: request_log=True but an SGLang request-log line cannot judge its measure "
                            f"{r.measure.name!r} ({why})")
        if r.prefill_records and not r.measure.on_prefill:
            problems.append(f"{r.key}: prefill_records=True but a PD prefill server does not observe its measure "
                            f"{r.measure.name!r}")
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
SLI_BY_FAMILY: Final[dict[str, SLI]] = {s.family: s for s in SLI_RECORDS}
# The records of each measure, in record order (the emulator observes each measure into all of them).
RECORDS_OF: Final[dict[Measure, tuple[SLI, ...]]] = {m: tuple(s for s in SLI_RECORDS if s.measure == m)
                                                      for m in MEASURES}
# The leading TPOT signal (docs/leading-tpot.md) relates two measures, not two keys: the per-request output-token
# latency is observed only when a request finishes, the per-token inter-token latency of the same decode at every
# output token, so the latter's mean over the last minute tells what the former will show. The warning is about
# the first record of the output-token latency (its target, its `sli` label, its dashboard row) and reads the
# first record of the inter-token latency (its family and roles): the generated rules, promtool cases and
# dashboards name them through these two roles, never through their keys.
LEADING_SLI: Final = RECORDS_OF[OUTPUT_TOKEN_LATENCY][0]
LEADING_SOURCE: Final = RECORDS_OF[INTER_TOKEN_LATENCY][0]
DEFAULT_BUCKETS: Final[dict[str, tuple[float, ...]]] = {s.key: s.buckets for s in SLI_RECORDS}
SLI_ROLES: Final[dict[str, tuple[str, ...]]] = {s.key: s.roles for s in SLI_RECORDS}
# The latency SLIs a request's log line can be judged on (per-request SLIs whose measure a line carries; ITL is
# per token: no single verdict per request).
REQUEST_SLIS: Final = tuple(s.key for s in SLI_RECORDS if s.request_log)
# What a request that did not succeed missed in the request log's judgement (instead of its latency SLIs): the
# goodput series' `sli` label and the runbook name it beside REQUEST_SLIS.
REQUEST_FAILED: Final = "failed"
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
