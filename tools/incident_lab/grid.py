"""The incident lab as an experiment (issue #23): every incident kind at three magnitudes on its own scale, at
three arrival rates from light to ~90 % of the deployment's capacity, healthy controls at every rate and the
pairs of incidents that occur together in production, over many seeds split into a half the analysis may be
tuned on and a half it never is. `python -m tools.incident_lab --grid` (`make confusion-grid`) runs it and
writes the summary at the top of docs/analysis.md.

One task per seed and arrival rate: its deployments (one per scenario and magnitude) run in one emulator in
lockstep beside the real sidecar, in a process of their own (`--jobs` at once), and each is analysed from the
sidecar's **recording** with the confusion table's range (T1, T2) and window. The grid skips the OpenMetrics
capture and the Prometheus backfill of `make confusion` (that source gives the same verdicts there, and the
grid is about the analysis, not the source). A deployment's random stream is the seed and its name
(monitor/emulate/engine.py), so the verdicts do not depend on which deployments share an emulator.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from monitor.analyze import diagnose as m
from monitor.analyze.report import Report
from monitor.emulate.incidents import HEAT_PER_SLOWDOWN
from tools.incident_lab.confusion import DOC, consequence_as_cause, report
from tools.incident_lab.doc_markers import read_between, write_between
from tools.incident_lab.lockstep import run_lab
from tools.incident_lab.scenarios import DURATION, EPOCH, INCIDENT_AT, LLAMA, PD, SPEC

# The seeds, split once and for all: the analysis may be tuned on the even ones; the odd ones are reported apart
# and never tuned on. `--seeds N` runs seeds 0..N-1 (both halves alike when N is even).
TUNED: Final = "tuned"
HELD_OUT: Final = "held-out"
SPLITS: Final = (TUNED, HELD_OUT)
TUNED_SEEDS: Final = tuple(range(0, 100, 2))
HELD_OUT_SEEDS: Final = tuple(range(1, 100, 2))


def split_of(seed: int) -> str:
    if seed in TUNED_SEEDS:
        return TUNED
    if seed in HELD_OUT_SEEDS:
        return HELD_OUT
    raise ValueError(f"seed {seed} is in neither half (TUNED_SEEDS, HELD_OUT_SEEDS)")


TEMPLATES: Final[dict[str, dict[str, Any]]] = {"llama": LLAMA, "pd": PD, "spec": SPEC}
# Requests/s each deployment serves at saturation, measured with `python -m tools.incident_lab --capacity`
# (healthy, 8 req/s offered, seeds 0-2, emulated 120-480 s): the mixed Llama server and the speculative one
# finish 3.25 req/s with all 16 slots busy; the PD pair 3.7 req/s (its 8 prefill slots are the limit).
CAPACITY: Final[dict[str, float]] = {"llama": 3.25, "pd": 3.7, "spec": 3.25}
# The arrival rates, light to busy: ~30 %, ~60 % and ~90 % of capacity. At "busy" the Llama server has 14.4 of
# its 16 slots running on average and a few requests queued (the same probe at 2.9 req/s).
LOADS: Final = ("light", "mid", "busy")
RATES: Final[dict[str, dict[str, float]]] = {
    "llama": {"light": 1.0, "mid": 2.0, "busy": 2.9},
    "pd": {"light": 1.1, "mid": 2.2, "busy": 3.3},
    "spec": {"light": 1.0, "mid": 2.0, "busy": 2.9},
}
LOAD_SHARE: Final[dict[str, float]] = {"light": 0.3, "mid": 0.6, "busy": 0.9}
MAGNITUDES: Final = ("weak", "medium", "strong")
PAIR_LAG: Final = 60.0  # the second incident of a pair starts this long after the leading one
RAMP: Final = 90.0  # seconds a ramped incident takes to reach full strength (of its DURATION)
NONE: Final = "none"  # the magnitude of a healthy control
NO_INCIDENT: Final = frozenset({m.HEALTHY, m.STEADY_BREACH})  # verdicts that say nothing happened
PAIR: Final = "pair"  # the magnitude of a pair (both at the single kinds' medium)


@dataclass(frozen=True)
class Inject:
    """One incident: `[/role]:KIND[:FACTOR]@START+DURATION[~RAMP]` after the deployment's name."""

    kind: str
    factor: float | None = None
    role: str = ""
    start: float = INCIDENT_AT
    duration: float = DURATION
    ramp: float = 0.0  # seconds to full strength (0: a step)

    def spec(self, deployment: str) -> str:
        role = f"/{self.role}" if self.role else ""
        factor = f":{self.factor:g}" if self.factor is not None else ""
        duration = f"+{self.duration:g}" if self.duration else ""
        ramp = f"~{self.ramp:g}" if self.ramp else ""
        return f"{deployment}{role}:{self.kind}{factor}@{self.start:g}{duration}{ramp}"


