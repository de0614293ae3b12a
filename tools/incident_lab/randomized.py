"""The randomized incident lab (issue #32 item 4): verdicts measured on shapes nobody tuned the analysis on.

The fixed grid (tools/incident_lab/grid.py) injects every incident at 240 s for 120 s, pairs in one order 60 s
apart, on one workload analysed over one range: the analysis was tuned on exactly that. This lab **draws** each
run instead, from a `random.Random(seed)` and nothing else, so a seed always draws the same runs and the seeds
split into the grid's tuned (even) and held-out (odd) halves (`grid.split_of`). Per seed, `runs_per_seed` runs,
each one deployment:

1. a workload (WORKLOADS: the lab's Llama server at 8, 16 and 32 slots, a long-prompt one, a short-prompt /
   long-answer one, the PD pair and the speculative server; targets at edges of SGLang's default buckets), whose
   capacity is probed at lab start (healthy, overloaded, requests/s served; `probe`, cached per process);
2. a load: a share of that capacity, uniform in LOAD_SHARES;
3. a scenario: healthy (P_HEALTHY), one incident (P_SINGLE) or an ordered pair of two kinds that can happen
   together on that workload (`pairs`), both orders equally likely;
4. a shape per incident: onset, duration, ramp (a step or a linear ramp, for the kinds where one makes sense),
   and a magnitude drawn log-uniform between the grid's weak and strong cells of that kind, with its band
   (weak / medium / strong: thirds of that log range); a pair's second incident starts a random gap after the
   first;
5. the range a paged user would analyse: T1 a random lead before the first onset, T2 after the last onset,
   either once it is over or while it still runs. The baseline is the analyzer's default (the span before T1 of
   the same length; it may start before the data, as in the fixed lab).

Runs of one seed are grouped ~CHUNK to an emulator (one lockstep run each, until the latest T2 of its runs, a
process per task, `--jobs` at once), each analysed from the sidecar's recording over its own range. A deployment's
random stream is the seed and its name (monitor/emulate/engine.py), so grouping changes no verdict.

Judging is the grid's: one incident, its mechanism (or an accepted alternative) and never a consequence called the
cause; healthy, "no incident"; a pair, both named in the first line ("both named") and, where the onsets are at
least ORDER_GAP apart, the leading one first ("leading first"), each recorded apart. The section (`section`) gives
the issue's goals on each half; the held-out half only as totals, never one of its runs.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

from monitor.analyze import diagnose as m
from monitor.analyze.recording import load_recording
from monitor.analyze.report import Report, analyze
from monitor.config import Config, Deployment
from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.incidents import HEAT_PER_SLOWDOWN
from monitor.emulate.model import decode_slots
from tools.incident_lab import grid
from tools.incident_lab.confusion import DOC, consequence_as_cause
from tools.incident_lab.doc_markers import read_between, write_between
from tools.incident_lab.lockstep import LabRun, run_lab
from tools.incident_lab.scenarios import EPOCH, LLAMA, PD, SPEC, WINDOW, Scenario, lab_config

BANDS: Final = grid.MAGNITUDES  # weak | medium | strong
HEALTHY: Final = "healthy"  # the scenario of a run with nothing injected

# --- workloads ---------------------------------------------------------------------------------------------------

MIXED_KINDS: Final = ("tpot_regression", "ttft_spike", "queue_buildup", "restart", "down", "npu_overheat",
                      "hbm_full", "client_timeout")


@dataclass(frozen=True)
class Workload:
    name: str
    template: dict[str, Any]  # a deployment of the lab's config, less its name
    kinds: tuple[str, ...]  # KINDS keys that can be injected into it
    note: str


def _mixed(input_tokens: int, output_tokens: int, slots: int, ttft: float, tpot: float) -> dict[str, Any]:
    """A mixed Llama server. The emulator puts a request's median TPOT at 66 % of the target and its prefill at 45 %
    of the TTFT target (monitor/emulate/model.py); the recipe baseline says the same."""
    return {**LLAMA, "input_tokens": input_tokens, "output_tokens": output_tokens,
            "ttft_target_seconds": ttft, "tpot_target_seconds": tpot,
            "baseline": {"tpot_mean_seconds": round(0.69 * tpot, 4), "ttft_mean_seconds": round(0.45 * ttft, 3)},
            "launch": {"max_running_requests": slots}}


# Targets sit on edges of SGLang's default buckets (TTFT 1 / 2 / 4 s, TPOT 60 / 80 / 100 ms: monitor/conventions/
# slis.py), so a bucket count says exactly how many requests met them. PD has no ttft_spike of its own: a prefill
# slowdown on a PD pair is on its prefill servers (the decode side prefills nothing).
WORKLOADS: Final[dict[str, Workload]] = {w.name: w for w in (
    Workload("llama", LLAMA, MIXED_KINDS, "the lab's server: 1000-token prompts, 64-token answers, 16 slots"),
    Workload("llama-8", {**LLAMA, "launch": {"max_running_requests": 8}}, MIXED_KINDS, "the same, 8 slots"),
    Workload("llama-32", {**LLAMA, "launch": {"max_running_requests": 32}}, MIXED_KINDS, "the same, 32 slots"),
    Workload("long-prompt", _mixed(3000, 200, 32, 4.0, 0.1), MIXED_KINDS,
             "3000-token prompts, 200-token answers, 32 slots"),
    # Its KV pool (--max-total-tokens) holds 11 of its 24 slots' full answers, as on a server whose
    # max_running_requests was set above what its memory holds: SGLang admits by tokens and retracts in healthy
    # long decodes (monitor/emulate/kv_budget.py).
    Workload("long-answer", {**_mixed(200, 512, 24, 1.0, 0.06),
                             "launch": {"max_running_requests": 24, "max_total_tokens": 8_000}}, MIXED_KINDS,
             "200-token prompts, 512-token answers, 24 slots, a KV pool for 11 full answers"),
    Workload("pd", PD, (*(k for k in MIXED_KINDS if k != "ttft_spike"), "ttft_spike/prefill", "kv_transfer_failure"),
             "the lab's PD pair: 8 prefill slots, 16 decode slots"),
    Workload("spec", SPEC, (*MIXED_KINDS, "spec_accept_drop"), "the lab's server with EAGLE, 4 draft tokens"),
)}
WORKLOAD_NAMES: Final = tuple(WORKLOADS)


def _probe_deployment(workload: str, rate: float) -> EmulatedDeployment:
    cfg = lab_config((Scenario("probe", "none", m.HEALTHY, WORKLOADS[workload].template, None, rate=rate),))
    return EmulatedDeployment(cfg.deployments[0], seed=0, rate=rate)


@cache
def nominal_e2e(workload: str) -> float:
    """Seconds a request takes with nothing else going on (the emulator's nominal prefill and decode)."""
    model = _probe_deployment(workload, 1.0).model
    return float(model.ttft_nominal + model.expected_decode_seconds())


# The capacity probe, as grid.capacity: the deployment alone and healthy, offered OVERLOAD x what its slots could
# serve without batching costs (so well past what it can), seeds PROBE_SEEDS, requests finished from PROBE_SETTLE
# to PROBE_UNTIL emulated seconds. A probe takes well under a second.
OVERLOAD: Final = 2.0
PROBE_SEEDS: Final = (0, 1, 2)
PROBE_SETTLE: Final = 120.0
PROBE_UNTIL: Final = 480.0


def probe(workload: str) -> float:
    """Requests/s the workload serves at saturation."""
    dep0 = _probe_deployment(workload, 1.0)
    slots = sum(sum(decode_slots(s)) for s in dep0.layout.servers if s.role in ("server", "decode"))
    offered = OVERLOAD * slots / nominal_e2e(workload)
    served = 0.0
    for seed in PROBE_SEEDS:
        dep = EmulatedDeployment(dep0.deployment, seed=seed, rate=offered)
        dep.advance_to(PROBE_SETTLE)
        f0 = dep.finished
        dep.advance_to(PROBE_UNTIL)
        served += (dep.finished - f0) / (PROBE_UNTIL - PROBE_SETTLE)
    return round(served / len(PROBE_SEEDS), 3)


_CAPACITY: dict[str, float] = {}  # per process run: the probe is deterministic


def capacities(workloads: Iterable[str] = WORKLOAD_NAMES, *, reprobe: bool = False,
               pool: ProcessPoolExecutor | None = None) -> dict[str, float]:
    """Each workload's capacity, probed once per process (in `pool` when given); `reprobe` probes again."""
    names = list(dict.fromkeys(workloads))
    todo = [w for w in names if reprobe or w not in _CAPACITY]
    _CAPACITY.update(zip(todo, pool.map(probe, todo) if pool else map(probe, todo)))
    return {w: _CAPACITY[w] for w in names}


# --- incident kinds ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kind:
    """An incident kind as the lab draws it: what is injected, what the verdict must name, its magnitude range."""

    key: str  # the emulator's kind, `/role` when it hits one role
    kind: str
    role: str
    mechanism: str
    weak: float  # the grid's weak and strong cells: the range a magnitude is drawn from (log-uniform)
    strong: float
    ramps: bool  # a ramp makes sense (the kind grows in: a leak, a rollout, a climb)


def _grid_range(scenario: str) -> tuple[float, float, str]:
    """(weak, strong, expected mechanism) of a grid scenario: the factor, or for down / restart the seconds down."""
    cells = {c.magnitude: c for c in grid.CELLS if c.scenario == scenario}
    inj = {mag: cells[mag].injects[0] for mag in ("weak", "strong")}
    val = {mag: i.factor if i.factor is not None else i.duration for mag, i in inj.items()}
    return float(val["weak"]), float(val["strong"]), cells["weak"].expect[0]


def _kind(key: str, scenario: str, ramps: bool = False) -> Kind:
    kind, _, role = key.partition("/")
    weak, strong, mech = _grid_range(scenario)
    return Kind(key, kind, role, mech, weak, strong, ramps)


# npu_overheat does not ramp: its heating is already first order (THERMAL_TAU) and the emulator ignores a ramp on it.
KINDS: Final[dict[str, Kind]] = {k.key: k for k in (
    _kind("tpot_regression", "tpot-regression", ramps=True),
    _kind("ttft_spike", "ttft-spike", ramps=True),
    _kind("queue_buildup", "queue-buildup", ramps=True),
    _kind("restart", "restart"),
    _kind("down", "down"),
    _kind("npu_overheat", "npu-overheat"),
    _kind("hbm_full", "hbm-full"),
    _kind("client_timeout", "client-timeout"),
    _kind("ttft_spike/prefill", "pd-prefill-slow", ramps=True),
    _kind("kv_transfer_failure", "kv-transfer-failure"),
    _kind("spec_accept_drop", "spec-accept-drop"),
)}
# Pairs left out, as no signal could tell them apart (judging them would grade the emulator, not the analysis):
# - two of the same kind;
# - npu_overheat with tpot_regression: the throttle *is* a decode slowdown, and nothing splits the two parts;
# - down with restart: two outages that merge into one (a restart that is down a while reads as server_down).
# `down` with anything else is drawn so that the other incident is in effect DOWN_VISIBLE s outside the outage
# (`_shape_pair`), never hidden behind it.
EXCLUDED_PAIRS: Final = frozenset({frozenset({"npu_overheat", "tpot_regression"}), frozenset({"down", "restart"})})


def pairs(workload: str) -> tuple[tuple[str, str], ...]:
    """The unordered pairs of kinds that can happen together on the workload (sorted: the draw is reproducible)."""
    return tuple((a, b) for a, b in itertools.combinations(sorted(WORKLOADS[workload].kinds), 2)
                 if frozenset({a, b}) not in EXCLUDED_PAIRS)


# Restart: seconds down while it restarts, uniform in [0, RESTART_DOWN] (an instant restart, down 0 s, a quarter of
# the time); bands are thirds of that linear range (the grid's instant / 10 s / 30 s are its weak / medium / strong).
RESTART_DOWN: Final = 30.0
RESTART_INSTANT: Final = 0.25
# Client timeout: the grid's 2.5 / 2 / 1 s were set against the lab's Llama answers (SGLang aborts the request 2 s
# after the client hangs up, DISCONNECT_ABORT_SECONDS: so at 4.5 / 4 / 3 s, against answers of ~3.8 s). The share of
# answers cut is what the band means, so the abort time is drawn relative to the workload's nominal answer time.
ABORT_AFTER: Final = 2.0


def _abort_share(timeout: float, workload: str) -> float:
    return (timeout + ABORT_AFTER) / nominal_e2e(workload)


def _position(key: str, magnitude: float, workload: str) -> float:
    """Where the magnitude sits between the kind's weak (0) and strong (1) ends."""
    k = KINDS[key]
    if k.kind == "restart":
        return magnitude / RESTART_DOWN
    lo, hi, val = k.weak, k.strong, magnitude
    if k.kind == "client_timeout":  # the abort time as a share of the answer time: the grid's on the lab's Llama
        lo, hi, val = _abort_share(lo, "llama"), _abort_share(hi, "llama"), _abort_share(val, workload)
    return (math.log(val) - math.log(lo)) / (math.log(hi) - math.log(lo))


def band_of(key: str, magnitude: float, workload: str) -> str:
    """weak | medium | strong: the third of the kind's (log) range the magnitude falls in."""
    return BANDS[min(2, max(0, int(3 * _position(key, magnitude, workload))))]


def _sig(x: float, digits: int = 3) -> float:
    """Rounded to `digits` significant figures: readable specs, and the band computed from what is injected."""
    return float(f"{x:.{digits}g}")


def draw_magnitude(rng: random.Random, key: str, workload: str) -> tuple[float, str]:
    """(magnitude on the kind's own scale, band)."""
    k = KINDS[key]
    if k.kind == "restart":
        mag = 0.0 if rng.random() < RESTART_INSTANT else float(round(rng.uniform(1.0, RESTART_DOWN)))
    else:
        lo, hi = k.weak, k.strong
        if k.kind == "client_timeout":
            lo, hi = _abort_share(lo, "llama"), _abort_share(hi, "llama")
        val = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        if k.kind == "client_timeout":  # the timeout that aborts at that share of this workload's answer time
            mag = round(max(0.5, val * nominal_e2e(workload) - ABORT_AFTER), 2)
        elif k.kind == "down":
            mag = float(round(val))
        else:
            mag = _sig(val)
    return mag, band_of(key, mag, workload)


def scale(key: str, magnitude: float) -> str:
    """The magnitude as the kind reads it."""
    kind = KINDS[key].kind
    if kind in ("tpot_regression", "ttft_spike"):
        return f"x{magnitude:g}"
    if kind == "queue_buildup":
        return f"arrivals x{magnitude:g}"
    if kind == "restart":
        return f"down {magnitude:g} s" if magnitude else "instant"
    if kind == "down":
        return f"{magnitude:g} s"
    if kind == "npu_overheat":
        return f"+{HEAT_PER_SLOWDOWN * (magnitude - 1):.0f} °C"
    if kind == "hbm_full":
        return f"{magnitude:.0%} of KV left"
    if kind == "kv_transfer_failure":
        return f"{magnitude:.0%} of transfers fail"
    if kind == "spec_accept_drop":
        return f"accept /{magnitude:g}"
    return f"give up at {magnitude:g} s"


# --- shapes ------------------------------------------------------------------------------------------------------

P_HEALTHY, P_SINGLE = 0.15, 0.50  # the rest: pairs
LOAD_SHARES: Final = (0.25, 0.9)  # of the workload's capacity
ONSET: Final = (180.0, 330.0)  # the first incident's onset, emulated seconds
DURATION: Final = (90.0, 300.0)
RAMP: Final = (30.0, 200.0)  # a ramped incident's seconds to full strength (capped at its duration)
P_RAMP: Final = 0.5  # of the kinds that can ramp
GAP: Final = (20.0, 180.0)  # a pair's second onset after the first
OVERLAP: Final = 60.0  # a pair's first incident still runs this long after the second begins (they happen together)
DOWN_VISIBLE: Final = 120.0  # paired with `down`, the other incident is in effect this long outside the outage
LEAD: Final = (30.0, 120.0)  # T1 before the first onset
MIN_DATA: Final = 120.0  # T1 at least this late: the emulator starts empty, and a baseline needs some data
P_ONGOING: Final = 0.3  # T2 while the last incident still runs (else after its end, plus TAIL)
TAIL: Final = (0.0, 60.0)
MIN_AFTER_ONSET: Final = WINDOW  # T2 at least a window after the last onset
ORDER_GAP: Final = 60.0  # "leading first" is judged only when the onsets are at least this far apart


@dataclass(frozen=True)
class Drawn:
    """One incident of a run, as drawn."""

    key: str  # KINDS key
    magnitude: float  # on the kind's own scale (a factor; seconds down for down and restart; a timeout in s)
    band: str
    start: float
    duration: float  # seconds in effect (down / restart: the outage; an instant restart 0)
    ramp: float = 0.0

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def inject(self) -> grid.Inject:
        k = KINDS[self.key]
        factor = None if k.kind in ("down", "restart") else self.magnitude
        return grid.Inject(k.kind, factor, k.role, self.start, self.duration, self.ramp)

    def expected(self) -> tuple[str, ...]:
        """The mechanisms that name it (a restart that is down a while: server_down too, as in the grid)."""
        k = KINDS[self.key]
        return (k.mechanism, m.SERVER_DOWN) if k.kind == "restart" and self.duration else (k.mechanism,)


@dataclass(frozen=True)
class Draw:
    """One run: a deployment of a workload at a load, its incidents and the range it is analysed over."""

    seed: int
    index: int
    workload: str
    share: float  # of the workload's capacity
    incidents: tuple[Drawn, ...]  # in onset order
    t1: float
    t2: float

    @property
    def name(self) -> str:
        return f"r{self.seed}-{self.index:03d}-{self.workload}"

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(i.key for i in self.incidents)

    @property
    def scenario(self) -> str:
        return " → ".join(self.kinds) or HEALTHY

    @property
    def gap(self) -> float | None:
        return self.incidents[1].start - self.incidents[0].start if len(self.incidents) > 1 else None

    @property
    def expected(self) -> tuple[tuple[str, ...], ...]:
        return tuple(i.expected() for i in self.incidents)

    @property
    def until(self) -> float:
        return self.t2


def _shape(rng: random.Random, key: str, workload: str, start: float) -> Drawn:
    mag, band = draw_magnitude(rng, key, workload)
    k = KINDS[key]
    if k.kind in ("down", "restart"):
        return Drawn(key, mag, band, start, mag)
    duration = float(round(rng.uniform(*DURATION)))
    ramp = float(round(min(rng.uniform(*RAMP), duration))) if k.ramps and rng.random() < P_RAMP else 0.0
    return Drawn(key, mag, band, start, duration, ramp)


def _with_end(d: Drawn, end: float) -> Drawn:
    return Drawn(d.key, d.magnitude, d.band, d.start, float(round(end - d.start)), min(d.ramp, end - d.start))


def _shape_pair(first: Drawn, second: Drawn) -> tuple[Drawn, Drawn]:
    """A pair happens together: the first incident (unless an outage or a restart, which are events) runs at least
    OVERLAP past the second's onset; beside `down`, the other is in effect DOWN_VISIBLE outside the outage."""
    if KINDS[first.key].kind not in ("down", "restart") and first.end < second.start + OVERLAP:
        first = _with_end(first, second.start + OVERLAP)
    for down, other in ((first, second), (second, first)):
        if KINDS[down.key].kind != "down":
            continue
        before = max(0.0, min(other.end, down.start) - other.start)
        after = max(0.0, other.end - down.end)
        if before + after < DOWN_VISIBLE:
            other = _with_end(other, down.end + DOWN_VISIBLE - before)
        first, second = (down, other) if down is first else (other, down)
    return first, second


def draw_run(rng: random.Random, seed: int, index: int) -> Draw:
    workload = rng.choice(WORKLOAD_NAMES)
    share = round(rng.uniform(*LOAD_SHARES), 3)
    u = rng.random()
    kinds: tuple[str, ...]
    if u < P_HEALTHY:
        kinds = ()
    elif u < P_HEALTHY + P_SINGLE:
        kinds = (rng.choice(WORKLOADS[workload].kinds),)
    else:
        a, b = rng.choice(pairs(workload))
        kinds = (a, b) if rng.random() < 0.5 else (b, a)
    onset = float(round(rng.uniform(*ONSET)))
    incidents: tuple[Drawn, ...]
    if not kinds:  # the range a false page would have: a phantom incident's shape
        incidents, last, end = (), onset, onset + round(rng.uniform(*DURATION))
    else:
        first = _shape(rng, kinds[0], workload, onset)
        if len(kinds) == 1:
            incidents = (first,)
        else:
            second = _shape(rng, kinds[1], workload, onset + round(rng.uniform(*GAP)))
            incidents = _shape_pair(first, second)
        last, end = max(i.start for i in incidents), max(i.end for i in incidents)
    t1 = onset - round(rng.uniform(LEAD[0], min(LEAD[1], onset - MIN_DATA)))
    if rng.random() < P_ONGOING and end - last > MIN_AFTER_ONSET + 30:
        t2 = last + rng.uniform(MIN_AFTER_ONSET, end - last)
    else:
        t2 = max(end + rng.uniform(*TAIL), last + MIN_AFTER_ONSET)
    return Draw(seed, index, workload, share, incidents, float(t1), float(round(t2)))


def draw_seed(seed: int, runs: int) -> list[Draw]:
    """The seed's runs: the same for the same seed, from nothing else."""
    rng = random.Random(seed)
    return [draw_run(rng, seed, i) for i in range(runs)]


# --- running and judging -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Deploy:
    """A run as run_lab wants a scenario: name, template, rate and incident specs."""

    draw: Draw
    rate: float

    @property
    def name(self) -> str:
        return self.draw.name

    @property
    def template(self) -> dict[str, Any]:
        return WORKLOADS[self.draw.workload].template

    @property
    def specs(self) -> tuple[str, ...]:
        return tuple(i.inject.spec(self.name) for i in self.draw.incidents)


@dataclass(frozen=True)
class Result:
    """One run, drawn and analysed."""

    seed: int
    split: str
    index: int
    workload: str
    share: float  # load: share of the workload's capacity
    rate: float  # requests/s offered
    kinds: tuple[str, ...]  # in onset order
    magnitudes: tuple[float, ...]
    bands: tuple[str, ...]
    starts: tuple[float, ...]
    durations: tuple[float, ...]
    ramps: tuple[float, ...]
    gap: float | None  # a pair's second onset after the first
    t1: float
    t2: float
    expected: tuple[tuple[str, ...], ...]  # per incident, the mechanisms that name it
    mechanism: str
    named: tuple[str, ...]  # the verdict's mechanism, then every other mechanism its first line names
    moved: tuple[str, ...]  # every mechanism whose evidence moved, the cause first
    confidence: str
    right: bool
    both_named: bool | None  # a pair: both named in the first line (else None)
    lead_first: bool | None  # a pair whose onsets are >= ORDER_GAP apart: the leading one named first (else None)
    headline: str
    consequence_as_cause: str | None = None
    user: tuple[str, ...] = ()  # the mechanism `slo-monitor analyze` names over each of USER_RANGES ((): not read)

    @property
    def scenario(self) -> str:
        return " → ".join(self.kinds) or HEALTHY

    @property
    def order(self) -> str:
        """How a pair was ordered, its kinds in onset order (`a → b`); '' for one incident or none."""
        return self.scenario if self.pair else ""

    @property
    def unordered(self) -> str:
        return " + ".join(sorted(self.kinds))

    @property
    def pair(self) -> bool:
        return len(self.kinds) == 2

    @property
    def single(self) -> bool:
        return len(self.kinds) == 1

    @property
    def band(self) -> str:
        """A single incident's band; a pair's weakest ("—" when healthy)."""
        return min(self.bands, key=BANDS.index) if self.bands else "—"

    @property
    def honest(self) -> bool:
        """Right, or an honest "cannot say" (as grid.Result.honest)."""
        return self.right or self.mechanism == m.UNEXPLAINED or self.confidence == "low"


def judge_pair(expected: Sequence[Sequence[str]], gap: float, named: Sequence[str],
               blamed: str | None = None) -> tuple[bool, bool, bool | None]:
    """(right, both named, leading first). Both named: each incident's mechanism (or its alternative) in the first
    line; leading first, judged only when the onsets are ORDER_GAP or more apart (None otherwise): the verdict's own
    mechanism is the leading incident's. Right: both named, not out of order, and no consequence called the cause."""
    both = all(any(x in named for x in exp) for exp in expected)
    lead = bool(named) and named[0] in expected[0] if gap >= ORDER_GAP else None
    return both and lead is not False and blamed is None, both, lead


def make_result(draw: Draw, rate: float, mechanism: str, named: Sequence[str], moved: Sequence[str],
                confidence: str, headline: str, blamed: str | None, right: bool | None = None,
                user: Sequence[str] = ()) -> Result:
    """A run's result from its verdict. `right` for a healthy run or one incident comes from grid.judge (`result`);
    a pair is judged here, by `judge_pair`."""
    both = lead = None
    if len(draw.incidents) == 2:
        assert draw.gap is not None
        right, both, lead = judge_pair(draw.expected, draw.gap, named, blamed)
    assert right is not None
    inc = draw.incidents
    return Result(draw.seed, grid.split_of(draw.seed), draw.index, draw.workload, draw.share, rate, draw.kinds,
                  tuple(i.magnitude for i in inc), tuple(i.band for i in inc), tuple(i.start for i in inc),
                  tuple(i.duration for i in inc), tuple(i.ramp for i in inc), draw.gap, draw.t1, draw.t2,
                  draw.expected, mechanism, tuple(named), tuple(moved), confidence, right, both, lead, headline,
                  blamed, tuple(user))


def _cell(draw: Draw) -> grid.Cell:
    """A healthy run or one incident as a grid cell, for grid.judge."""
    if not draw.incidents:
        return grid.CELLS[0]  # healthy: "no incident" (healthy or steady_breach)
    (inc,) = draw.incidents
    exp = inc.expected()
    return grid.Cell(inc.key, inc.band, scale(inc.key, inc.magnitude), draw.workload, (inc.inject,), exp[:1], exp[1:])


def analyse(run: LabRun, draw: Draw) -> Report:
    """The run's report from the recording over its own range, the analyzer's default baseline (the span before T1
    of the range's length), window WINDOW (as confusion.report, over T1..T2 of the draw)."""
    t1, t2 = EPOCH + draw.t1, EPOCH + draw.t2
    start = t1 - (t2 - t1) - WINDOW
    ds = load_recording(str(run.recording), draw.name, start - run.interval, t2,
                        deployment_config=run.deployment(draw.name), progress=lambda _: None)
    return analyze(ds, t1, t2, WINDOW)


# The ranges a paged user types (#32 item 6), read through the CLI as on-call would at the draw's T2: `slo-monitor
# analyze --recording … -c … -d … --from now-1h --to now`, no other flag (`--now` stands for the clock).
USER_RANGES: Final = ("now-1h", "now-30m")


def user_path(run: LabRun, draw: Draw, config: Path) -> tuple[str, ...]:
    """The mechanism the CLI names over each of USER_RANGES, from the run's recording and `config` (its file)."""
    from monitor.cli import build_parser
    from monitor.commands.analyze import build_report

    out = []
    for frm in USER_RANGES:
        args = build_parser().parse_args([
            "analyze", "--recording", str(run.recording), "-c", str(config), "-d", draw.name, "--from", frm,
            "--to", "now", "--now", f"{EPOCH + draw.t2:.0f}"])
        out.append(build_report(args, progress=lambda _: None).verdict.mechanism)
    return tuple(out)


def write_config(run: LabRun, directory: Path) -> Path:
    """The run's config as the file the CLI reads."""
    path = directory / "lab-config.json"
    path.write_text(json.dumps(run.config.model_dump(mode="json", by_alias=True, exclude_unset=True)))
    return path


def result(draw: Draw, rate: float, rep: Report, user: Sequence[str] = ()) -> Result:
    v = rep.verdict
    moved = tuple(dict.fromkeys(mech for mech, _ in v.candidates))
    right = grid.judge(_cell(draw), rep)[0] if len(draw.incidents) < 2 else None
    return make_result(draw, rate, v.mechanism, grid.named_in_first_line(rep), moved, v.confidence, v.headline,
                       consequence_as_cause(rep), right, user)


CHUNK: Final = grid.CHUNK  # deployments per emulator (grid.CHUNK says why not more)


@dataclass(frozen=True)
class TaskResult:
    seed: int
    results: tuple[Result, ...]
    seconds: float
    slowest_scrape: float
    emulated: float  # seconds emulated (the latest T2 of its runs)


def run_task(seed: int, deploys: Sequence[Deploy], tmp: str | None = None, keep: str | None = None) -> TaskResult:
    """Runs of one seed in one emulator, in lockstep with the sidecar, until the latest T2; each analysed from the
    recording over its own range. `keep`: a directory to keep the recording in, for `reanalyse`."""
    began = time.monotonic()
    until = max(d.draw.until for d in deploys)
    with tempfile.TemporaryDirectory(prefix=f"incident-random-{seed}-", dir=tmp) as work:
        run = run_lab(Path(work), tuple(deploys), until=until, seed=seed, capture=False)  # type: ignore[arg-type]
        cfg = write_config(run, Path(work))
        out = tuple(result(d.draw, d.rate, analyse(run, d.draw), user_path(run, d.draw, cfg)) for d in deploys)
        if keep is not None:
            _keep(Path(keep), run, seed, deploys, until)
    return TaskResult(seed, out, time.monotonic() - began, run.slowest_scrape, until)


@dataclass
class RandomLab:
    results: list[Result]
    seeds: tuple[int, ...]
    runs_per_seed: int
    jobs: int
    seconds: float  # wall time of the whole lab
    task_seconds: list[float]
    slowest_scrape: float
    capacity: dict[str, float]  # requests/s each workload served at saturation
    emulated: float = 0.0  # emulated seconds, summed over every deployment


RUNS_PER_SEED: Final = 24
# The results the section of docs/analysis.md is rendered from (written only by a whole run of the lab).
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "analysis-random.json.gz"


def tasks(seeds: Sequence[int], runs_per_seed: int, capacity: dict[str, float],
          chunk: int = CHUNK) -> list[tuple[int, tuple[Deploy, ...]]]:
    """Every seed's runs, ~`chunk` to a task (one seed a task: its emulator's seed), the runs of similar length
    together (a task emulates until its latest T2), the longest tasks first (the short ones fill the end)."""
    out = []
    for seed in seeds:
        draws = sorted(draw_seed(seed, runs_per_seed), key=lambda d: (d.until, d.index))
        n = max(1, math.ceil(len(draws) / chunk))
        size = math.ceil(len(draws) / n)  # even chunks: 24 runs are two of 12, 25 three of 9
        for i in range(0, len(draws), size):
            out.append((seed, tuple(Deploy(d, round(d.share * capacity[d.workload], 3)) for d in draws[i:i + size])))
    return sorted(out, key=lambda t: (-max(d.draw.until for d in t[1]), t[0]))


def run_random(seeds: Sequence[int], *, runs_per_seed: int = RUNS_PER_SEED, jobs: int = 2, chunk: int = CHUNK,
               reprobe: bool = False, keep: Path | None = None,
               progress: Callable[[str], None] = lambda _: None) -> RandomLab:
    """Probe every workload's capacity, then run every seed's draws, `jobs` processes at once."""
    for s in seeds:
        grid.split_of(s)
    if keep is not None and keep.exists() and any(keep.glob("task-*")):
        # Another lab's tasks beside these would be reanalysed with them (other chunks: runs counted twice).
        raise ValueError(f"{keep} already holds kept tasks: keep into an empty directory")
    began = time.monotonic()
    results: list[Result] = []
    secs: list[float] = []
    slowest = emulated = 0.0
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        cap = capacities(reprobe=reprobe, pool=pool)
        progress("capacity (req/s served, overloaded): " + ", ".join(f"{w} {c:g}" for w, c in cap.items())
                 + f" ({time.monotonic() - began:.0f} s)")
        todo = tasks(seeds, runs_per_seed, cap, chunk)
        futures = [pool.submit(run_task, s, deploys, None, None if keep is None else str(keep))
                   for s, deploys in todo]
        for done, fut in enumerate(as_completed(futures), 1):
            tr = fut.result()
            results += tr.results
            secs.append(tr.seconds)
            slowest = max(slowest, tr.slowest_scrape)
            emulated += tr.emulated * len(tr.results)
            progress(f"seed {tr.seed}: {sum(r.right for r in tr.results)}/{len(tr.results)} right in "
                     f"{tr.seconds:.0f} s (until {tr.emulated:.0f} s; slowest scrape round {tr.slowest_scrape:.1f} s);"
                     f" {done}/{len(todo)} tasks, {time.monotonic() - began:.0f} s")
    results.sort(key=lambda r: (r.seed, r.index))
    return RandomLab(results, tuple(seeds), runs_per_seed, jobs, time.monotonic() - began, secs, slowest, cap,
                     emulated)


# --- kept recordings: the analysis rerun without the emulation (minutes instead of the lab's hour of CPU) ----------


@dataclass(frozen=True)
class KeptRun:
    """What `analyse` reads of a LabRun, from a kept task."""

    recording: Path
    interval: float
    config: Config

    def deployment(self, name: str) -> Deployment:
        return self.config.deployment(name)


def _keep(keep: Path, run: LabRun, seed: int, deploys: Sequence[Deploy], until: float) -> None:
    keep.mkdir(parents=True, exist_ok=True)
    stem = f"task-{seed}-{min(d.draw.index for d in deploys)}"
    shutil.copyfile(run.recording, keep / f"{stem}.sqlite")
    meta = {"seed": seed, "runs_per_seed": max(d.draw.index for d in deploys) + 1,
            "runs": [[d.draw.index, d.rate] for d in deploys], "interval": run.interval,
            "until": until, "config": run.config.model_dump(mode="json", by_alias=True, exclude_unset=True)}
    (keep / f"{stem}.json").write_text(json.dumps(meta))


def _reanalyse_task(meta_path: str, runs_per_seed: int) -> TaskResult:
    began = time.monotonic()
    path = Path(meta_path)
    meta = json.loads(path.read_text())
    run = KeptRun(path.with_suffix(".sqlite"), meta["interval"], Config.model_validate(meta["config"]))
    # The draws are a prefix of the seed's stream: as many as the task's own runs need, whatever the lab's size.
    draws = {d.index: d for d in draw_seed(meta["seed"], max(runs_per_seed, meta.get("runs_per_seed", 0)))}
    with tempfile.TemporaryDirectory(prefix="incident-reanalyse-") as work:
        cfg = write_config(run, Path(work))  # type: ignore[arg-type]
        out = tuple(result(draws[i], rate, analyse(run, draws[i]), user_path(run, draws[i], cfg))  # type: ignore[arg-type]
                    for i, rate in meta["runs"])
    return TaskResult(meta["seed"], out, time.monotonic() - began, 0.0, meta["until"])


def reanalyse(keep: Path, *, runs_per_seed: int = RUNS_PER_SEED, jobs: int = 2,
              progress: Callable[[str], None] = lambda _: None) -> RandomLab:
    """The lab's results from recordings kept by `run_random(keep=...)`, analysed by the analyzer as it is now (the
    draws come from the seeds again; the emulation is not rerun)."""
    began = time.monotonic()
    metas = sorted(keep.glob("task-*.json"))
    results: list[Result] = []
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for tr in pool.map(_reanalyse_task, map(str, metas), itertools.repeat(runs_per_seed)):
            results += tr.results
    results.sort(key=lambda r: (r.seed, r.index))
    seeds = tuple(sorted({r.seed for r in results}))
    progress(f"reanalysed {len(results)} runs of {len(metas)} tasks in {time.monotonic() - began:.0f} s")
    return RandomLab(results, seeds, runs_per_seed, jobs, time.monotonic() - began, [], 0.0, {}, 0.0)


_TUPLES: Final = ("kinds", "magnitudes", "bands", "starts", "durations", "ramps", "named", "moved", "user")


def save(lab: RandomLab, path: Path) -> None:
    """The lab's results as JSON, gzipped when `path` ends in .gz (mtime 0: the same results, the same bytes);
    written whole or not at all."""
    raw = (json.dumps(asdict(lab), indent=None, separators=(",", ":")) + "\n").encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(gzip.compress(raw, mtime=0) if path.suffix == ".gz" else raw)
    tmp.replace(path)


def load(path: Path) -> RandomLab:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    results = [Result(**{k: tuple(v) if k in _TUPLES else v for k, v in r.items() if k != "expected"},
                      expected=tuple(tuple(x) for x in r["expected"])) for r in data.pop("results")]
    return RandomLab(results, tuple(data.pop("seeds")), **data)


# --- the section of docs/analysis.md -----------------------------------------------------------------------------

RANDOM_BEGIN: Final = ("<!-- randomized incident lab: generated by `make confusion-random` "
                       "(python -m tools.incident_lab --random); do not edit -->")
RANDOM_END: Final = "<!-- end of the randomized incident lab -->"
RANDOM_HEADING: Final = "## Randomized incident lab (drawn workloads, loads, shapes, pairs and ranges)"
WORKLOAD_HEADER: Final = ("| workload | prompt / answer tokens, slots | TTFT / TPOT target | capacity | runs | "
                          "tuned right | held-out right |")
KIND_HEADER: Final = ("| kind | band | drawn | tuned runs | tuned right | tuned high-confidence wrong | "
                      "held-out runs | held-out right | held-out high-confidence wrong |")
PAIR_HEADER: Final = ("| pair | tuned runs | tuned both named | tuned leading first (>= 1 min apart) | "
                      "held-out runs | held-out both named | held-out leading first (>= 1 min apart) |")
ORDERED_HEADER: Final = PAIR_HEADER.replace("| pair |", "| leading → second |", 1)
WRONG_HEADER: Final = ("| seed | workload | load | injected | expected | named | confidence | "
                       "first line (shortened) |")
GOAL_LEAD: Final = 0.90
GOAL_USER: Final = 0.95  # item 6: the CLI over the range a paged user types names the explicit range's mechanism


def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "—"


def _held_to_goal(r: Result) -> bool:
    """A pair held to the pair goals: neither incident weak (a weak one may go unseen, as a weak single may)."""
    return r.pair and "weak" not in r.bands


def goals(results: Sequence[Result], split: str) -> list[str]:
    """Issue #32 item 5's goals on one half: one line each, 'met' or 'missed'."""
    rs = [r for r in results if r.split == split]
    pct, met = grid._pct, grid._met
    out = []
    healthy = [r for r in rs if not r.kinds]
    hr = sum(r.right for r in healthy)
    out.append(f"healthy named \"no incident\" >= 99 %: {pct(hr, len(healthy))} — "
               f"{met(bool(healthy) and hr >= grid.GOAL_HEALTHY * len(healthy))}")
    kinds = [(k, [r for r in rs if r.single and r.kinds[0] == k and r.band != "weak"]) for k in KINDS]
    kinds = [(k, v) for k, v in kinds if v]
    low = [(k, v) for k, v in kinds if sum(r.right for r in v) < grid.GOAL_KINDS * len(v)]
    out.append(f"every kind at medium and strong right >= 95 %: {len(kinds) - len(low)} of {len(kinds)} kinds"
               + (f"; below: {', '.join(f'{k} {pct(sum(r.right for r in v), len(v))}' for k, v in low)}"
                  if low else "") + f" — {met(bool(kinds) and not low)}")
    pairs_ = [r for r in rs if _held_to_goal(r)]
    both = sum(bool(r.both_named) for r in pairs_)
    out.append(f"pairs (neither weak) both named in the first line >= 95 %: {pct(both, len(pairs_))} "
               f"({sum(r.pair for r in rs) - len(pairs_)} pairs with a weak incident not held to it) — "
               f"{met(bool(pairs_) and both >= grid.GOAL_PAIRS * len(pairs_))}")
    apart = [r for r in pairs_ if r.lead_first is not None]
    lead = sum(bool(r.lead_first) for r in apart)
    out.append(f"pairs (neither weak) whose onsets are >= 1 min apart, the leading one first >= 90 %: "
               f"{pct(lead, len(apart))} — {met(bool(apart) and lead >= GOAL_LEAD * len(apart))}")
    high = [r for r in rs if r.confidence == "high"]
    hr = sum(r.right for r in high)
    out.append(f"\"high\" right >= 99 %: {pct(hr, len(high))} — {met(bool(high) and hr >= grid.GOAL_HIGH * len(high))}")
    weak = [r for r in rs if r.single and r.band == "weak"]
    other = [r for r in weak if not r.honest and r.mechanism not in grid.NO_INCIDENT]
    out.append(f"a weak incident never named as another mechanism at medium or high confidence: right "
               f"{pct(sum(r.right for r in weak), len(weak))}, unexplained or low "
               f"{sum(1 for r in weak if r.honest and not r.right)}, \"no incident\" "
               f"{sum(1 for r in weak if not r.honest and r.mechanism in grid.NO_INCIDENT)}, another mechanism at "
               f"medium/high {len(other)}"
               + (f" ({', '.join(f'{k} {n}' for k, n in Counter(r.mechanism for r in other).most_common())})"
                  if other else "") + f" — {met(bool(weak) and not other)}")
    blamed = sum(1 for r in rs if r.consequence_as_cause)
    out.append(f"never a consequence called the cause: {blamed} of {len(rs)} runs — {met(bool(rs) and not blamed)}")
    read = [r for r in rs if r.user]
    for i, frm in enumerate(USER_RANGES):
        same = sum(same_finding(r.user[i], r.mechanism) for r in read)
        out.append(f"(item 6) `slo-monitor analyze --from {frm} --to now`, default flags, names the explicit range's "
                   f"mechanism (or, as it does, none) >= 95 %: {pct(same, len(read))} — "
                   f"{met(bool(read) and same >= GOAL_USER * len(read))}")
    return out


# Verdicts that name no mechanism: nothing happened, the target does not hold at this load, or a breach with no
# cause found. Two readings that both name none agree (neither sends on-call after a cause).
NO_CAUSE: Final = grid.NO_INCIDENT | {m.UNEXPLAINED}


def same_finding(a: str, b: str) -> bool:
    """The same mechanism named, or none by either."""
    return a == b or (a in NO_CAUSE and b in NO_CAUSE)


def _by_split(rs: Sequence[Result], cells: Callable[[list[Result]], list[str]]) -> list[str]:
    return [x for split in grid.SPLITS for x in cells([r for r in rs if r.split == split])]


def workload_table(lab: RandomLab) -> list[str]:
    out = [WORKLOAD_HEADER, "|---|---|---|---|---|---|---|"]
    for name, w in WORKLOADS.items():
        rs = [r for r in lab.results if r.workload == name]
        t = w.template
        slots = t["launch"].get("max_running_requests") or (
            f"{t['launch']['prefill']['max_running_requests']} prefill + "
            f"{t['launch']['decode']['max_running_requests']} decode")
        cap = lab.capacity.get(name)
        out.append(f"| {name} | {t['input_tokens']} / {t['output_tokens']}, {slots} | "
                   f"{t['ttft_target_seconds']:g} s / {t['tpot_target_seconds'] * 1000:g} ms | "
                   f"{f'{cap:g} req/s' if cap is not None else '—'} | {len(rs)} | "
                   + " | ".join(_frac(sum(r.right for r in x), len(x))
                                for x in ([r for r in rs if r.split == s] for s in grid.SPLITS)) + " |")
    return out


def _drawn(rs: Sequence[Result], key: str) -> str:
    mags = [mag for r in rs for k, mag in zip(r.kinds, r.magnitudes) if k == key]
    if not mags:
        return "—"
    lo, hi = scale(key, min(mags)), scale(key, max(mags))
    return lo if lo == hi else f"{lo} … {hi}"


def kind_table(results: Sequence[Result]) -> list[str]:
    """One incident: each kind by band (and the healthy runs), right per half."""
    out = [KIND_HEADER, "|---|---|---|---|---|---|---|---|---|"]

    def cells(rs: list[Result]) -> list[str]:
        return [str(len(rs)), str(sum(r.right for r in rs)),
                str(sum(1 for r in rs if r.confidence == "high" and not r.right))]

    rows = [(HEALTHY, "—", [r for r in results if not r.kinds])]
    rows += [(k, b, [r for r in results if r.single and r.kinds[0] == k and r.band == b]) for k in KINDS for b in BANDS]
    for key, band, rs in rows:
        if rs:
            out.append(f"| {key} | {band} | {_drawn(rs, key) if rs[0].kinds else '—'} | "
                       + " | ".join(_by_split(rs, cells)) + " |")
    return out


def pair_table(results: Sequence[Result], ordered: bool) -> list[str]:
    out = [ORDERED_HEADER if ordered else PAIR_HEADER, "|---|---|---|---|---|---|---|"]

    def cells(rs: list[Result]) -> list[str]:
        apart = [r for r in rs if r.lead_first is not None]
        return [str(len(rs)), _frac(sum(bool(r.both_named) for r in rs), len(rs)),
                _frac(sum(bool(r.lead_first) for r in apart), len(apart))]

    keys = sorted({r.order if ordered else r.unordered for r in results if r.pair})
    for key in keys:
        rs = [r for r in results if r.pair and (r.order if ordered else r.unordered) == key]
        out.append(f"| {key} | " + " | ".join(_by_split(rs, cells)) + " |")
    return out


def _injected(r: Result) -> str:
    if not r.kinds:
        return "nothing"
    parts = []
    for k, mag, band, start, dur, ramp in zip(r.kinds, r.magnitudes, r.bands, r.starts, r.durations, r.ramps):
        parts.append(f"{k} {scale(k, mag)} ({band}) at {start:g} s for {dur:g} s" + (f", ramp {ramp:g} s" if ramp
                                                                                      else ""))
    return "; then ".join(parts)


def _expected(r: Result) -> str:
    return " + ".join("/".join(f"`{x}`" for x in exp) for exp in r.expected) or "no incident"


def wrong(results: Sequence[Result]) -> list[str]:
    """The tuned half's wrong verdicts, one a row. Never a held-out run: that half is reported as totals only."""
    out = [WRONG_HEADER, "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.split == grid.TUNED and not r.right:
            out.append(f"| {r.seed} | {r.workload} | {r.share:.0%} ({r.rate:.2f}/s) | {_injected(r)} | "
                       f"{_expected(r)} | {grid._named(r)} | {r.confidence} | "  # type: ignore[arg-type]
                       f"{grid._short(r.headline)} |")
    return out


def _common(results: Sequence[Result], n: int = 8) -> str:
    c = Counter((r.scenario, " + ".join(r.named)) for r in results if r.split == grid.TUNED and not r.right)
    return "; ".join(f"{s} → {named} ({k})" for (s, named), k in c.most_common(n))


def section(lab: RandomLab) -> str:
    """The generated part of docs/analysis.md: the goals on each half, how the runs were drawn, the tables (totals
    per half), the calibration, and the tuned half's wrong verdicts."""
    rs = lab.results
    seeds = {sp: [s for s in lab.seeds if grid.split_of(s) == sp] for sp in grid.SPLITS}
    lines = ["**Goals (issue #32 item 5), measured on each half of the seeds:**", ""]
    for split in grid.SPLITS:
        if seeds[split]:
            lines += [f"- {split}: {g}" for g in goals(rs, split)]
    n = Counter("healthy" if not r.kinds else "single" if r.single else "pair" for r in rs)
    lines += [
        "",
        f"The lab took **{lab.seconds / 60:.1f} min** ({lab.seconds:.0f} s wall, {len(rs)} runs: {n['healthy']} "
        f"healthy, {n['single']} one incident, {n['pair']} pairs; {lab.runs_per_seed} a seed; {lab.jobs} processes, "
        f"up to {CHUNK} deployments per emulator; {lab.emulated / 3600:.1f} emulated hours; slowest scrape round "
        f"{lab.slowest_scrape:.1f} s of its 10 s timeout). Seeds: tuned {', '.join(map(str, seeds[grid.TUNED])) or 'none'};"
        f" held-out {', '.join(map(str, seeds[grid.HELD_OUT])) or 'none'} (the grid's halves). Each run is drawn from "
        "`random.Random(seed)` alone (tools/incident_lab/randomized.py): a workload; a load uniform in "
        f"{LOAD_SHARES[0]:.0%}–{LOAD_SHARES[1]:.0%} of its probed capacity; healthy ({P_HEALTHY:.0%}), one incident "
        f"({P_SINGLE:.0%}) or an ordered pair ({1 - P_HEALTHY - P_SINGLE:.0%}, both orders alike); the first onset "
        f"uniform in {ONSET[0]:g}–{ONSET[1]:g} s, durations {DURATION[0]:g}–{DURATION[1]:g} s, a slowdown, surge or "
        f"prefill spike ramped over {RAMP[0]:g}–{RAMP[1]:g} s half the time, a pair's second onset "
        f"{GAP[0]:g}–{GAP[1]:g} s after the first (the first still running {OVERLAP:g} s past it); magnitudes "
        "log-uniform between the grid's weak and strong cells of each kind, banded in thirds of that range (restart: "
        f"down 0–{RESTART_DOWN:g} s, thirds of it; client timeout: the grid's range as a share of the workload's "
        f"answer time). Analysed from the recording as a paged user would: T1 {LEAD[0]:g}–{LEAD[1]:g} s before the "
        f"first onset (never before {MIN_DATA:g} s), T2 after the last one's end (+{TAIL[0]:g}–{TAIL[1]:g} s) or, "
        f"{P_ONGOING:.0%} of the time, while it still runs; the baseline is the analyzer's default. Each run is "
        f"read again through the CLI as on-call types it at T2 ({', '.join(f'`--from {u} --to now`' for u in USER_RANGES)}"
        ", `--now` T2, no other flag): the lab's deployments are minutes old, so both ranges start before their "
        "data and read it from its first scrape, with the baseline the analyzer finds in it.",
        "",
        "Right: as in the grid (the injected mechanism, a restart that is down a while also as `server_down`; healthy: "
        "`healthy` or `steady_breach`; never a consequence as the cause); a pair: both mechanisms named in the first "
        f"line and, when the onsets are >= {ORDER_GAP:g} s apart, the leading one first. Not paired: two of a kind, "
        "overheating with a decode slowdown (the throttle is one), down with restart (two outages merge); beside "
        f"`down`, the other incident runs {DOWN_VISIBLE:g} s outside the outage. **The held-out half is reported "
        "as totals only**: none of its runs is listed.",
        "",
        "By workload (capacity: requests/s served when overloaded, probed at the lab's start):",
        "",
        *workload_table(lab),
        "",
        "One incident, by kind and band (and the healthy runs):",
        "",
        *kind_table(rs),
        "",
        "Pairs, either order:",
        "",
        *pair_table(rs, ordered=False),
        "",
        "Pairs, in the order they began:",
        "",
        *pair_table(rs, ordered=True),
        "",
        "Calibration (confidence said x right, over every run of each half):",
        "",
        *grid.calibration(rs),  # type: ignore[arg-type]
        "",
        f"Most common wrong verdicts of the tuned half: {_common(rs) or 'none'}.",
        "",
        f"Every wrong verdict of the tuned half ({sum(1 for r in rs if r.split == grid.TUNED and not r.right)}):",
        "",
        *wrong(rs),
    ]
    return "\n".join(lines) + "\n"


def doc_section(path: Path = DOC) -> str | None:
    return read_between(path, RANDOM_BEGIN, RANDOM_END)


def _after_grid(doc: str, block: str) -> str:
    """Right after the grid's section (at the end when the document has none)."""
    if grid.GRID_END in doc:
        return doc.replace(grid.GRID_END, f"{grid.GRID_END}\n\n{RANDOM_HEADING}\n\n{block}", 1)
    return doc.rstrip("\n") + f"\n\n{RANDOM_HEADING}\n\n{block}\n"


def write_doc(text: str, path: Path = DOC) -> bool:
    """Put the section between its markers, or after the grid's when they are missing; True if it changed."""
    return write_between(path, RANDOM_BEGIN, RANDOM_END, text, _after_grid)


def main_capacity(reprobe: bool = True) -> int:
    for w, c in capacities(reprobe=reprobe).items():
        print(f"{w}: {c:g} req/s served when overloaded ({WORKLOADS[w].note}; nominal answer "
              f"{nominal_e2e(w):.1f} s)")
    return 0

