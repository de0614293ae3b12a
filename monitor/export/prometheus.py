"""The sidecar's own `/metrics`: a prometheus_client custom collector over the latest state.

Everything is in base units with Prometheus naming (promtool check metrics clean). An empty
window exports no SLI, no quantile and a zero burn rate: never NaN, never a false page. A value the
engine could not compute (null in /api/v1/status) is left out, never exported as 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor.conventions import names as N
from monitor.status_model import StatusResponse


def _ok(x: float | None) -> bool:
    return x is not None and not math.isnan(x) and not math.isinf(x)


def _add(family: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    """A value the engine could not compute (None, from NaN) is left out, never sent as 0."""
    if _ok(value):
        family.add_metric(labels, value)  # type: ignore[arg-type]


def _fmt_q(q: float) -> str:
    return f"{q:g}"


def families_from_status(status: StatusResponse) -> Iterator[Metric]:
    D, DS, DSW = ["deployment"], ["deployment", "sli"], ["deployment", "sli", "window"]
    target = GaugeMetricFamily(N.M_SLI_TARGET, "SLO latency target of each SLI, from the recipe or config.", labels=DS)
    objective = GaugeMetricFamily(N.M_OBJECTIVE, "SLO objective: share of events that must meet the target (availability: succeed).", labels=DS)
    edge = GaugeMetricFamily(N.M_TARGET_IS_EDGE, "1 when the target is a bucket edge of SGLang's histogram (exact SLI), 0 when interpolated.", labels=DS)
    good = GaugeMetricFamily(N.M_GOOD_RATIO, "Share of events in the window at or under the target (SLI); for availability, of requests without a server-side failure.", labels=DSW)
    lower = GaugeMetricFamily(N.M_GOOD_RATIO_LOWER, "Lower bound of the SLI when the target is not a bucket edge.", labels=DSW)
    upper = GaugeMetricFamily(N.M_GOOD_RATIO_UPPER, "Upper bound of the SLI when the target is not a bucket edge.", labels=DSW)
    events = GaugeMetricFamily(N.M_EVENTS, "Events (requests, or tokens for ITL; for availability the requests the gateway answered) observed in the window.", labels=DSW)
    burn = GaugeMetricFamily(N.M_BURN_RATE, "Error-budget burn rate over the window: (1 - SLI) / (1 - objective).", labels=DSW)
    budget = GaugeMetricFamily(N.M_BUDGET_REMAINING, "Error budget left over the SLO period (or the history the sidecar has), as a ratio; negative when overspent.", labels=DS)
    # A summary per window: quantiles (histogram_quantile semantics) plus the window's sum and count.
    quant = Metric(N.M_LATENCY_QUANTILE, "Latency over the window: quantiles interpolated from SGLang's buckets, sum and count of the window's events.", "summary")
    mean = GaugeMetricFamily(N.M_LATENCY_MEAN, "Mean latency over the window (sum / count).", labels=DSW)
    load = GaugeMetricFamily(N.M_LOAD, "SGLang load gauges per deployment and role (summed per DP rank; ratios take the max).", labels=["deployment", "role", "metric"])
    rates = GaugeMetricFamily(f"{N.NS}_deployment_rate_per_second", "Per-second rate over 5m of SGLang counters, reset-aware.", labels=["deployment", "counter"])
    leading = GaugeMetricFamily(N.M_TPOT_LEADING, "Seconds per output token of the requests running now, ahead of TPOT (observed at finish): source itl (mean ITL over the last minute), gen_throughput (running / generated tokens per second) or max (the larger).", labels=["deployment", "source"])
    closed = GaugeMetricFamily(N.M_CLIENT_CLOSED, "Requests whose client closed the connection before the end of the answer, in the window: the gateway's 499 client_closed_request answers on serving paths (smg 1.13; sglang-router 0.3.2 counts them 200). No server-side failure, but lost goodput.", labels=["deployment", "window"])
    closed_ratio = GaugeMetricFamily(N.M_CLIENT_CLOSED_RATIO, "Share of the gateway's answers on serving paths in the window whose client closed the connection first (smg 1.13).", labels=["deployment", "window"])
    aborted = GaugeMetricFamily(N.M_ABORTED, "Requests SGLang aborted in the window (sglang:num_aborted_requests_total on the servers that answer requests): mostly clients gone, also the /abort_request API.", labels=["deployment", "window"])
    info = GaugeMetricFamily(N.M_DEPLOYMENT_INFO, "Deployment identity from the recipe.", labels=[*D, "model", "hardware", "mode", "cards"])
    up = GaugeMetricFamily(N.M_TARGET_UP, "1 when the last scrape of the target succeeded.", labels=["deployment", "role", "target"])
    dur = GaugeMetricFamily(N.M_SCRAPE_DURATION, "Duration of the last scrape of the target.", labels=["deployment", "role", "target"])
    samples = GaugeMetricFamily(N.M_SCRAPE_SAMPLES, "Samples in the last successful scrape.", labels=["deployment", "role", "target"])
    size = GaugeMetricFamily(N.M_SCRAPE_BYTES, "Bytes in the last successful scrape.", labels=["deployment", "role", "target"])
    last = GaugeMetricFamily(N.M_LAST_SUCCESS, "Unix time of the last successful scrape.", labels=["deployment", "role", "target"])
    scrapes = CounterMetricFamily(N.M_SCRAPES, "Scrapes attempted.", labels=["deployment", "role", "target"])
    errors = CounterMetricFamily(N.M_SCRAPE_ERRORS, "Scrapes that failed (down, slow, too big, malformed).", labels=["deployment", "role", "target"])
    churned = CounterMetricFamily(N.M_SERIES_RETIRED_EARLY, "Series retired before their expiry for label churn "
                                  "(absent ones outnumbering the present ones 4 times over).",
                                  labels=["deployment", "role", "target"])
    resets = CounterMetricFamily(N.M_COUNTER_RESETS, "Restarts of the target seen as counter resets (SGLang starts a fresh multiprocess dir).", labels=["deployment", "role", "target"])

    for dep in status.deployments:
        info.add_metric([dep.name, dep.model, dep.hardware, dep.mode, str(dep.cards or "")], 1.0)
        for s in dep.slis:
            ls = [dep.name, s.sli]
            target.add_metric(ls, s.target_seconds)
            objective.add_metric(ls, s.objective)
            edge.add_metric(ls, 1.0 if s.target_is_bucket_edge else 0.0)
            _add(budget, ls, s.error_budget_remaining)
            for w in s.windows:
                lw = [*ls, w.window]
                _add(events, lw, w.events)
                _add(burn, lw, w.burn_rate)
                _add(good, lw, w.good_ratio)
                if _ok(w.good_ratio) and not s.target_is_bucket_edge and _ok(w.good_ratio_lower) \
                        and _ok(w.good_ratio_upper):
                    lower.add_metric(lw, w.good_ratio_lower)  # type: ignore[arg-type]
                    upper.add_metric(lw, w.good_ratio_upper)  # type: ignore[arg-type]
                lab = {"deployment": dep.name, "sli": s.sli, "window": w.window}
                for q, v in ((0.5, w.p50_seconds), (0.9, w.p90_seconds), (0.99, w.p99_seconds)):
                    if _ok(v):
                        quant.add_sample(N.M_LATENCY_QUANTILE, {**lab, "quantile": _fmt_q(q)}, v)  # type: ignore[arg-type]
                if _ok(w.events):
                    quant.add_sample(N.M_LATENCY_QUANTILE + "_count", lab, w.events)  # type: ignore[arg-type]
                    # No events sum to 0 s; events without a mean (no _sum scraped) have no sum.
                    total = 0.0 if not w.events else (w.mean_seconds or math.nan) * w.events  # type: ignore[operator]
                    if _ok(total):
                        quant.add_sample(N.M_LATENCY_QUANTILE + "_sum", lab, total)
                if _ok(w.mean_seconds):
                    mean.add_metric(lw, w.mean_seconds)  # type: ignore[arg-type]
        a = dep.availability
        if a is not None:  # the availability SLI, under the same families as the latency SLIs (sli label)
            ls = [dep.name, a.sli]
            objective.add_metric(ls, a.objective)
            _add(budget, ls, a.error_budget_remaining)
            for aw in a.windows:
                lw = [*ls, aw.window]
                _add(events, lw, aw.requests)
                _add(burn, lw, aw.burn_rate)
                _add(good, lw, aw.good_ratio)
        for gw in dep.client_gone:
            lw = [dep.name, gw.window]
            _add(closed, lw, gw.gateway_client_closed)
            _add(closed_ratio, lw, gw.gateway_client_closed_ratio)
            _add(aborted, lw, gw.server_aborted)
        for role, metrics in sorted(dep.load.items()):
            for metric, v in sorted(metrics.items()):
                load.add_metric([dep.name, role, metric], v)
        for counter, v in sorted(dep.rates.items()):
            rates.add_metric([dep.name, counter], v)
        lead = dep.tpot_leading
        if lead is not None:
            itl, thr, top = N.TPOT_LEADING_SOURCES
            for source, v in ((itl, lead.itl_seconds), (thr, lead.gen_throughput_seconds), (top, lead.seconds)):
                if _ok(v):
                    leading.add_metric([dep.name, source], v)  # type: ignore[arg-type]
        for t in dep.targets:
            lt = [dep.name, t.role, t.id]
            up.add_metric(lt, 1.0 if t.up else 0.0)
            scrapes.add_metric(lt, float(t.scrapes))
            errors.add_metric(lt, float(t.errors))
            resets.add_metric(lt, float(t.counter_resets))
            churned.add_metric(lt, float(t.series_retired_early))
            if t.last_scrape_ts is not None:
                dur.add_metric(lt, t.scrape_duration_seconds)
            if t.last_success_ts is not None:
                last.add_metric(lt, t.last_success_ts)
                samples.add_metric(lt, float(t.samples))
                size.add_metric(lt, float(t.bytes))
    yield from (info, target, objective, edge, good, lower, upper, events, burn, budget, quant, mean, load,
                rates, leading, closed, closed_ratio, aborted, up, dur, samples, size, last, scrapes, errors, resets,
                churned)
    yield from loop_families(status)


def loop_families(status: StatusResponse) -> Iterator[Metric]:
    """The sidecar's own loops, so Prometheus can alert on a stuck one (generate/symptoms.py)."""
    L = ["loop", "deployment"]  # deployment is empty for the sidecar's own loop
    interval = GaugeMetricFamily(N.M_SCRAPE_INTERVAL, "The sidecar's scrape interval; a loop is stale after a few.")
    interval.add_metric([], status.sidecar.scrape_interval_seconds)
    last = GaugeMetricFamily(N.M_LOOP_LAST_CYCLE, "Unix time of the loop's last completed cycle (absent before the first).", labels=L)
    age = GaugeMetricFamily(N.M_LOOP_CYCLE_AGE, "Seconds since the loop's last completed cycle (or since it began), on the monotonic clock.", labels=L)
    restarts = CounterMetricFamily(N.M_LOOP_RESTARTS, "Restarts of the loop after an unexpected exception (each logged with its error).", labels=L)
    for lp in status.sidecar.loops:
        ls = [lp.loop, lp.deployment or ""]
        if lp.last_cycle_ts is not None:
            last.add_metric(ls, lp.last_cycle_ts)
        age.add_metric(ls, lp.seconds_since_cycle)
        restarts.add_metric(ls, float(lp.restarts))
    yield from (interval, last, age, restarts)
    yield from health_families(status)


