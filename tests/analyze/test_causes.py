"""The causal table (monitor/analyze/causes.py) is the only place that says which mechanism explains which (#32
item 1): its names resolve, diagnose.py branches on no mechanism, and a pair reads the same in either order."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from monitor.analyze import causes, diagnose
from monitor.analyze.causes import CAUSES, TITLES
from monitor.analyze.report import analyze
from monitor.slo.histogram import Hist
from tests.analyze.test_baseline import N
from tests.analyze.test_diagnose import _engine, _with

ROOT = Path(__file__).resolve().parents[2]
DIAGNOSE = ROOT / "monitor" / "analyze" / "diagnose.py"
SIGNAL_KEYS = frozenset(re.findall(r'(?:Signal|ratio_signal)\("([a-z_]+)"',
                                   (ROOT / "monitor" / "analyze" / "signals.py").read_text()))
MECHANISM_NAMES = frozenset(k for k, v in vars(causes).items() if k.isupper() and isinstance(v, str) and v in TITLES)
# Comparisons on a signal's key that diagnose.py keeps, each for a reason the table cannot carry:
# `"power" in signals`: the warming-per-power gate reads the power series when there is one;
# the demand clause names arrivals, prompt and output length by their percentage (presentation only).
KEYED_ON_SIGNALS = 2


def special_cases(source: str) -> list[tuple[int, list[str]]]:
    """Comparisons in `source` keyed on a mechanism (a name from causes.py) or a signal's key (a literal)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        keys = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in MECHANISM_NAMES}
                      | {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in SIGNAL_KEYS})
        if keys:
            out.append((node.lineno, keys))
    return out


def test_every_name_in_the_table_resolves():
    mechanisms = {c.mechanism for c in CAUSES}
    assert len(mechanisms) == len(CAUSES), "a mechanism has two rows"
    for c in CAUSES:
        assert c.mechanism in TITLES and c.why and c.onset
        for e in c.own:
            assert e.key in SIGNAL_KEYS, (c.mechanism, e.key)
            assert not e.gate or e.gate in diagnose.GATES, (c.mechanism, e.gate)
        for k in (*c.explains, *c.restates):
            assert k in SIGNAL_KEYS, (c.mechanism, k)
        for mv in c.moves:
            assert mv.mechanism in mechanisms and mv.mechanism != c.mechanism, (c.mechanism, mv)
            assert mv.test in diagnose.TESTS and mv.why, (c.mechanism, mv)
            own = {e.key for e in causes.BY_MECHANISM[mv.mechanism].own}
            assert mv.signals <= own, (c.mechanism, mv)
    owners: dict[str, str] = {}
    for c in CAUSES:  # a signal is one mechanism's own: else it could not tell them apart
        for e in c.own:
            assert owners.setdefault(e.key, c.mechanism) == c.mechanism, e.key


def test_diagnose_branches_on_no_mechanism_and_on_few_signal_keys():
    found = special_cases(DIAGNOSE.read_text())
    assert not [f for f in found if set(f[1]) & MECHANISM_NAMES], found
    assert len(found) <= KEYED_ON_SIGNALS, found


def test_the_special_case_count_catches_a_planted_pair_branch():
    planted = DIAGNOSE.read_text() + "\n\ndef _planted(mech, lead):\n    return mech == OVERLOAD and lead == 'itl_mean'\n"
    found = special_cases(planted)
    assert len(found) == len(special_cases(DIAGNOSE.read_text())) + 2  # the mechanism and the signal compared
    assert any("OVERLOAD" in keys for _, keys in found), found


def _arrived(at: int) -> list[float]:
    return [2.0] * at + [4.0] * (N - at)


@pytest.mark.parametrize(("slow_at", "busy_at", "first", "second"), [
    (80, 95, diagnose.DECODE_SLOWDOWN, diagnose.OVERLOAD),
    (95, 80, diagnose.OVERLOAD, diagnose.DECODE_SLOWDOWN),
])
def test_a_pair_names_the_one_that_began_first_and_the_other_in_either_order(slow_at, busy_at, first, second):
    """A measured surge and a halved decode speed 150 s apart: whichever began first is the cause, the other is
    named beside it. Before the table, a decode slowdown followed by a surge read "overload" (30 of 30 in the
    reshaped lab): a slowdown could never lead while measured demand rose."""
    v = analyze(_engine(slow_at, busy_at, rate__arrived_total=_arrived(busy_at)), 600, 1190, 60).verdict
    assert v.mechanism == first, v.headline
    assert f"with {TITLES[second]} contributing" in v.headline, v.headline


def _mean_hist(means: list[float], per_step: float = 100.0) -> tuple[Hist, ...]:
    """A cumulative histogram whose events in each step average `means[i]` (one bucket: only the mean is read)."""
    total = count = 0.0
    out = []
    for m in means:
        total += per_step * m
        count += per_step
        out.append(Hist((float("inf"),), (count,), total, count))
    return tuple(out)


