"""The pure pieces: time parsing, step choice, correlation and lag, the breach timeline, the ranking."""

from __future__ import annotations

import math

import pytest

from monitor.analyze.correlate import best_lag, pearson, rank, ranks, spearman
from monitor.analyze.model import Dataset, Series, SliSpec, choose_step, grid, sample
from monitor.analyze.report import analyze
from monitor.analyze.timeparse import iso, parse_time
from monitor.slo.histogram import Hist

NOW = 1_700_000_000.0


@pytest.mark.parametrize(("text", "want"), [
    ("now", NOW), ("-2h", NOW - 7200), ("now-30m", NOW - 1800), ("now+90s", NOW + 90),
    ("1699990000", 1699990000.0), ("2023-11-14T22:13:20Z", NOW), ("2023-11-14T23:13:20+01:00", NOW),
    ("2023-11-14T22:13:20", NOW),
])
def test_parse_time_accepts_rfc3339_unix_and_relative(text, want):
    assert parse_time(text, NOW) == want


def test_parse_time_rejects_garbage_with_the_accepted_forms():
    with pytest.raises(ValueError, match="RFC3339"):
        parse_time("yesterday", NOW)
    assert iso(NOW) == "2023-11-14T22:13:20Z"


def test_step_is_span_over_300_rounded_up_and_never_below_the_scrape_interval():
    assert choose_step(3600, 15) == 15  # 12 s -> 15
    assert choose_step(6 * 3600, 15) == 120  # 72 s -> 120
    assert choose_step(30, 1) == 1
    assert choose_step(600, 30) == 30
    assert choose_step(30, 0.5) == 0.5  # sub-second scrapes (`500ms`) keep their resolution


def test_sample_steps_values_onto_the_grid_and_drops_stale_ones():
    times = grid(0, 40, 10)
    assert times == (0, 10, 20, 30, 40)
    assert sample([(1, 1.0), (12, 2.0)], times, 18) == (None, 1.0, 2.0, 2.0, None)


def test_correlations_and_lag_sign():
    x = [0, 0, 0, 0, 1, 2, 3, 4, 4, 4, 0, 0, 0, 0, 0, 0]
    y = [0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 4, 4, 0, 0, 0, 0]  # x two steps later
    assert pearson(x, x) == pytest.approx(1.0) and spearman(x, [-v for v in x]) == pytest.approx(-1.0)
    assert ranks([3, 1, 3, 2]) == [2.5, 0.0, 2.5, 1.0]
    k, r = best_lag(x, y, 4)
    assert k == 2 and r == pytest.approx(1.0)  # x leads y by two steps
    assert best_lag(y, x, 4)[0] == -2
    assert spearman([1, 1, 1, 1, 1, 1, 1], y[:7]) is None  # flat: no correlation at all


def _hist(bad: float, good: float) -> Hist:
    # Edges 0.05 and 0.1 s: target 0.05 s; `good` at or under it, `bad` above.
    return Hist((0.05, 0.1, math.inf), (good, good + bad, good + bad), 0.04 * good + 0.08 * bad, good + bad)


def _dataset() -> Dataset:
    """60 steps of 10 s; from step 30 to 39 half the events are slow. A cause moves 2 steps before,
    a consequence 3 steps after, a distractor is noise."""
    n = 60
    times = grid(0, (n - 1) * 10, 10)
    hists, good, bad = [], 0.0, 0.0
    for i in range(n):
        slow = 30 <= i < 40
        good += 50 if slow else 100
        bad += 50 if slow else 0
        hists.append(_hist(bad, good))
    cause = tuple(float(10 if 28 <= i < 38 else (i * 7) % 3 * 0.1) for i in range(n))
    after = tuple(float(8 if 33 <= i < 43 else (i * 5) % 3 * 0.1) for i in range(n))
    noise = tuple(float((i * 13) % 7) for i in range(n))
    series = {k: Series(k, k, "x", "", v) for k, v in (("cause", cause), ("after", after), ("noise", noise))}
    return Dataset("d", "test", times, 10.0, {"tpot": tuple(hists)}, series, {"tpot": SliSpec("tpot", 0.05, 0.99)})


def test_timeline_and_ranking_on_a_synthetic_incident():
    ds = _dataset()
    rep = analyze(ds, 200, 590, window=30)
    tpot = rep.slis["tpot"]
    [ep] = tpot.episodes
    assert ep.start == 300 and ep.onset == 300  # first step whose events were slow
    assert ep.end == 420  # the 30 s window still holds slow events until 390 + 30
    assert ep.peak_burn == pytest.approx(50.0)  # half bad against a 1 % allowance
    # 10 steps of 10 s at burn 50 out of a 30-day period.
    assert ep.budget_spent == pytest.approx(10 * 10 * 50 / (30 * 86400))
    assert [c.key for c in tpot.ranking][:2] == ["cause", "after"]
    cause, after = tpot.ranking[0], tpot.ranking[1]
    assert cause.moved_first and cause.lead_seconds == 20 and cause.lag_steps == 2
    assert not after.moved_first and after.lead_seconds == -30
    assert tpot.first_mover is cause
    assert tpot.comparison.incident.p50 > tpot.comparison.baseline.p50


def test_rank_leaves_out_flat_series():
    ds = _dataset()
    flat = Series("flat", "flat", "x", "", tuple(1.0 for _ in ds.times))
    y = tuple(float(i % 2) for i in range(len(ds.times)))
    out = rank([flat], y, ds.times, range(0, 20), range(20, 40), range(0, 40), None, 10.0)
    assert out == []