def health_families(status: StatusResponse) -> Iterator[Metric]:
    """The recording's writes and the last config reload (generate/symptoms.py alerts on both)."""
    rec, cfg = status.sidecar.recording, status.sidecar.config
    if rec is not None:
        errors = CounterMetricFamily(N.M_RECORDING_WRITE_ERRORS, "Recording ticks that could not be written (disk full, I/O error); the SLO state is still served.")
        errors.add_metric([], float(rec.write_errors))
        yield errors
        if rec.last_write_ts is not None:
            last = GaugeMetricFamily(N.M_RECORDING_LAST_WRITE, "Unix time of the last recording tick written.")
            last.add_metric([], rec.last_write_ts)
            yield last
    if cfg is not None:
        ok = GaugeMetricFamily(N.M_CONFIG_RELOAD_OK, "1 when the last config reload (or the start) loaded the config; 0 when it failed and the previous config still runs.")
        ok.add_metric([], 1.0 if cfg.successful else 0.0)
        ts = GaugeMetricFamily(N.M_CONFIG_RELOAD_TS, "Unix time the running config was loaded (start or last successful reload).")
        ts.add_metric([], cfg.last_success_ts)
        yield from (ok, ts)


class SidecarCollector(Collector):
    """Reads a fresh StatusResponse (and extra families, e.g. accelerators) on every scrape."""

    def __init__(self, status: Callable[[], StatusResponse],
                 extra: Callable[[StatusResponse], Iterable[Metric]] | None = None) -> None:
        self._status = status
        self._extra = extra

    def collect(self) -> Iterator[Metric]:
        status = self._status()  # one consistent view for every family of this scrape
        yield from families_from_status(status)
        if self._extra is not None:
            yield from self._extra(status)
