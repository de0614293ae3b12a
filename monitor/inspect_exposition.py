"""`slo-monitor inspect`: one exposition in, one JSON summary out (the issue-2 contract)."""

from __future__ import annotations

import math
from typing import Any

from monitor.conventions.names import COUNTERS, GAUGES
from monitor.conventions.slis import REQUEST_ROLES, SLI_FAMILIES
from monitor.parse.exposition import Sample, parse
from monitor.parse.families import engine_wanted, group_histograms, histogram_warnings, scalar_series
from monitor.parse.gateway import ROUTER_WANTED, detect_gateway, router_summary, split_workers
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


def histogram_summary(samples: list[Sample], family: str) -> dict[str, Any] | None:
    series = group_histograms(samples, family)
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
    """A gateway's /engine_metrics (series labelled worker_addr) is read as the sidecar reads it: latency
    and request counters from the mixed and decode workers only (a PD request passes both servers), and
    each worker is listed with the role its engine_type names. A gateway's own listener gets a `gateway`
    summary (workers, healthy, circuit open, requests) and says which gateway wrote it (`gateway_version`:
    smg-1.13, sglang-router-0.3.2, or null when it cannot tell)."""
    expo = parse(text, engine_wanted() | ROUTER_WANTED, content_type=content_type)
    workers = split_workers(s for s in expo.selected if s.name.startswith("sglang:"))
    merged = any(workers)  # some series carry a worker_addr: a gateway's merge of its workers
    counted = ([s for role, own in workers.values() if (role or "server") in REQUEST_ROLES for s in own]
               if merged else expo.selected)
    counters: dict[str, Any] = {}
    for key in INSPECT_COUNTERS:
        found = scalar_series(counted, COUNTERS[key])
        counters[key] = _num(sum(s.value for s in found)) if found else None
    gauges: dict[str, Any] = {}
    for key in INSPECT_GAUGES:
        found = scalar_series(expo.selected, GAUGES[key])
        gauges[key] = _num(sum(s.value for s in found)) if found else None
    out: dict[str, Any] = {
        "format": expo.format,
        "families": expo.families,
        "samples": expo.samples,
        "latency": {sli: histogram_summary(counted, fam) for sli, fam in SLI_FAMILIES.items()},
        "counters": counters,
        "gauges": gauges,
    }
    if merged:
        out["workers"] = [{"worker_addr": addr, "role": role} for addr, (role, _) in sorted(workers.items())]
    if any(s.name.startswith("smg_") for s in expo.selected):
        out["gateway"] = router_summary(expo.selected)
        out["gateway_version"] = detect_gateway(expo.selected)
    return out
