"""prometheus_client families for the request-log SLIs (promtool check metrics clean), from what
`monitor.requestlog.RequestLogReader` read (its `summaries` and `counts()`).

    slo_monitor_goodput_ratio{deployment,window}                  good / finished requests
    slo_monitor_goodput_requests_per_second{deployment,window}    good requests / window seconds
    slo_monitor_request_log_requests{deployment,window}           finished requests in the window
    slo_monitor_requests_missed{deployment,window,missed}         requests that missed a request-log SLI, or failed
    slo_monitor_request_log_sli_good_ratio{deployment,sli,window} per-SLI good ratio from the log
    slo_monitor_sli_source_disagreement_ratio{deployment,sli,window}  log ratio - histogram ratio
    slo_monitor_request_log_lines_total{deployment,target}        lines read
    slo_monitor_request_log_errors_total{deployment,target}       malformed lines skipped
    slo_monitor_request_log_finished_requests_total{deployment,target}  requests read (first reading only)
    slo_monitor_goodput_requests_total{deployment,target}         of those, succeeded and met every target
An empty window exports no ratio (never NaN), like the histogram SLIs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from monitor.conventions.names import (
    M_DISAGREEMENT,
    M_GOODPUT_RATE,
    M_GOODPUT_RATIO,
    M_GOODPUT_REQUESTS,
    M_LOG_ERRORS,
    M_LOG_FINISHED,
    M_LOG_LINES,
    M_LOG_REQUESTS,
    M_LOG_SLI_GOOD,
    M_MISSED,
)
from monitor.conventions.slis import REQUEST_SLIS
from monitor.requestlog.goodput import MISSED, WindowGoodput, disagreement
from monitor.requestlog.reader import TargetCounts
from monitor.requestlog.records import FAILED
from monitor.status_model import StatusResponse


def histogram_ratios(status: StatusResponse | None, deployment: str) -> dict[tuple[str, str], float | None]:
    """(sli, window) -> the histogram-derived good ratio the sidecar computed for `deployment`."""
    if status is None:
        return {}
    for dep in status.deployments:
        if dep.name == deployment:
            return {(s.sli, w.window): w.good_ratio for s in dep.slis for w in s.windows}
    return {}


def request_log_families(summaries: Mapping[str, Mapping[str, WindowGoodput]], counts: Iterable[TargetCounts],
                         status: StatusResponse | None = None) -> list[Metric]:
    """The request-log families of every deployment; `status` (the histogram SLIs) adds the source
    disagreement. No request-log target: no family."""
    counts = list(counts)
    if not counts:
        return []
    DW, DSW = ["deployment", "window"], ["deployment", "sli", "window"]
    ratio = GaugeMetricFamily(M_GOODPUT_RATIO, "Share of requests finished in the window that succeeded and met "
                              "every latency SLO of the deployment (goodput ratio, from the request log).", labels=DW)
    rate = GaugeMetricFamily(M_GOODPUT_RATE, "Requests per second that succeeded and met every latency SLO "
                             "(goodput), over the window.", labels=DW)
    total = GaugeMetricFamily(M_LOG_REQUESTS, "Requests finished in the window, from the request log.", labels=DW)
    missed = GaugeMetricFamily(M_MISSED, f"Requests finished in the window that missed an SLO "
                               f"({', '.join(REQUEST_SLIS)}) or {FAILED}; a request can miss several.",
                               labels=[*DW, "missed"])
    sli_good = GaugeMetricFamily(M_LOG_SLI_GOOD, "Per-SLI good ratio computed per request from the request log, "
                                 "over the population SGLang's histogram observes.", labels=DSW)
    disagree = GaugeMetricFamily(M_DISAGREEMENT, "Request-log good ratio minus histogram good ratio of the SLI "
                                 "over the window (bucket interpolation, lost lines or scrape gaps show here).",
                                 labels=DSW)
    lines = CounterMetricFamily(M_LOG_LINES, "Lines read from the target's request-metrics files.",
                                labels=["deployment", "target"])
    errors = CounterMetricFamily(M_LOG_ERRORS, "Malformed lines of the target's request-metrics files "
                                 "(skipped).", labels=["deployment", "target"])
    finished = CounterMetricFamily(M_LOG_FINISHED, "Finished requests read from the target's request-metrics "
                                   "files (lines re-read after a restart are not counted again).",
                                   labels=["deployment", "target"])
    good = CounterMetricFamily(M_GOODPUT_REQUESTS, "Finished requests from the target's request-metrics files "
                               "that succeeded and met every latency SLO of the deployment (goodput).",
                               labels=["deployment", "target"])
    for dep, windows in summaries.items():
        for w in windows.values():
            lw = [dep, w.window]
            total.add_metric(lw, float(w.requests))
            rate.add_metric(lw, w.rate)
            if w.ratio is not None:
                ratio.add_metric(lw, w.ratio)
            for m in MISSED:
                missed.add_metric([*lw, m], float(w.missed.get(m, 0)))
            for sli in w.sli_events:
                r = w.sli_good_ratio(sli)
                if r is not None:
                    sli_good.add_metric([dep, sli, w.window], r)
        for (sli, window), diff in sorted(disagreement(windows, histogram_ratios(status, dep)).items()):
            disagree.add_metric([dep, sli, window], diff)
    for c in counts:
        lines.add_metric([c.deployment, c.target], float(c.lines))
        errors.add_metric([c.deployment, c.target], float(c.errors))
        finished.add_metric([c.deployment, c.target], float(c.finished))
        good.add_metric([c.deployment, c.target], float(c.good))
    return [ratio, rate, total, missed, sli_good, disagree, lines, errors, finished, good]
