"""histogram_quantile semantics, merging, good ratios on and off bucket edges."""

from __future__ import annotations

import math

from monitor.slo.histogram import Hist, delta, good_ratio, merge, quantile, suggest_edges

INF = math.inf
H = Hist((0.1, 0.5, 1.0, 2.5, INF), (1, 3, 4, 5, 6), 5.45, 6)  # obs .05 .2 .3 .7 1.2 3.0


def test_quantiles_match_prometheus_2_42_on_its_documented_example():
    # reference/real_components.md §2: q=0.1 -> 0.06, 0.5 -> 0.5, 0.8 -> 2.2, 0.9/0.99 -> 2.5
    assert math.isclose(quantile(0.1, H), 0.06)
    assert math.isclose(quantile(0.5, H), 0.5)
    assert math.isclose(quantile(0.8, H), 2.2)
    assert quantile(0.9, H) == 2.5 and quantile(0.99, H) == 2.5
    assert quantile(-0.1, H) == -INF and quantile(1.1, H) == INF


def test_empty_histogram_has_no_quantile_and_no_ratio():
    empty = Hist((0.1, INF), (0, 0), 0, 0)
    assert quantile(0.5, empty) is None and good_ratio(empty, 0.1) is None


def test_good_ratio_exact_on_edge():
    gr = good_ratio(H, 0.5)
    assert gr.exact and gr.value == gr.lower == gr.upper == 3 / 6


def test_good_ratio_interpolated_and_bounded_off_edge():
    gr = good_ratio(H, 0.75)  # halfway between 0.5 (3) and 1.0 (4)
    assert not gr.exact and math.isclose(gr.value, 3.5 / 6)
    assert gr.lower == 3 / 6 and gr.upper == 4 / 6


def test_good_ratio_beyond_last_finite_edge_is_conservative():
    gr = good_ratio(H, 10.0)
    assert gr.value == gr.lower == 5 / 6 and gr.upper == 1.0


def test_merge_uses_common_edges_only():
    a = Hist((0.1, 0.5, INF), (1, 2, 3), 1.0, 3)
    b = Hist((0.1, 0.2, INF), (2, 3, 4), 2.0, 4)
    m = merge([a, b])
    assert m.edges == (0.1, INF) and m.cumulative == (3, 7) and m.count == 7 and m.sum == 3.0


def test_delta_never_negative():
    d = delta(Hist((1, INF), (1, 2), 1, 2), Hist((1, INF), (3, 4), 3, 4))
    assert d.cumulative == (0, 0) and d.count == 0


def test_suggested_edges_insert_the_target():
    assert 0.05 in suggest_edges([0.04, 0.06], 0.05)