def test_a_slowdown_within_what_the_grown_batch_makes_is_explained_not_named():
    """The deployment's own speed per batch size: a baseline whose step time grows with its running requests
    (a step is the weights read once plus each request's KV) explains a slower step at the surge's bigger batch
    (ITL up ~1.3x as the batch doubles); a step 2.2x slower than that is a slowdown of its own."""
    rows = {}
    for extra in (1.0, 2.2):
        run = [20.0 + (i % 7) for i in range(80)] + [40.0 + (i % 7) for i in range(N - 80)]
        itl = [0.02 * (1 + r / 40) * (extra if i >= 80 else 1.0) for i, r in enumerate(run)]
        ds = _engine(None, 80, rate__arrived_total=_arrived(80))
        ds.series["load.server.num_running_reqs"] = dataclasses.replace(
            ds.series["load.server.num_running_reqs"], values=tuple(run))
        rows[extra] = analyze(_with(ds, {"itl": _mean_hist(itl)}, {}), 600, 1190, 60).verdict
    alone, both = rows[1.0], rows[2.2]
    assert alone.shifts["itl_mean"].moved, alone.headline  # ITL rose past its threshold with the batch alone
    assert alone.mechanism == diagnose.OVERLOAD and "contributing" not in alone.headline, alone.headline
    assert "engine-side decode slowdown explained by overload" in alone.headline, alone.headline
    assert both.mechanism == diagnose.OVERLOAD, both.headline
    assert "with engine-side decode slowdown contributing" in both.headline, both.headline


@pytest.mark.parametrize(("itl_lag", "baseline", "named"), [(3, None, False), (-3, None, True), (3, (550, 590), True)])
def test_a_slower_step_the_batch_led_is_the_loads_swing_and_one_that_led_the_batch_is_the_engines(
        itl_lag, baseline, named):
    """Demand flat (measured arrivals), the running batch doubles at 800 s and each step is slower by what that
    batch makes on this deployment (its baseline's step time grows with its running requests). When the batch
    rose first (ITL 30 s later) it is a busy server's own swing: no decode slowdown. When the step slowed first
    (ITL 30 s earlier) the engine led, and the batch is its consequence (Little's law): a decode slowdown. A
    baseline of four points fits no speed per batch size: the physical bound that stands in (proportional) would
    explain anything, so it dismisses nothing and the slowdown is named."""
    run = [20.0 + (i % 7) for i in range(80)] + [40.0 + (i % 7) for i in range(N - 80)]
    # The step time the batch makes (with the 1 % wobble a measured mean has), its jump itl_lag steps off the batch's.
    itl = [0.02 * (1 + (20.0 if i < 80 + itl_lag else 40.0) / 40 + (i % 7) / 40) * (1 + 0.01 * ((i * 3) % 5 - 2))
           for i in range(N)]
    ds = _engine(None, None, rate__arrived_total=[2.0] * N)
    ds.series["load.server.num_running_reqs"] = dataclasses.replace(
        ds.series["load.server.num_running_reqs"], values=tuple(run))
    v = analyze(_with(ds, {"itl": _mean_hist(itl)}, {}), 600, 1190, 60, baseline=baseline).verdict
    assert v.shifts["itl_mean"].moved, v.headline  # past its threshold either way: the gate decides
    assert (v.mechanism == diagnose.DECODE_SLOWDOWN) == named, v.headline
    if not named:
        assert diagnose.DECODE_SLOWDOWN not in [m for m, _ in v.candidates], v.headline


@pytest.mark.parametrize(("itl_follows", "high"), [(False, True), (True, False)])
def test_a_decode_move_the_batch_swing_dismissed_keeps_the_cause_from_high_confidence(itl_follows, high):
    """A measured surge x3 (a strong overload) and the batch with it. With ITL flat, nothing else moved: high. With
    ITL following the batch 30 s later (the `paced` gate dismisses it by a size test, which a decode slowdown of the
    same size inside the swing would pass too), medium, as when the table explains a candidate away."""
    run = [20.0 + (i % 7) for i in range(80)] + [60.0 + (i % 7) for i in range(N - 80)]
    itl = [0.02 * (1 + ((20.0 if i < 83 or not itl_follows else 60.0) + i % 7) / 40) * (1 + 0.01 * ((i * 3) % 5 - 2))
           for i in range(N)]
    ds = _engine(None, None, rate__arrived_total=[2.0] * 80 + [6.0] * (N - 80))
    ds.series["load.server.num_running_reqs"] = dataclasses.replace(
        ds.series["load.server.num_running_reqs"], values=tuple(run))
    v = analyze(_with(ds, {"itl": _mean_hist(itl)}, {}), 600, 1190, 60).verdict
    assert v.mechanism == diagnose.OVERLOAD, v.headline
    assert v.shifts["itl_mean"].moved == itl_follows, v.headline
    assert (v.confidence == "high") == high, v.headline
