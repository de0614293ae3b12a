"""Histogram assembly: order-independent, `le` spellings, bad histograms rejected."""

from __future__ import annotations

import math

import pytest

from monitor.parse.exposition import parse
from monitor.parse.families import HistogramError, group_histograms, histogram_warnings
from tests.conftest import DOCS_SAMPLE, ROUTER_ENGINE


def test_docs_sample_with_le_first_and_sum_first():
    expo = parse(DOCS_SAMPLE.read_text())
    (h,) = group_histograms(expo.selected, "sglang:time_to_first_token_seconds")
    assert h.count == 11008 and math.isclose(h.sum, 2.3518979474117756e06)
    assert h.edges[-1] == math.inf and h.cumulative[h.edges.index(1.0)] == 27


def test_router_engine_metrics_le_without_decimal_point():
    expo = parse(ROUTER_ENGINE.read_text())
    series = group_histograms(expo.selected, "sglang:time_to_first_token_seconds")
    assert len(series) == 2  # one per worker_addr
    assert all(h.cumulative[h.edges.index(1.0)] == 27 for h in series)


def test_non_monotone_buckets_are_rejected():
    text = 'h_bucket{le="1"} 5\nh_bucket{le="2"} 3\nh_bucket{le="+Inf"} 6\nh_count 6\nh_sum 1\n'
    with pytest.raises(HistogramError, match="not monotone"):
        group_histograms(parse(text).selected, "h")


def test_missing_inf_bucket_is_rejected():
    with pytest.raises(HistogramError, match=r"\+Inf"):
        group_histograms(parse('h_bucket{le="1"} 5\n').selected, "h")


def test_negative_bucket_counts_are_rejected():
    with pytest.raises(HistogramError, match="negative"):
        group_histograms(parse('h_bucket{le="1"} -1\nh_bucket{le="+Inf"} 1\n').selected, "h")


def test_duplicate_bucket_is_rejected():
    with pytest.raises(HistogramError, match="duplicate"):
        group_histograms(parse('h_bucket{le="1"} 1\nh_bucket{le="1.0"} 1\nh_bucket{le="+Inf"} 1\n').selected, "h")


def test_nan_count_is_rejected():
    text = 'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 1\nh_count NaN\nh_sum 1\n'
    with pytest.raises(HistogramError, match="NaN"):
        group_histograms(parse(text).selected, "h")


def test_nan_bucket_edge_is_rejected_naming_the_family():
    # NaN != NaN: accepted, such an edge made every scrape look like a counter reset (phantom events).
    text = 'h_bucket{le="1"} 1\nh_bucket{le="NaN"} 1\nh_bucket{le="+Inf"} 1\nh_count 1\nh_sum 1\n'
    with pytest.raises(HistogramError, match=r'^h_bucket.*le="NaN" is not a bucket edge'):
        group_histograms(parse(text).selected, "h")


@pytest.mark.parametrize("bucket, count", [("+Inf", "1"), ("1", "+Inf"), ("-Inf", "1"), ("1", "-Inf")])
def test_non_finite_bucket_values_and_counts_are_rejected(bucket, count):
    text = f'h_bucket{{le="1"}} 0\nh_bucket{{le="+Inf"}} {bucket}\nh_count {count}\nh_sum 1\n'
    with pytest.raises(HistogramError, match=r"^h\{\}: (bucket count|_count) [+-]Inf is not a finite"):
        group_histograms(parse(text).selected, "h")


def test_a_consistent_histogram_has_no_warnings():
    text = 'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_count 2\nh_sum 1.5\n'
    (h,) = group_histograms(parse(text).selected, "h")
    assert histogram_warnings(h) == []


@pytest.mark.parametrize("tail, expected", [
    ("h_count 3\nh_sum 1.5\n", "_count 3 disagrees with the +Inf bucket 2"),
    ("h_count 2\n", "no _sum: no mean reported"),
    ("h_count 2\nh_sum NaN\n", "_sum is NaN: no mean reported"),
    ("h_count 2\nh_sum +Inf\n", "_sum is +Inf: no mean reported"),
])
def test_count_off_the_inf_bucket_or_a_missing_sum_is_flagged(tail, expected):
    (h,) = group_histograms(parse('h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\n' + tail).selected, "h")
    (warning,) = histogram_warnings(h)
    assert warning.startswith("h{}: ") and expected in warning