@dataclass(frozen=True)
class Cell:
    """A scenario at one magnitude: what is injected and what the verdict must name."""

    scenario: str  # the scenario (one per incident kind as in the confusion table, `healthy`, or a pair)
    magnitude: str  # weak | medium | strong | none (healthy) | pair
    scale: str  # the magnitude on the kind's own scale, as the table says it
    template: str  # key of TEMPLATES
    injects: tuple[Inject, ...]
    expect: tuple[str, ...]  # the mechanisms the verdict must name, the leading one first
    also: tuple[str, ...] = ()  # mechanisms accepted in place of expect[0] (one incident: as true a name)

    @property
    def pair(self) -> bool:
        return len(self.expect) > 1

    def name(self, load: str) -> str:
        """The deployment's name (a slug: a pair's `+` becomes `--`)."""
        base = self.scenario.replace("+", "--")
        return f"{base}-{self.magnitude}-{load}" if self.magnitude != NONE else f"{base}-{load}"


def _single(scenario: str, kind: str, expect: str, template: str, scales: Sequence[tuple[float, str]], *,
            role: str = "", also: tuple[str, ...] = (), ramp: float = 0.0) -> list[Cell]:
    return [Cell(scenario, mag, label, template, (Inject(kind, f, role, ramp=ramp),), (expect,), also)
            for mag, (f, label) in zip(MAGNITUDES, scales)]


def _x(*factors: float) -> list[tuple[float, str]]:
    return [(f, f"x{f:g}") for f in factors]


# The emulator's knobs (monitor/emulate/incidents.py). Magnitudes are each kind's own scale:
# - npu_overheat: FACTOR is the throttle at full heat; the chip heats by HEAT_PER_SLOWDOWN degC per unit of it
#   (x1.2 / x1.5 / x1.9: +8 / +20 / +36 degC) with a THERMAL_TAU time constant, and cools the same way after.
# - hbm_full: FACTOR is the share of the KV pool's tokens left to the requests; the rest counts as used (token usage),
#   and the chip's HBM does not move (SGLang preallocates the pool).
# - restart: the duration is how long the server is down while it restarts (0: an instant restart).
CELLS: Final[tuple[Cell, ...]] = (
    # Busy but healthy: "the SLO does not hold at this steady load" is a "no incident" too (nothing changed).
    Cell("healthy", NONE, "—", "llama", (), (m.HEALTHY,), (m.STEADY_BREACH,)),
    *_single("tpot-regression", "tpot_regression", m.DECODE_SLOWDOWN, "llama", _x(1.3, 2, 4)),
    *_single("ttft-spike", "ttft_spike", m.PREFILL_SLOWDOWN, "llama", _x(1.3, 2, 4)),
    *_single("queue-buildup", "queue_buildup", m.OVERLOAD, "llama",
             [(f, f"arrivals x{f:g}") for f in (1.3, 2, 3)]),
    *[Cell("restart", mag, label, "llama", (Inject("restart", None, duration=d),), (m.RESTART,),
           (m.SERVER_DOWN,) if d else ())
      for mag, (d, label) in zip(MAGNITUDES, ((0, "instant"), (10, "down 10 s"), (30, "down 30 s")))],
    *[Cell("down", mag, f"{d} s", "llama", (Inject("down", None, duration=d),), (m.SERVER_DOWN,))
      for mag, d in zip(MAGNITUDES, (20, 60, 120))],
    *_single("npu-overheat", "npu_overheat", m.ACCELERATOR_OVERHEAT, "llama",
             [(f, f"+{HEAT_PER_SLOWDOWN * (f - 1):.0f} °C, decode x{f:g}") for f in (1.2, 1.5, 1.9)]),
    *_single("hbm-full", "hbm_full", m.KV_CAPACITY, "llama",
             [(f, f"{f:.0%} of the KV pool left") for f in (0.9, 0.6, 0.3)]),
    *_single("kv-transfer-failure", "kv_transfer_failure", m.KV_TRANSFER_FAILURE, "pd",
             [(f, f"{f:.0%} of transfers fail") for f in (0.05, 0.2, 0.5)]),
    *_single("pd-prefill-slow", "ttft_spike", m.PREFILL_SLOWDOWN, "pd",
             [(f, f"prefill x{f:g}") for f in (1.3, 2, 4)], role="prefill"),
    *_single("spec-accept-drop", "spec_accept_drop", m.SPEC_ACCEPT_DROP, "spec",
             [(f, f"accept length /{f:g}") for f in (1.3, 2, 4)]),
    # Clients (or the gateway) give up on requests unanswered after FACTOR s; SGLang aborts them 2 s later. The
    # scale is the share of answers cut: at the light rate they take 3-6 s, so weak (aborted at 4.5 s) cuts the
    # slowest few, strong (3 s) nearly all (a 3 s timeout, aborted at 5 s, cut none there: no incident at all).
    *_single("client-timeout", "client_timeout", m.CLIENT_GIVE_UP, "llama",
             [(f, f"clients give up at {f:g} s") for f in (2.5, 2, 1)]),
    # Ramps: the same slowdown and surge growing to full strength over RAMP seconds, as a leak, a fleet rollout
    # or a diurnal climb does, instead of a step (medium and strong: a weak ramp is a weak step, slower).
    *[c for c in _single("tpot-regression-ramp", "tpot_regression", m.DECODE_SLOWDOWN, "llama",
                         [(f, f"x{f:g} over {RAMP:g} s") for f in (1.3, 2, 4)], ramp=RAMP) if c.magnitude != "weak"],
    *[c for c in _single("queue-buildup-ramp", "queue_buildup", m.OVERLOAD, "llama",
                         [(f, f"arrivals x{f:g} over {RAMP:g} s") for f in (1.3, 2, 3)], ramp=RAMP)
      if c.magnitude != "weak"],
    # Pairs: the leading incident from INCIDENT_AT, the second PAIR_LAG later; both end together.
    *[Cell(name, PAIR, label, template,
           (Inject(first[0], first[1], first[2], INCIDENT_AT, DURATION + PAIR_LAG),
            Inject(second[0], second[1], second[2], INCIDENT_AT + PAIR_LAG, DURATION if second[0] != "restart" else 0)),
           expect)
      for name, label, template, first, second, expect in (
          ("surge+decode-slowdown", "arrivals x2, then decode x2", "llama",
           ("queue_buildup", 2, ""), ("tpot_regression", 2, ""), (m.OVERLOAD, m.DECODE_SLOWDOWN)),
          ("overheat+surge", "+20 °C (decode x1.5), then arrivals x2", "llama",
           ("npu_overheat", 1.5, ""), ("queue_buildup", 2, ""), (m.ACCELERATOR_OVERHEAT, m.OVERLOAD)),
          ("surge+restart", "arrivals x2, then an instant restart", "llama",
           ("queue_buildup", 2, ""), ("restart", None, ""), (m.OVERLOAD, m.RESTART)),
          ("pd-prefill-slow+kv-transfer-failure", "prefill x2, then 20 % of transfers fail", "pd",
           ("ttft_spike", 2, "prefill"), ("kv_transfer_failure", 0.2, ""),
           (m.PREFILL_SLOWDOWN, m.KV_TRANSFER_FAILURE)),
          ("spec-accept-drop+surge", "accept length /2, then arrivals x2", "spec",
           ("spec_accept_drop", 2, ""), ("queue_buildup", 2, ""), (m.SPEC_ACCEPT_DROP, m.OVERLOAD)),
      )],
)
SCENARIO_NAMES: Final = tuple(dict.fromkeys(c.scenario for c in CELLS))


