"""`slo-monitor inspect`: one exposition in, one JSON summary out (the issue-2 contract)."""

from __future__ import annotations

import math
from typing import Any

from monitor.conventions import COUNTERS, GAUGES, SLI_FAMILIES
from monitor.parse.exposition import Exposition, parse
from monitor.parse.families import engine_wanted, group_histograms, histogram_warnings, scalar_series
from monitor.slo.histogram import Hist, mean, merge, quantile

INSPECT_COUNTERS = ("requests_total", "prompt_tokens_total", "generation_tokens_total", "aborted_requests_total")
INSPECT_GAUGES = ("num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput")


def _num(x: float | None) -> float | str | None:
    """JSON has no NaN/Infinity: they are spelled as the exposition spells them."""
    if x is None:
        return None
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return x


def histogram_summary(expo: Exposition, family: str) -> dict[str, Any] | None:
    series = group_histograms(expo.selected, family)
    if not series:
        return None
    h = merge(Hist(s.edges, s.cumulative, s.sum, s.count) for s in series)
    buckets: list[list[Any]] = [["+Inf" if e == math.inf else e, c] for e, c in zip(h.edges, h.cumulative)]
    return {
        "count": h.count,
        "sum": _num(h.sum),
        "mean": _num(mean(h)),
        "p50": _num(quantile(0.5, h)),
        "p90": _num(quantile(0.9, h)),
        "p99": _num(quantile(0.99, h)),
        "buckets": buckets,
        "warnings": [w for s in series for w in histogram_warnings(s)],
    }


def inspect_text(text: str, content_type: str = "") -> dict[str, Any]:
    expo = parse(text, engine_wanted(), content_type=content_type)
    counters: dict[str, Any] = {}
    for key in INSPECT_COUNTERS:
        found = scalar_series(expo.selected, COUNTERS[key])
        counters[key] = _num(sum(s.value for s in found)) if found else None
    gauges: dict[str, Any] = {}
    for key in INSPECT_GAUGES:
        found = scalar_series(expo.selected, GAUGES[key])
        gauges[key] = _num(sum(s.value for s in found)) if found else None
    return {
        "format": expo.format,
        "families": expo.families,
        "samples": expo.samples,
        "latency": {sli: histogram_summary(expo, fam) for sli, fam in SLI_FAMILIES.items()},
        "counters": counters,
        "gauges": gauges,
    }
