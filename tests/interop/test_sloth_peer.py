"""Sloth as a peer (docs/sloth-comparison.md): the real Sloth 0.16's rules, from the specs `generate --format sloth`
writes, and ours, evaluated together on one Prometheus rule engine (2.42 and 3) over an emulated TPOT regression.
Where the definitions match they agree to 1e-9 at every evaluation and fire at the same evaluations; where they do not
(the period SLI, windows without traffic) each side is exactly its documented definition."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from monitor.conventions.policy import RULE_WINDOWS
from tests.components import PROMETHEUS_3, SLOTH, Build
from tools.sloth_compare.compare import (
    PERIOD,
    Readout,
    alert_rows,
    evaluate,
    gap,
    period_check,
    slos,
    window_rows,
)
from tools.sloth_compare.history import IDLE, IDLE_AT, REGRESSION_AT, STEP, History, run_history
from tools.sloth_compare.report import DOC, TOLERANCE, prometheus_version, render

_READOUTS: dict[str, Readout] = {}


@pytest.fixture(scope="module")
def history() -> History:
    return run_history()  # ~35 s: once for every Prometheus build


def _readout(history: History, build: Build, tmp_path: Path) -> Readout:
    if not SLOTH.exists():
        pytest.fail(f"{SLOTH} is missing (make go-tools)")
    if build.name not in _READOUTS:
        _READOUTS[build.name] = evaluate(history, str(SLOTH), build.tool, tmp_path)
    return _READOUTS[build.name]


def test_sloth_and_our_rules_agree_per_window_and_fire_at_the_same_evaluations(history: History,
                                                                               prometheus_build: Build, tmp_path: Path):
    r = _readout(history, prometheus_build, tmp_path)
    keys = slos(history)
    assert {sli for _, sli in keys} == {"ttft", "tpot", "e2e", "goodput"}
    idle_5m = 0
    for row in window_rows(r, keys):
        assert row.evaluations > 0.9 * r.steps, row
        assert row.max_error_diff <= TOLERANCE and row.max_burn_diff <= TOLERANCE, row
        assert row.mismatched == 0, row
        # 0/0 while the idle deployment has no traffic: NaN for Sloth, nothing for us (5m only: 20 idle minutes).
        if row.deployment == IDLE and row.window == "5m":
            idle_5m += row.nan_vs_absent
        else:
            assert row.nan_vs_absent == 0, row
    assert idle_5m > 0
    # Sloth's own 5m and period burn rates are its error ratio / its budget: the burn rate compared above.
    for key, series in r.sloth_current_burn.items():
        assert all(gap(v, r.sloth_burn((*key, "5m"))[s]) <= 1e-12 for s, v in series.items()), key
    for key, series in r.sloth_period_burn.items():
        assert all(gap(v, r.sloth_burn((*key, PERIOD))[s]) <= 1e-12 for s, v in series.items()), key
    alerts = alert_rows(r, keys)
    assert all(a.ours == a.sloth for a in alerts), [a for a in alerts if a.ours != a.sloth]
    # The regression is seen: both page on TPOT of both deployments, within minutes, and stop after it ends.
    for a in alerts:
        if a.sli == "tpot" and a.severity == "page":
            (fired, resolved), = a.ours
            assert REGRESSION_AT // STEP < fired < REGRESSION_AT // STEP + 15 and resolved is not None, a
    assert any(a.ours for a in alerts if a.severity == "ticket")


def test_the_period_sli_differs_as_documented(history: History, prometheus_build: Build, tmp_path: Path):
    """Ours is traffic-weighted, Sloth's the mean of its 5m ratios (and NaN for the period once one 5m window had
    no traffic): each side is exactly its definition, and they are not the same number."""
    r = _readout(history, prometheus_build, tmp_path)
    for key in slos(history):
        ours_gap, sloth_gap = period_check(r, key)
        assert ours_gap <= TOLERANCE and sloth_gap <= TOLERANCE, key
    tpot = [row for row in window_rows(r, slos(history), (PERIOD,)) if row.sli == "tpot"]
    assert all(row.max_error_diff > 1e-4 for row in tpot), tpot
    last = r.steps - 1
    for dep in (d.name for d in history.config.deployments):
        ours, sloth = r.ours_error[(dep, "tpot", PERIOD)][last], r.sloth_error[(dep, "tpot", PERIOD)][last]
        assert math.isfinite(ours)
        assert math.isnan(sloth) == (dep == IDLE), (dep, sloth)
    assert not math.isnan(r.sloth_error[(IDLE, "tpot", PERIOD)][IDLE_AT // STEP])


def test_the_committed_comparison_is_what_the_command_writes(history: History, tmp_path: Path):
    build = PROMETHEUS_3.require()
    text = render(history, _readout(history, build, tmp_path), prometheus_version(build.tool))
    assert DOC.read_text() == text, "docs/sloth-comparison.md drifted: run make sloth-compare"
    for window in RULE_WINDOWS:
        assert f"| unified tpot | {window} |" in text and f"| pd tpot | {window} |" in text