@dataclass(frozen=True)
class Deploy:
    """One deployment of a task: a cell at one arrival rate (what run_lab needs of a scenario)."""

    cell: Cell
    load: str

    @property
    def name(self) -> str:
        return self.cell.name(self.load)

    @property
    def template(self) -> dict[str, Any]:
        return TEMPLATES[self.cell.template]

    @property
    def rate(self) -> float:
        return RATES[self.cell.template][self.load]

    @property
    def specs(self) -> tuple[str, ...]:
        return tuple(i.spec(self.name) for i in self.cell.injects)


@dataclass(frozen=True)
class Result:
    """One run: a cell at one rate and seed, analysed from the recording."""

    split: str
    scenario: str
    magnitude: str
    scale: str
    load: str
    rate: float
    seed: int
    expect: tuple[str, ...]
    mechanism: str
    named: tuple[str, ...]  # the verdict's mechanism, then every other mechanism its first line names
    moved: tuple[str, ...]  # every mechanism whose evidence moved (report.json's candidates), the cause first
    confidence: str
    right: bool
    headline: str
    consequence_as_cause: str | None = None
    arrivals_dismissed: bool = False  # arrivals moved, and the verdict counted no overload among its candidates
    down_seen: bool = False  # a target was down (scrape failed) in the analysed range
    # Per SIGNATURE_KEYS: (baseline level, the value furthest the way that hurts while the incident was injected).
    signature: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)

    @property
    def row(self) -> tuple[str, str, str, str]:
        return self.split, self.scenario, self.magnitude, self.load

    @property
    def honest(self) -> bool:
        """Right, or an honest 'cannot say': unexplained, or low confidence."""
        return self.right or self.mechanism == m.UNEXPLAINED or self.confidence == "low"


def named_in_first_line(rep: Report) -> tuple[str, ...]:
    """The verdict's mechanism, then the other candidates its headline names as contributing (not those it says an
    earlier candidate explains: "engine-side decode slowdown explained by overload" names no second cause)."""
    v, head = rep.verdict, rep.verdict.headline.lower()
    others = [mech for mech, _ in v.candidates if mech != v.mechanism and mech not in getattr(v, "explained", {})
              and f"with {m.TITLES[mech].lower()} contributing" in head]
    return tuple(dict.fromkeys([v.mechanism, *others]))


