"""The causal model of the verdict, declared in one table (#32 item 1): for each mechanism, its own signals, how
its onset is dated, which consequences it explains, which other mechanisms' signals it can move (and under which
test of timing or size), and the SGLang source or physics behind each entry.

monitor/analyze/diagnose.py reads it in one generic pass: every mechanism whose own signal left the deployment's
baseline noise (and passed its gate) is a candidate; candidates are ordered by onset (those within the smoothing's
blur of the first by the table's order: the more specific first); a candidate is explained only through a
`Moves` entry of a candidate before it; the first unexplained one is the cause, every other unexplained one is
named beside it. Nothing in diagnose.py is keyed on a pair of mechanisms or on which one came first.

The tests named here (`Moves.test`, `Evidence.gate`) are functions in diagnose.py (`TESTS`, `GATES`), each over
the deployment's own shifts and baselines; tests/analyze/test_causes.py checks every name resolves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from monitor.analyze.tuning import (
    ANALYSIS_ACCEPT_CHANGE,
    ANALYSIS_ARRIVALS_CHANGE,
    ANALYSIS_CACHE_HIT_DROP,
    ANALYSIS_HBM_FREE_CHANGE,
    ANALYSIS_KV_UNHELD_SHARE,
    ANALYSIS_PREFILL_CHANGE,
    ANALYSIS_RATE_CHANGE,
    ANALYSIS_TEMPERATURE_RISE_CELSIUS,
)

HEALTHY = "healthy"
OVERLOAD = "overload"
DECODE_SLOWDOWN = "decode_slowdown"
PREFILL_SLOWDOWN = "prefill_slowdown"
ACCELERATOR_OVERHEAT = "accelerator_overheat"
ACCELERATOR_UNHEALTHY = "accelerator_unhealthy"
KV_CAPACITY = "kv_capacity"
SPEC_ACCEPT_DROP = "spec_accept_drop"
KV_TRANSFER_FAILURE = "kv_transfer_failure"
KV_TRANSFER_SLOWDOWN = "kv_transfer_slowdown"
RESTART = "restart"
SERVER_DOWN = "server_down"
GATEWAY_ERRORS = "gateway_errors"
CLIENT_GIVE_UP = "client_give_up"
UNEXPLAINED = "unexplained"
STEADY_BREACH = "steady_breach"  # nothing changed: the target does not hold at this load (monitor.analyze.steady)

# What each mechanism is called in the verdict.
TITLES: dict[str, str] = {
    HEALTHY: "no incident", OVERLOAD: "overload (demand above capacity)",
    DECODE_SLOWDOWN: "engine-side decode slowdown", PREFILL_SLOWDOWN: "engine-side prefill slowdown",
    ACCELERATOR_OVERHEAT: "accelerator overheating", ACCELERATOR_UNHEALTHY: "accelerator fault",
    KV_CAPACITY: "KV cache capacity lost (KV pool full)", SPEC_ACCEPT_DROP: "speculative accept-length drop",
    KV_TRANSFER_FAILURE: "PD KV transfer failures", KV_TRANSFER_SLOWDOWN: "PD KV transfer slowdown",
    RESTART: "server restart", SERVER_DOWN: "server down", GATEWAY_ERRORS: "gateway errors",
    CLIENT_GIVE_UP: "clients giving up (a client or gateway timeout)",
    UNEXPLAINED: "SLO breach without a demand or capacity change",
    STEADY_BREACH: "no incident: the SLO does not hold at this steady load",
}


@dataclass(frozen=True)
class Evidence:
    """One of a mechanism's own signals: how far it must move (a ratio; an absolute step when `absolute`), and
    the gate (a function in diagnose.GATES) it must pass to count for this mechanism."""

    key: str
    threshold: float
    absolute: bool = False
    gate: str = ""


@dataclass(frozen=True)
class Moves:
    """The mechanism this entry belongs to can move `mechanism`'s own signals (`signals`: only these; empty: any)
    when `test` (a function in diagnose.TESTS) holds: then the later candidate is its consequence, not a cause."""

    mechanism: str
    test: str
    why: str
    signals: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Cause:
    mechanism: str
    own: tuple[Evidence, ...]
    onset: str  # how its onset is dated
    # Signals it moves as a matter of course (Little's law and the like: consequences, and for a heavier load a
    # warmer chip and more KV per longer request): reported, never causes, and no trace against its confidence.
    explains: tuple[str, ...]
    moves: tuple[Moves, ...]
    why: str
    restates: frozenset[str] = frozenset()  # consequence signals that are its own evidence read another way


# How the onsets are dated (diagnose.level_shift and diagnose.event_shift).
LEVEL_ONSET: Final = ("where the smoothed signal crosses halfway from its baseline level to the level it held off "
                      "its noise band (three steps off the band in the way that hurts)")
EVENT_ONSET: Final = "the first step with more events than the baseline's most"

# Tests of `Moves` (diagnose.TESTS):
#   after: the moved signal's onset is not before the mover's (within the smoothing's blur): a consequence
#          cannot lead its cause.
#   soon:  it began while the mover lasted or within two blurs after it (a restart's cold cache).
#   backlog: soon, and the arrivals above the baseline's rate add up to no more than what the baseline's rate
#          brought while the server was away (conservation: a resent backlog, not a surge).
#   same:  after, and no slower than the mover's other phases are (a throttle slows decode and prefill alike): a
#          phase slower than the others by one of its thresholds is slowed by something else too.
#   bounded: after, and no slower than the mover itself: a step made of a slower part slows at most as much.
#   count: together (within the blur: a failure aborts its request at once), and no more events than the mover's
#          (each failure explains one abort, not more).
#   cold:  soon, and the slowdown is within what losing the baseline's prefix-cache hits makes: with a hit rate h
#          every prompt was prefilled (1 - h) whole, so an empty radix cache prefills at most 1 / (1 - h) times more
#          (SGLang's RadixCache; a deployment whose cache never hit loses nothing on a restart).
#   batch: after, and the slowdown is within what the grown batch makes on this deployment: the baseline's own
#          ITL against running requests, fitted (upper 95 % slope), at the incident's running level.
#   work:  after, and the slowdown is within the growth of prefill work arriving (arrivals x prompt length): a
#          chunked prefill shares its token budget with the prefills beside it, so a request's prefill grows at
#          most in proportion to them.
_THROTTLE = "a throttled chip runs every kernel slower (NPU/GPU clocks scale all phases alike)"
_RESTART_MOVES = (
    Moves(SERVER_DOWN, "soon", "the server is unreachable while it restarts"),
    Moves(RESTART, "soon", "a server that was down comes back as a new process: its counters restart"),
    Moves(GATEWAY_ERRORS, "soon", "the gateway fails requests to a server that is gone"),
    Moves(KV_TRANSFER_FAILURE, "soon", "PD bootstraps to a server that is gone fail"),
    Moves(PREFILL_SLOWDOWN, "cold", "a new process's radix cache starts empty: every prompt is prefilled whole"),
    Moves(OVERLOAD, "soon", "a new process's radix cache starts empty", frozenset({"cache_hit"})),
    Moves(OVERLOAD, "backlog", "what clients could not send while the server was away arrives when it is back",
          frozenset({"arrivals"})),
)
# Most specific first: among candidates that moved together, the earlier entry leads.
CAUSES: Final[tuple[Cause, ...]] = (
    Cause(SERVER_DOWN, (Evidence("targets_down", 0.0),), EVENT_ONSET, ("finished", "throughput", "running"),
          _RESTART_MOVES[1:], "a scrape that fails: the sidecar's up/targets_down"),
    Cause(RESTART, (Evidence("restarts", 0.0),), EVENT_ONSET, ("finished", "throughput", "running", "queued"),
          (_RESTART_MOVES[0], *_RESTART_MOVES[2:]), "counters that fall (a new process): the reset rule"),
    Cause(KV_TRANSFER_FAILURE, (Evidence("transfer_failed", 0.0), Evidence("bootstrap_failed", 0.0)), EVENT_ONSET,
          ("aborted",), (Moves(GATEWAY_ERRORS, "after", "a failed transfer fails its request at the gateway"),
                         Moves(CLIENT_GIVE_UP, "count", "a failed transfer aborts its request: one abort each")),
          "SGLang's disaggregation counters (sglang:num_transfer_failed_reqs, num_bootstrap_failed_reqs)"),
    Cause(ACCELERATOR_UNHEALTHY, (Evidence("unhealthy", 0.0),), EVENT_ONSET, ("utilization",),
          (Moves(DECODE_SLOWDOWN, "same", _THROTTLE), Moves(PREFILL_SLOWDOWN, "same", _THROTTLE),
           Moves(RESTART, "after", "a faulted chip's server is restarted"),
           Moves(SERVER_DOWN, "after", "a faulted chip's server stops answering")),
          "npu-smi health / DCGM health / NVML: a chip reported not OK"),
    Cause(GATEWAY_ERRORS, (Evidence("router_errors", 0.0), Evidence("gateway_failed", 0.0)), EVENT_ONSET, (), (),
          "the gateway's own failures (smg / sglang-router request errors)"),
    Cause(CLIENT_GIVE_UP, (Evidence("gave_up", 0.0),), EVENT_ONSET, ("aborted",), (),
          "SGLang aborts a request 2 s after its client hangs up (create_abort_task); aborts piled at one age "
          "(monitor/analyze/giveup.py) are a timeout", restates=frozenset({"aborted"})),
    Cause(ACCELERATOR_OVERHEAT, (Evidence("temperature", ANALYSIS_TEMPERATURE_RISE_CELSIUS, absolute=True),
                                 Evidence("throttling", 0.0)),
          LEVEL_ONSET, ("power",),
          (Moves(DECODE_SLOWDOWN, "same", _THROTTLE), Moves(PREFILL_SLOWDOWN, "same", _THROTTLE),
           Moves(KV_TRANSFER_SLOWDOWN, "same", _THROTTLE)),
          "a die warms above its inlet in proportion to its power; one that warms beyond what its power explains "
          "is cooled badly (diagnose: the gate in `shifts`); NVML/DCGM say so themselves where they report thermal "
          "clock event reasons (accelerator_thermal_throttling)"),
    Cause(SPEC_ACCEPT_DROP, (Evidence("accept_length", ANALYSIS_ACCEPT_CHANGE),), LEVEL_ONSET, ("throughput",),
          (Moves(DECODE_SLOWDOWN, "bounded", "fewer accepted tokens per verify step: a longer ITL per token, by as "
                 "much as the accept length fell"),),
          "sglang:spec_accept_length (EAGLE / n-gram): tokens accepted per verify step"),
    Cause(KV_CAPACITY, (Evidence("retractions", 0.0), Evidence("kv_unheld", ANALYSIS_KV_UNHELD_SHARE, absolute=True, gate="unheld"),
                        Evidence("hbm", ANALYSIS_HBM_FREE_CHANGE)), LEVEL_ONSET,
          ("token_usage", "queued", "kv_per_running"),
          (Moves(DECODE_SLOWDOWN, "batch", "the pool holds the running requests' KV: a step is as slow as its batch"),
           Moves(PREFILL_SLOWDOWN, "work", "retracted requests are prefilled again, beside the arriving ones")),
          "SGLang preallocates the KV pool (mem_fraction_static): tokens it lost are used and held by no running "
          "request (token usage less the running requests' share), and decodes that no longer fit are retracted "
          "(sglang:num_retracted_reqs); the chip's HBM does not move"),
    # Inferred arrivals (finished + the change of requests in the system) also rise when a slower engine holds
    # requests longer: they count only with more work served ("served"). Measured ones (SGLang's HTTP request
    # counter) always do: a saturated server cannot serve more, which is when they matter.
    Cause(OVERLOAD, (Evidence("arrivals", ANALYSIS_ARRIVALS_CHANGE, gate="served"),
                     Evidence("prompt_len", ANALYSIS_RATE_CHANGE), Evidence("output_len", ANALYSIS_RATE_CHANGE),
                     Evidence("cache_hit", ANALYSIS_CACHE_HIT_DROP, absolute=True)), LEVEL_ONSET,
          ("running", "queued", "token_usage", "throughput", "finished", "power", "utilization", "temperature",
           "kv_per_running"),
          (Moves(DECODE_SLOWDOWN, "batch", "a decode step reads the weights once and each running request's KV: a "
                 "bigger batch is a slower step"),
           Moves(PREFILL_SLOWDOWN, "work", "chunked prefill shares its token budget with the prefills beside it"),
           Moves(KV_TRANSFER_SLOWDOWN, "work", "more transfers share the same links")),
          "Little's law: requests in the system = arrivals x time in it; demand read from SGLang's request and "
          "token counters"),
    Cause(KV_TRANSFER_SLOWDOWN, (Evidence("kv_transfer_latency", ANALYSIS_PREFILL_CHANGE),), LEVEL_ONSET,
          ("queued", "running"),
          (Moves(PREFILL_SLOWDOWN, "bounded", "a PD prefill waits for its transfer before it frees its slot"),),
          "SGLang's PD transfer latency (sglang:kv_transfer_latency_ms)"),
    Cause(PREFILL_SLOWDOWN, (Evidence("prefill_time", ANALYSIS_PREFILL_CHANGE),), LEVEL_ONSET,
          ("queued", "kv_per_running"),
          (Moves(DECODE_SLOWDOWN, "bounded", "on a mixed server prefill chunks run between decode steps"),),
          "TTFT less the queue wait (mixed), less the other PD stages (PD), or the prefill_forward stage"),
    # ITL is each request's decode speed measured per token; throughput over the running gauge is two noisy samples
    # of a swinging batch (a busy server's ratio swings 1.3x on its own): read only without ITL ("fallback").
    Cause(DECODE_SLOWDOWN, (Evidence("itl_mean", ANALYSIS_RATE_CHANGE, gate="paced"),
                            Evidence("decode_speed", ANALYSIS_RATE_CHANGE, gate="fallback")), LEVEL_ONSET,
          ("running", "token_usage", "queued"), (),
          "ITL from SGLang's inter-token histogram; throughput over running requests where ITL is not read"),
)

BY_MECHANISM: Final = {c.mechanism: c for c in CAUSES}
# Faults: mechanisms whose own events a healthy deployment never shows (a target down, a restart, a failed
# transfer, a chip not OK, a gateway error). A stretch that holds one is not the deployment's healthy state.
FAULTS: Final = frozenset({SERVER_DOWN, RESTART, KV_TRANSFER_FAILURE, ACCELERATOR_UNHEALTHY, GATEWAY_ERRORS})
FAULT_SIGNALS: Final = frozenset(e.key for c in CAUSES if c.mechanism in FAULTS for e in c.own)
# The signals that count aborted requests (SGLang's abort counter, and the aborts read as abandoned): a cause whose
# row has none of them explains no abort.
ABORT_SIGNALS: Final = frozenset({"aborted", "gave_up"})


def thresholds() -> dict[str, tuple[float, bool]]:
    """Signal key -> (threshold, absolute) over every mechanism's own signals."""
    return {e.key: (e.threshold, e.absolute) for c in CAUSES for e in c.own}


THRESHOLDS: Final = thresholds()  # the table is fixed: read once, not on every test of every candidate
