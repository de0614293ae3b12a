"""SLO state as pure functions of window history: burn rate, budget, windows, warming up, missing data."""

from __future__ import annotations

import math

import pytest

from monitor.config import Deployment
from monitor.conventions.slis import DEFAULT_BUCKETS
from monitor.slo.histogram import Hist
from monitor.slo.state import (
    budget_remaining,
    burn_rate,
    compute_sli_states,
    fix_flag_for,
    good_total,
    window_state,
)
from monitor.slo.windows import BudgetPoint, Snapshot, SnapshotStore

EDGES = (0.02, 0.04, 0.08, math.inf)


def hist(cum: tuple[float, ...], total_sum: float = 0.0) -> Hist:
    return Hist(EDGES, cum, total_sum, cum[-1])


def test_burn_rate_is_the_bad_share_over_the_budget_and_zero_without_events():
    assert burn_rate(0.98, 0.99) == pytest.approx(2.0)
    assert burn_rate(1.0, 0.99) == 0.0
    assert burn_rate(None, 0.99) == 0.0  # an empty window never pages


def test_budget_remaining_over_the_period_and_none_without_traffic():
    assert budget_remaining((990.0, 1000.0), (0.0, 0.0), 0.99) == pytest.approx(0.0)  # exactly spent
    assert budget_remaining((1985.0, 2000.0), (995.0, 1000.0), 0.99) == pytest.approx(0.0)  # from the start point
    assert budget_remaining((100.0, 100.0), None, 0.99) == pytest.approx(1.0)
    assert budget_remaining((5.0, 5.0), (5.0, 5.0), 0.99) is None
    assert budget_remaining((0.0, 100.0), None, 0.99) == pytest.approx(-99.0)  # overspent shows how much


def test_good_total_counts_events_at_or_under_the_target():
    assert good_total(hist((2.0, 5.0, 9.0, 10.0)), 0.04) == (5.0, 10.0)
    assert good_total(hist((0.0, 0.0, 0.0, 0.0)), 0.04) == (0.0, 0.0)


def test_fix_flag_names_the_sglang_flag_only_off_the_edges():
    edges = (*DEFAULT_BUCKETS["tpot"], math.inf)
    assert fix_flag_for("tpot", 0.04, edges) is None
    flag = fix_flag_for("tpot", 0.05, edges)
    assert flag is not None and flag.startswith("--bucket-inter-token-latency ") and " 0.05 " in f" {flag} "


def test_window_state_is_the_delta_between_two_cumulative_histograms():
    w = window_state("5m", 300, hist((10.0, 20.0, 30.0, 40.0), 2.0), hist((5.0, 10.0, 15.0, 20.0), 1.0), 300,
                     0.04, 0.9)
    assert w.events == 20 and w.good_ratio == pytest.approx(0.5) and w.burn_rate == pytest.approx(5.0)
    assert w.mean == pytest.approx(1.0 / 20)


def _dep(**kw) -> Deployment:
    return Deployment(name="d", tpot_target_seconds=0.04, objective=0.9, buckets={"tpot": list(EDGES[:-1])}, **kw)


def test_with_fewer_than_two_snapshots_every_window_has_no_data_not_an_empty_one():
    store = SnapshotStore()
    for st in (compute_sli_states(_dep(), store, 100.0)["tpot"],
               (store.append(Snapshot(0.0, {}, {}), BudgetPoint(0.0, {})),
                compute_sli_states(_dep(), store, 10.0)["tpot"])[1]):
        assert st.target_seconds == 0.04 and st.budget_remaining is None
        for w in st.windows.values():
            assert math.isnan(w.events) and math.isnan(w.burn_rate) and w.good_ratio is None
            assert w.covered_seconds == 0 and set(w.quantiles.values()) == {None}


def test_an_sli_not_yet_observed_has_empty_windows_not_a_ratio():
    store = SnapshotStore()
    store.append(Snapshot(0.0, {}, {}), BudgetPoint(0.0, {}))
    store.append(Snapshot(5.0, {}, {}), BudgetPoint(5.0, {}))
    st = compute_sli_states(_dep(), store, 10.0)["tpot"]
    w = st.windows["5m"]
    assert w.events == 0 and w.good_ratio is None and w.burn_rate == 0.0 and st.budget_remaining is None


def test_a_window_after_the_last_snapshot_has_no_data():
    """Scraping stopped 10 minutes ago: the 5m window measured nothing; the 1h one still holds data."""
    store = SnapshotStore()
    for ts, cum in ((0.0, (0.0, 0.0, 0.0, 0.0)), (60.0, (4.0, 8.0, 9.0, 10.0))):
        store.append(Snapshot(ts, {"tpot": hist(cum)}, {}), BudgetPoint(ts, {"tpot": good_total(hist(cum), 0.04)}))
    st = compute_sli_states(_dep(), store, 660.0, {"5m": 300, "1h": 3600})["tpot"]
    assert math.isnan(st.windows["5m"].events) and math.isnan(st.windows["5m"].burn_rate)
    assert st.windows["1h"].events == 10


def test_a_window_longer_than_the_history_reports_what_it_covers():
    store = SnapshotStore()
    for ts, cum in ((0.0, (0.0, 0.0, 0.0, 0.0)), (60.0, (4.0, 8.0, 9.0, 10.0))):
        store.append(Snapshot(ts, {"tpot": hist(cum)}, {}), BudgetPoint(ts, {"tpot": good_total(hist(cum), 0.04)}))
    st = compute_sli_states(_dep(), store, 60.0, {"5m": 300, "1h": 3600})["tpot"]
    assert st.windows["5m"].covered_seconds == 60 and st.windows["1h"].covered_seconds == 60
    assert st.windows["1h"].events == 10 and st.windows["1h"].good_ratio == pytest.approx(0.8)
    assert st.exact and st.budget_remaining == pytest.approx(1 - 0.2 / 0.1)