def judge(cell: Cell, rep: Report) -> tuple[bool, str | None]:
    """(right, the consequence called the cause). One incident: the verdict names it (or one of `also`);
    a pair: the leading one first and the other named in the same first line; never a consequence as the cause."""
    v = rep.verdict
    blamed = consequence_as_cause(rep)
    if blamed is not None:
        return False, blamed
    if cell.pair:
        named = named_in_first_line(rep)
        return named[0] == cell.expect[0] and cell.expect[1] in named[1:], None
    return v.mechanism in (cell.expect[0], *cell.also), None


SIGNATURE_KEYS: Final = ("temperature", "token_usage", "hbm", "arrivals")


def _peak(rep: Report, key: str) -> float | None:
    """The signal's value furthest the way that hurts (highest; lowest for HBM free) while the incident was
    injected (INCIDENT_AT to INCIDENT_AT + DURATION)."""
    sig = rep.verdict.shifts[key].signal
    lo, hi = EPOCH + INCIDENT_AT, EPOCH + INCIDENT_AT + DURATION
    vals = [v * sig.worse for t, v in zip(rep.dataset.times, sig.values) if lo <= t <= hi and v is not None]
    return max(vals) * sig.worse if vals else None


def result(cell: Cell, load: str, seed: int, rep: Report) -> Result:
    v = rep.verdict
    right, blamed = judge(cell, rep)
    moved = tuple(dict.fromkeys(mech for mech, _ in v.candidates))
    arr = v.shifts.get("arrivals")
    surge = any(i.kind == "queue_buildup" for i in cell.injects)
    dismissed = surge and arr is not None and arr.moved and m.OVERLOAD not in moved
    sig = {k: (v.shifts[k].baseline, _peak(rep, k)) for k in SIGNATURE_KEYS if k in v.shifts}
    down = v.shifts.get("targets_down")
    down_seen = down is not None and bool(down.incident or down.baseline or down.events)
    return Result(split_of(seed), cell.scenario, cell.magnitude, cell.scale, load, RATES[cell.template][load], seed,
                  cell.expect, v.mechanism, named_in_first_line(rep), moved, v.confidence, right, v.headline,
                  blamed, dismissed, down_seen, sig)


# Deployments per emulator. The sidecar scrapes every target of a round at once, each bounded by the 10 s scrape
# timeout, and the emulator renders their pages one after the other: a round of 36 deployments took 5.5 s on this
# 2-core machine under other people's load, too near the timeout (a slow page would read as a target down).
CHUNK: Final = 12


@dataclass(frozen=True)
class TaskResult:
    seed: int
    load: str
    results: tuple[Result, ...]
    seconds: float
    slowest_scrape: float


def run_task(seed: int, load: str, cells: Sequence[Cell], tmp: str | None = None) -> TaskResult:
    """Every cell at one rate and seed in one emulator, in lockstep with the sidecar; each analysed from the
    recording."""
    began = time.monotonic()
    deploys = tuple(Deploy(c, load) for c in cells)
    with tempfile.TemporaryDirectory(prefix=f"incident-grid-{seed}-{load}-", dir=tmp) as work:
        run = run_lab(Path(work), deploys, seed=seed, capture=False)  # type: ignore[arg-type]
        out = tuple(result(d.cell, load, seed, report(run, d, "recording", None))  # type: ignore[arg-type]
                    for d in deploys)
    return TaskResult(seed, load, out, time.monotonic() - began, run.slowest_scrape)


@dataclass
class Grid:
    results: list[Result]
    seeds: tuple[int, ...]
    loads: tuple[str, ...]
    jobs: int
    seconds: float  # wall time of the whole grid
    task_seconds: list[float]
    slowest_scrape: float
    cells: tuple[Cell, ...] = CELLS


# The results the committed section of docs/analysis.md was rendered from (issue #32 item 7): the test renders the
# section from them again and reruns a sample of their runs, so neither the doc nor the results can drift.
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "analysis-grid.json.gz"


def save(grid: Grid, path: Path) -> None:
    """The grid's results as JSON, gzipped when `path` ends in .gz (`load` renders the section again without
    running it). Written whole or not at all."""
    data = {k: v for k, v in asdict(grid).items() if k != "cells"}
    raw = (json.dumps(data, indent=None, separators=(",", ":")) + "\n").encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    # mtime 0: the same results give the same bytes, so a rerun that changed nothing changes no file.
    tmp.write_bytes(gzip.compress(raw, mtime=0) if path.suffix == ".gz" else raw)
    tmp.replace(path)


def load(path: Path) -> Grid:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    tuples = ("expect", "named", "moved")
    results = [Result(**{k: tuple(v) if k in tuples else v for k, v in r.items() if k != "signature"},
                      signature={k: (b, i) for k, (b, i) in r["signature"].items()}) for r in data.pop("results")]
    return Grid(results, tuple(data.pop("seeds")), tuple(data.pop("loads")), **data)


def select(only: Iterable[str] = (), magnitudes: Iterable[str] = ()) -> tuple[Cell, ...]:
    only, magnitudes = set(only), set(magnitudes)
    unknown = only - set(SCENARIO_NAMES)
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(sorted(unknown))}; expected {', '.join(SCENARIO_NAMES)}")
    return tuple(c for c in CELLS if (not only or c.scenario in only)
                 and (not magnitudes or c.magnitude in magnitudes or c.magnitude in (NONE, PAIR)))


def run_grid(seeds: Sequence[int], *, jobs: int = 2, loads: Sequence[str] = LOADS, cells: Sequence[Cell] = CELLS,
             chunk: int = CHUNK, progress: Callable[[str], None] = lambda _: None) -> Grid:
    """Every cell x rate x seed: one task per seed, rate and `chunk` cells, `jobs` processes at once."""
    for s in seeds:
        split_of(s)
    # The busiest rate first: its tasks take longest, and the short ones fill the gaps at the end.
    parts = [tuple(cells[i:i + chunk]) for i in range(0, len(cells), chunk)]
    tasks = sorted(((s, load, part) for s in seeds for load in loads for part in parts),
                   key=lambda t: (-LOADS.index(t[1]), t[0]))
    began = time.monotonic()
    results: list[Result] = []
    secs: list[float] = []
    slowest = 0.0
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(run_task, s, load, part) for s, load, part in tasks]
        for done, fut in enumerate(as_completed(futures), 1):
            tr = fut.result()
            results += tr.results
            secs.append(tr.seconds)
            slowest = max(slowest, tr.slowest_scrape)
            right = sum(r.right for r in tr.results)
            progress(f"seed {tr.seed} {tr.load}: {right}/{len(tr.results)} right in {tr.seconds:.0f} s "
                     f"(slowest scrape round {tr.slowest_scrape:.1f} s); {done}/{len(tasks)} tasks, "
                     f"{time.monotonic() - began:.0f} s")
    order = {(c.scenario, c.magnitude): i for i, c in enumerate(CELLS)}
    results.sort(key=lambda r: (SPLITS.index(r.split), order[(r.scenario, r.magnitude)], LOADS.index(r.load), r.seed))
    return Grid(results, tuple(seeds), tuple(loads), jobs, time.monotonic() - began, secs, slowest, tuple(cells))


# --- the section of docs/analysis.md ---------------------------------------------------------------------------

GRID_BEGIN = ("<!-- diagnosis grid: generated by `make confusion-grid` (python -m tools.incident_lab --grid); "
              "do not edit -->")
GRID_END = "<!-- end of the diagnosis grid -->"
GRID_HEADING = "## Diagnosis grid (seeds × magnitudes × arrival rates × pairs)"
TABLE_HEADER = "| split | scenario | magnitude | rate | runs | right | high-confidence wrong |"
CALIBRATION_HEADER = "| split | confidence | runs | right | wrong | right % |"
WRONG_HEADER = "| split | scenario | magnitude | rate | seed | named | confidence | first line (shortened) |"
GOAL_HEALTHY, GOAL_KINDS, GOAL_HIGH, GOAL_PAIRS = 0.99, 0.95, 0.99, 0.95
SHORT = 170


def _pct(k: int, n: int) -> str:
    """Truncated to a tenth, never rounded up: 71/75 reads 94.6 %, not a 95 % that looks like the goal met."""
    return f"{math.floor(1000 * k / n) / 10:g} % ({k}/{n})" if n else "n/a (0 runs)"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _rate(r: Result) -> str:
    return f"{r.load} {r.rate:.1f}/s"


def _magnitude(r: Result) -> str:
    return "—" if r.magnitude == NONE else f"{r.magnitude} ({r.scale})" if r.magnitude != PAIR else r.scale


def _named(r: Result) -> str:
    out = " + ".join(f"`{x}`" for x in r.named)
    if r.consequence_as_cause:
        out += f" (calls {r.consequence_as_cause} the cause)"
    extra = [x for x in r.moved if x not in r.named]
    return out + (f"; also moved: {', '.join(extra)}" if extra else "")


def _short(text: str) -> str:
    text = text.replace("|", "/")
    return text if len(text) <= SHORT else text[: SHORT - 1].rstrip() + "…"


def goals(results: Sequence[Result], split: str) -> list[str]:
    """The issue's goals, measured on one split: one line each, 'met' or 'missed'."""
    rs = [r for r in results if r.split == split]
    out = []
    healthy = {load: [r for r in rs if r.scenario == "healthy" and r.load == load] for load in LOADS}
    healthy = {k: v for k, v in healthy.items() if v}
    ok = all(sum(r.right for r in v) >= GOAL_HEALTHY * len(v) for v in healthy.values()) and bool(healthy)
    out.append("healthy named \"no incident\" >= 99 % at every rate: "
               + ", ".join(f"{load} {_pct(sum(r.right for r in v), len(v))}" for load, v in healthy.items())
               + f" — {_met(ok)}")
    kinds = [(s, [r for r in rs if r.scenario == s and r.magnitude in ("medium", "strong")]) for s in SCENARIO_NAMES]
    kinds = [(s, v) for s, v in kinds if v]
    low = [(s, v) for s, v in kinds if sum(r.right for r in v) < GOAL_KINDS * len(v)]
    out.append(f"each kind at medium and strong right >= 95 %: {len(kinds) - len(low)} of {len(kinds)} kinds"
               + (f"; below: {', '.join(f'{s} {_pct(sum(r.right for r in v), len(v))}' for s, v in low)}"
                  if low else "") + f" — {_met(bool(kinds) and not low)}")
    weak = [r for r in rs if r.magnitude == "weak"]
    missed = [r for r in weak if not r.honest and r.mechanism in NO_INCIDENT]  # not misattributed: not seen
    other = [r for r in weak if not r.honest and r.mechanism not in NO_INCIDENT]
    out.append(f"weak: right or an honest unexplained / low confidence, never another mechanism at medium or high: "
               f"right {_pct(sum(r.right for r in weak), len(weak))}, unexplained or low "
               f"{sum(1 for r in weak if r.honest and not r.right)}, \"no incident\" {len(missed)}, "
               f"another mechanism at medium/high {len(other)}"
               + (f" ({', '.join(f'{k} {n}' for k, n in Counter(r.mechanism for r in other).most_common())})"
                  if other else "") + f" — {_met(bool(weak) and not other)}")
    pairs = [r for r in rs if r.magnitude == PAIR]
    lead = sum(1 for r in pairs if not r.right and r.mechanism == r.expect[0])
    listed = sum(1 for r in pairs if not r.right and set(r.expect) <= set(r.moved))
    dismissed = [r for r in rs if r.arrivals_dismissed]
    out.append(f"pairs: both named in the first line, the leading one first, >= 95 %: "
               f"{_pct(sum(r.right for r in pairs), len(pairs))} (wrong but the leading one named first: {lead}; "
               f"wrong but both among the candidates that moved: {listed}); a measured arrival rise dismissed: "
               f"{len(dismissed)} of {sum(1 for r in rs if any(k == m.OVERLOAD for k in r.expect))} runs with a surge"
               f" — {_met(bool(pairs) and sum(r.right for r in pairs) >= GOAL_PAIRS * len(pairs) and not dismissed)}")
    high = [r for r in rs if r.confidence == "high"]
    hr = sum(r.right for r in high)
    out.append(f"\"high\" right >= 99 %: {_pct(hr, len(high))} — {_met(bool(high) and hr >= GOAL_HIGH * len(high))}")
    return out


def _rows(results: Sequence[Result]) -> dict[tuple[str, str, str, str], list[Result]]:
    rows: dict[tuple[str, str, str, str], list[Result]] = {}
    for r in results:
        rows.setdefault(r.row, []).append(r)
    return rows


def table(results: Sequence[Result]) -> list[str]:
    out = [TABLE_HEADER, "|---|---|---|---|---|---|---|"]
    for rs in _rows(results).values():
        r = rs[0]
        hcw = sum(1 for x in rs if x.confidence == "high" and not x.right)
        out.append(f"| {r.split} | {r.scenario} | {_magnitude(r)} | {_rate(r)} | {len(rs)} | "
                   f"{sum(x.right for x in rs)} | {hcw} |")
    return out


def calibration(results: Sequence[Result]) -> list[str]:
    out = [CALIBRATION_HEADER, "|---|---|---|---|---|---|"]
    for split in SPLITS:
        for conf in ("high", "medium", "low"):
            rs = [r for r in results if r.split == split and r.confidence == conf]
            right = sum(r.right for r in rs)
            pct = f"{math.floor(1000 * right / len(rs)) / 10:.1f} %" if rs else "—"  # truncated, as _pct
            out.append(f"| {split} | {conf} | {len(rs)} | {right} | {len(rs) - right} | {pct} |")
    return out


def wrong(results: Sequence[Result]) -> list[str]:
    out = [WRONG_HEADER, "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if not r.right:
            out.append(f"| {r.split} | {r.scenario} | {_magnitude(r)} | {_rate(r)} | {r.seed} | {_named(r)} | "
                       f"{r.confidence} | {_short(r.headline)} |")
    return out


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def signatures(results: Sequence[Result]) -> list[str]:
    """What the emulator's overheating and HBM-full signatures did at each magnitude (means over every run)."""
    out = ["| scenario | magnitude | hottest chip: baseline → peak in the incident | "
           "KV token usage: baseline → peak in the incident | HBM free (fullest chip): baseline → lowest |",
           "|---|---|---|---|---|"]
    by: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        if r.scenario in ("npu-overheat", "hbm-full", "healthy"):
            by[(r.scenario, _magnitude(r))].append(r)

    def fmt(rs: list[Result], key: str, unit: str) -> str:
        b = _mean(r.signature.get(key, (None, None))[0] for r in rs)
        i = _mean(r.signature.get(key, (None, None))[1] for r in rs)
        if b is None or i is None:
            return "n/a"
        return f"{b:.0f} → {i:.0f} °C" if unit == "°C" else f"{b:.2f} → {i:.2f}"

    for (scenario, mag), rs in by.items():
        out.append(f"| {scenario} | {mag} | {fmt(rs, 'temperature', '°C')} | {fmt(rs, 'token_usage', '')} | "
                   f"{fmt(rs, 'hbm', '')} |")
    return out


def pinned(results: Sequence[Result]) -> str:
    """Whether the temperature (overheating) and token usage (KV pool full) peaks followed the magnitude."""
    out = []
    for scenario, key, what, unit, tol in (("npu-overheat", "temperature", "the hottest chip", " °C", 2.0),
                                           ("hbm-full", "token_usage", "KV token usage", "", 0.02),
                                           ("hbm-full", "hbm", "HBM free", "", 0.01)):
        peaks = {mag: _mean(r.signature.get(key, (None, None))[1] for r in results
                            if r.scenario == scenario and r.magnitude == mag) for mag in MAGNITUDES}
        vals = [v for v in peaks.values() if v is not None]
        if len(vals) < 2:
            continue
        said = " / ".join(f"{v:.0f}{unit}" if unit else f"{v:.2f}" for v in vals)
        if max(vals) - min(vals) <= tol:
            out.append(f"{scenario}: {what} peaked at {said} (weak / medium / strong): it does not follow the "
                       "magnitude, the emulator pins it; only the factor's other effect changes.")
        else:
            out.append(f"{scenario}: {what} peaked at {said} (weak / medium / strong).")
    return " ".join(out)


def steady(results: Sequence[Result]) -> str:
    """Per rate: healthy runs whose verdict says an SLI breached."""
    parts = []
    for load in LOADS:
        rs = [r for r in results if r.scenario == "healthy" and r.load == load]
        if rs:
            parts.append(f"{load} {sum(1 for r in rs if 'within its objective' not in r.headline)}/{len(rs)}")
    return ", ".join(parts) or "none"


def _common(results: Sequence[Result], n: int = 8) -> str:
    c = Counter((r.scenario, " + ".join(r.named)) for r in results if not r.right)
    return "; ".join(f"{s} → {named} ({k})" for (s, named), k in c.most_common(n))


def _scales() -> str:
    """The overheating and HBM-full magnitudes the cells inject, from CELLS (a hand-written copy went stale)."""
    heat = [HEAT_PER_SLOWDOWN * (c.injects[0].factor - 1) for c in CELLS if c.scenario == "npu-overheat"]
    left = [c.injects[0].factor for c in CELLS if c.scenario == "hbm-full"]
    return (f"{' / '.join(f'+{h:.0f}' for h in heat)} °C and {' / '.join(f'{x:.0%}'[:-1] for x in left)} % of the KV "
            "pool left")


def section(grid: Grid, *, cut: str = "") -> str:
    """The generated part of docs/analysis.md: goals with measured values first, then the table, the
    calibration, the signatures and every wrong verdict."""
    rs = grid.results
    seeds = {sp: [s for s in grid.seeds if split_of(s) == sp] for sp in SPLITS}
    lines = ["**Goals (issue #23), measured on each half of the seeds:**", ""]
    for split in SPLITS:
        if seeds[split]:
            lines += [f"- {split}: {g}" for g in goals(rs, split)]
    minutes = grid.seconds / 60
    spurious = sum(1 for r in rs if r.down_seen and r.scenario not in ("down", "restart"))
    lines += [
        "",
        f"The grid took **{minutes:.1f} min** ({grid.seconds:.0f} s wall, {len(rs)} runs, {grid.jobs} processes, "
        f"{CHUNK} deployments per emulator; slowest scrape round {grid.slowest_scrape:.1f} s of its 10 s timeout; "
        f"runs where a scrape failed with no down or restart injected: {spurious}). Seeds: tuned "
        f"{', '.join(map(str, seeds[TUNED])) or 'none'}; held-out {', '.join(map(str, seeds[HELD_OUT])) or 'none'} "
        "(`TUNED_SEEDS` / `HELD_OUT_SEEDS` in tools/incident_lab/grid.py: tune on the even seeds, never on the "
        "odd ones). Every run is analysed from the sidecar's recording (the Prometheus backfill of the confusion "
        "table below is skipped for speed), over the same range and window as that table "
        f"(T1 = emulated 180 s, T2 = 480 s, incident at {INCIDENT_AT:g} s for {DURATION:g} s; pairs: the second "
        f"incident {PAIR_LAG:g} s after the first; ramps: to full strength over {RAMP:g} s of the incident). "
        "Rates: ~30 / 60 / 90 % of each deployment's capacity "
        f"(served at saturation: mixed and speculative Llama {CAPACITY['llama']:g} req/s, PD "
        f"{CAPACITY['pd']:g} req/s)." + (f" {cut}" if cut else ""),
        "",
        "Right: the verdict names the injected mechanism (a restart that is down a while: `restart` or "
        "`server_down`) and calls no consequence the cause; a healthy control: `healthy` or `steady_breach` (both "
        "say \"no incident\"); a pair: the leading "
        "mechanism first and the other named in the same first line. Weak magnitudes are also counted honest "
        "when `unexplained` or low confidence.",
        "",
        f"Healthy controls whose first line says an SLI breached with nothing injected: {steady(rs)}. At those "
        "rates the recipe's targets (TPOT 80 ms, TTFT 2 s) do not hold at a steady load: nothing changed, yet the "
        "SLO burns. The verdict says so (`steady_breach`: \"no incident: the SLO does not hold at this steady "
        "load\", low confidence) when nothing in demand or capacity moved and either every breached SLI was as "
        "bad in the baseline (or under twice its error budget), or requests were already queueing through the "
        "baseline (the server at its capacity, where the arrivals' own bursts build queues), or only the queue "
        "grew while no demand or capacity signal left its noise band even by half its threshold, save a faint "
        "rise of the arrival rate, the burst itself, which is named (a busy server's queue swinging with the "
        "arrivals' own bursts): a capacity-planning finding, not an incident "
        "(monitor/analyze/steady.py). \"No incident\" is never said with high confidence (an incident weaker "
        "than the noise reads the same): medium when nothing moved at all; a demand or capacity signal past its "
        "noise by half its threshold (`traces` in monitor/analyze/diagnose.py) or a consequence that moved "
        "without a cause lowers it to low, and the verdict names them.",
        "",
        f"Most common wrong verdicts: {_common(rs) or 'none'}.",
        "",
        *table(rs),
        "",
        "Calibration (confidence said x right, over every run of each half):",
        "",
        *calibration(rs),
        "",
        "What the emulator's overheating and HBM-full signatures did per magnitude (means over all runs; the "
        f"cells inject {_scales()}). " + pinned(rs),
        "",
        *signatures(rs),
        "",
        f"Every wrong verdict ({sum(not r.right for r in rs)}):",
        "",
        *wrong(rs),
    ]
    return "\n".join(lines) + "\n"


def doc_section(path: Path = DOC) -> str | None:
    return read_between(path, GRID_BEGIN, GRID_END)


def _under_title(doc: str, block: str) -> str:
    title, _, rest = doc.partition("\n")
    return f"{title}\n\n{GRID_HEADING}\n\n{block}\n{rest}"


def write_doc(text: str, path: Path = DOC) -> bool:
    """Put the section between its markers, or right under the document's title when they are missing."""
    return write_between(path, GRID_BEGIN, GRID_END, text, _under_title)


def parse_table(text: str, header: str) -> list[dict[str, str]]:
    """The rows of the markdown table under `header` in `text`, as column -> cell."""
    lines = text.splitlines()
    i = lines.index(header)
    cols = [c.strip() for c in header.strip("|").split("|")]
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows.append(dict(zip(cols, cells)))
    return rows


def capacity(template: str, rates: Sequence[float] = (1.0, 2.0, 2.9, 3.3, 8.0), seeds: Sequence[int] = (0, 1, 2),
             until: float = 480.0, settle: float = 120.0) -> list[tuple[float, float, float, float]]:
    """(offered req/s, served req/s, mean running requests on the decoding servers, mean queued) of a healthy
    deployment of `template`, emulated alone (no sidecar), from `settle` to `until`."""
    from monitor.emulate.engine import EmulatedDeployment
    from tools.incident_lab.scenarios import Scenario, lab_config

    out = []
    for rate in rates:
        cfg = lab_config((Scenario("probe", "none", m.HEALTHY, TEMPLATES[template], None, rate=rate),))
        running, queued, served = [], [], 0.0
        for seed in seeds:
            dep = EmulatedDeployment(cfg.deployments[0], seed=seed, rate=rate)
            dep.advance_to(settle)
            f0 = dep.finished
            t = settle
            while t < until:
                t += 10.0
                dep.advance_to(t)
                st = dep.state()["servers"]
                running.append(sum(s["running"] for s in st if s["role"] != "prefill"))
                queued.append(sum(s["queued"] for s in st))
            served += (dep.finished - f0) / (until - settle)
        out.append((rate, served / len(seeds), sum(running) / len(running), sum(queued) / len(queued)))
    return out


def main_capacity() -> int:
    for t in TEMPLATES:
        for rate, served, running, queued in capacity(t):
            print(f"{t}: offered {rate:g} req/s, served {served:.2f} req/s, running {running:.1f}, queued {queued:.1f}")
    return 0


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def log(msg: str) -> None:
    print(f"incident grid: {msg}", file=sys.stderr, flush=True)
