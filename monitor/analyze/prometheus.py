"""Source: Prometheus's HTTP API (`/api/v1/query_range`) -> Dataset.

SGLang's histograms are read per process (`sum by (instance, le)`, both `sglang:` and `sglang_`
spellings, filtered by the `deployment` label that the generated scrape config attaches) and
reset-adjusted here with the sidecar's own accumulators, then merged: exactly what the sidecar
records, so both sources give the same windows. Gauges, rates and accelerator readings are
aggregated in PromQL, each from SGLang/the exporters directly or else from the sidecar's exported
series.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import aiohttp
import yaml

from monitor.analyze.catalog import (
    ACCEL_LABELS,
    LOAD_LABELS,
    OTHER_LABELS,
    RATE_LABELS,
    STAGE_UNIT,
    queue_time_label,
    role_suffix,
    stage_label,
)
from monitor.analyze.model import (
    Dataset,
    Series,
    SliSpec,
    availability_hists,
    availability_spec,
    choose_step,
    goodput_hists,
    goodput_spec,
    grid,
)
from monitor.config import Deployment
from monitor.conventions import names
from monitor.conventions.names import (
    AVAILABILITY_SERIES,
    AVAILABILITY_SLI,
    COUNTER_MATCHERS,
    COUNTERS,
    DCGM_FB_FREE,
    DCGM_FB_USED,
    DCGM_POWER,
    DCGM_SLOWDOWN_TEMPERATURE,
    DCGM_TEMPERATURE,
    DCGM_UTILIZATION,
    GAUGES,
    GOODPUT_REQUESTS_TOTAL,
    KV_TRANSFER_LATENCY,
    LOG_FINISHED_TOTAL,
    M_ACCEL_HEALTH,
    M_ACCEL_MEMORY_TOTAL,
    M_ACCEL_MEMORY_USED,
    M_ACCEL_POWER,
    M_ACCEL_TEMPERATURE,
    M_ACCEL_TEMPERATURE_SLOWDOWN,
    M_ACCEL_THERMAL_THROTTLING,
    M_ACCEL_UTILIZATION,
    M_COUNTER_RESETS,
    M_LOAD,
    M_OBJECTIVE,
    M_SLI_TARGET,
    NPU_HBM_TOTAL,
    NPU_HBM_USED,
    NPU_HEALTH,
    NPU_POWER,
    NPU_TEMPERATURE,
    NPU_UTILIZATION,
    QUEUE_TIME,
    RATIO_GAUGES,
    SMG_ROUTER_ERRORS,
    SMG_WORKER_ERRORS,
    STAGE_LABEL,
    STAGE_LATENCY,
    UP,
    Matcher,
    canonical_name,
    prom_name_regex,
)
from monitor.conventions.slis import COUNTER_ROLES, ENGINE_ROLES, GOODPUT_SLI, SLI_BY_KEY, SLI_FAMILIES
from monitor.conventions.units import parse_prometheus_duration
from monitor.feeds import feed
from monitor.fetch import read_limited
from monitor.promql import Expr, aggregate, binop, either, range_call, rate_sum, select, selector
from monitor.slo.accumulate import HistAccumulator
from monitor.slo.histogram import Hist, merge


class PrometheusError(Exception):
    """Prometheus unreachable, or a query it refused; the message says which and why."""


# An answer larger than this is refused whole (a range query over a big fleet at a fine step): the analysis
# needs a few series per deployment, and a bigger body would only cost memory before failing elsewhere.
MAX_ANSWER_BYTES = 128 * 1024 * 1024


def _decode(raw: bytes) -> Any:
    """Prometheus's HTTP API answers JSON (an error page may not be JSON: None)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


class PromClient:
    def __init__(self, url: str, session: aiohttp.ClientSession, timeout: float = 30.0,
                 max_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.url = url.rstrip("/")
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.max_bytes = max_bytes

    async def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}"
        try:
            async with self.session.get(url, params=params, timeout=self.timeout) as resp:
                raw = await read_limited(resp, self.max_bytes)
                if raw is None:
                    raise PrometheusError(f"{url}: the answer is over {self.max_bytes // (1024 * 1024)} MiB: narrow the "
                                          f"range or raise --step" + (f"\n  query: {params['query']}"
                                                                      if "query" in params else ""))
                body = _decode(raw) if raw else None
                if resp.status != 200 or not isinstance(body, dict) or body.get("status") != "success":
                    shown = raw[:200].decode("utf-8", "replace").strip()
                    err = body.get("error") if isinstance(body, dict) else shown
                    raise PrometheusError(f"{url}: HTTP {resp.status}: {err or 'no answer body'}"
                                          + (f"\n  query: {params['query']}" if "query" in params else ""))
                data = body.get("data")
                if not isinstance(data, dict):
                    raise PrometheusError(f"{url}: the answer has no `data` object: not Prometheus's HTTP API?")
                return data
        except aiohttp.ClientConnectorError as err:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {err.os_error or err}") from None
        except asyncio.TimeoutError:
            raise PrometheusError(f"Prometheus at {self.url} did not answer within {self.timeout.total:g} s"
                                  + (f"\n  query: {params.get('query')}" if "query" in params else "")) from None
        except aiohttp.ClientError as err:
            raise PrometheusError(f"Prometheus at {self.url}: {err}") from None

    async def query_range(self, query: str, start: float, end: float, step: float
                          ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        data = await self._get("/api/v1/query_range", {"query": query, "start": f"{start:.3f}",
                                                        "end": f"{end:.3f}", "step": f"{step:g}"})
        try:
            return [(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in data.get("result", [])]
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PrometheusError(self._shape("/api/v1/query_range", query, err)) from None

    async def query(self, query: str, at: float) -> list[tuple[dict[str, str], float]]:
        data = await self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        try:
            return [(dict(r["metric"]), float(r["value"][1])) for r in data.get("result", [])]
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise PrometheusError(self._shape("/api/v1/query", query, err)) from None

    def _shape(self, path: str, query: str, err: Exception) -> str:
        """One line for an answer that is JSON but not a Prometheus result (a proxy's page, another API)."""
        return (f"{self.url}{path}: the answer is not a Prometheus vector/matrix result ({type(err).__name__}: "
                f"{str(err)[:80]})\n  query: {query}")

    async def scrape_interval(self) -> float | None:
        """The global scrape_interval of the running config (None where the API does not say)."""
        try:
            data = await self._get("/api/v1/status/config", {})
            cfg = yaml.safe_load(data.get("yaml", "")) or {}
            return parse_prometheus_duration(str(cfg.get("global", {}).get("scrape_interval", "1m")))
        except (PrometheusError, ValueError, yaml.YAMLError, AttributeError):
            return None


def _selector(name_regex: str, deployment: str, roles: tuple[str, ...] | None = None,
              only: tuple[Matcher, ...] = (), **eq: str) -> Expr:
    """`{deployment="d",...,__name__=~"...",role=~"...",engine_type!="..."}`: both spellings of an SGLang
    family (`name_regex`), and with `roles` the series that feed a number recorded on them (`monitor.feeds`,
    config-free: the analyzer reads a Prometheus it did not configure)."""
    fed = feed(None, roles).matchers if roles is not None else ()
    return select("", [("deployment", "=", deployment), *((k, "=", v) for k, v in eq.items()),
                       ("__name__", "=~", name_regex), *fed, *only])


def _le(text: str) -> float:
    return math.inf if text in ("+Inf", "Inf", "inf") else float(text)


class _Plan:
    """The queries of one analysis, their names and where each result goes."""

    def __init__(self, deployment: str, lookback: str, dep: Deployment | None = None) -> None:
        d = deployment
        self.queries: dict[str, str] = {}
        # Request-level numbers come from the servers that answer requests (each SLI's roles, COUNTER_ROLES);
        # PD failures from every engine role: `monitor.feeds` says which series feed each.
        for sli, fam in SLI_FAMILIES.items():
            roles = SLI_BY_KEY[sli].roles
            self.queries[f"hist.{sli}.bucket"] = aggregate(
                "sum", _selector(prom_name_regex(fam, "_bucket"), d, roles), ("instance", "le"))
            self.queries[f"hist.{sli}.sum"] = aggregate(
                "sum", _selector(prom_name_regex(fam, "_sum"), d, roles), ("instance",))
        counts = "|".join(prom_name_regex(GAUGES[m]) for m in GAUGES if m not in RATIO_GAUGES)
        ratios = "|".join(prom_name_regex(GAUGES[m]) for m in GAUGES if m in RATIO_GAUGES)
        # One series per DP rank (TP ranks and PP stages repeat it), summed; ratios take the fullest rank.
        # With priority scheduling only priority="" is the total.
        count_sel = _selector(counts, d, priority="")
        ratio_sel = _selector(ratios, d, priority="")
        self.queries["gauges.count"] = aggregate(
            "sum", aggregate("max", count_sel, ("__name__", "role", "instance", "dp_rank")), ("__name__", "role"))
        self.queries["gauges.ratio"] = aggregate("max", ratio_sel, ("__name__", "role"))
        on_d = (("deployment", "=", d),)

        def of(metric: str) -> Expr:
            return select(metric, on_d)

        self.queries["gauges.sidecar"] = of(M_LOAD)
        for counter in RATE_LABELS:
            self.queries[f"rate.{counter}"] = rate_sum(_selector(
                prom_name_regex(COUNTERS[counter]), d, COUNTER_ROLES[counter], COUNTER_MATCHERS.get(counter, ())),
                lookback)
        # The sidecar's accelerator_* series, else the exporters' own (npu-exporter, dcgm-exporter) in their units.
        self.queries["accel.temperature_max"] = either(*(aggregate("max", of(m)) for m in (
            M_ACCEL_TEMPERATURE, NPU_TEMPERATURE, DCGM_TEMPERATURE)))
        self.queries["accel.utilization_mean"] = either(aggregate("avg", of(M_ACCEL_UTILIZATION)),
                                                        binop(aggregate("avg", of(NPU_UTILIZATION)), "/", 100),
                                                        binop(aggregate("avg", of(DCGM_UTILIZATION)), "/", 100))
        self.queries["accel.memory_ratio_max"] = either(
            aggregate("max", binop(of(M_ACCEL_MEMORY_USED), "/", of(M_ACCEL_MEMORY_TOTAL))),
            aggregate("max", binop(of(NPU_HBM_USED), "/", of(NPU_HBM_TOTAL))),
            aggregate("max", binop(of(DCGM_FB_USED), "/", binop(of(DCGM_FB_USED), "+", of(DCGM_FB_FREE)))))
        self.queries["accel.power_mean"] = either(*(aggregate("avg", of(m)) for m in (
            M_ACCEL_POWER, NPU_POWER, DCGM_POWER)))
        # NVML / DCGM only: the chips' own slowdown temperature (the lowest: the first to throttle), and how many
        # throttle for heat (the sidecar's reading of the clock event reasons; a bitmask is no PromQL value).
        self.queries["accel.temperature_slowdown_min"] = either(*(aggregate("min", of(m)) for m in (
            M_ACCEL_TEMPERATURE_SLOWDOWN, DCGM_SLOWDOWN_TEMPERATURE)))
        self.queries["accel.thermal_throttling"] = aggregate("sum", of(M_ACCEL_THERMAL_THROTTLING))
        self.queries["accel.unhealthy"] = either(
            aggregate("count", binop(of(M_ACCEL_HEALTH), ">", 0)), binop(aggregate("count", of(M_ACCEL_HEALTH)), "*", 0),
            aggregate("count", binop(of(NPU_HEALTH), "!=", 1)), binop(aggregate("count", of(NPU_HEALTH)), "*", 0))
        self.queries["restarts"] = either(
            aggregate("sum", range_call("increase", of(M_COUNTER_RESETS), lookback)),
            aggregate("sum", range_call("resets", _selector(prom_name_regex(COUNTERS["requests_total"]), d), lookback)))
        self.queries["targets_down"] = either(aggregate("count", binop(of(UP), "==", 0)),
                                              binop(aggregate("count", of(UP)), "*", 0))
        for name, family, by in (("stages", STAGE_LATENCY, ("role", STAGE_LABEL)), ("queue_time", QUEUE_TIME, ("role",))):
            # Mean seconds per request over the lookback: what each scheduler stage (and the wait before the
            # first forward) costs, per role (PD attribution of TTFT; prefill compute of a mixed server).
            total, count = (_selector(prom_name_regex(family, suffix), d) for suffix in ("_sum", "_count"))
            self.queries[name] = binop(rate_sum(total, lookback, by), "/", rate_sum(count, lookback, by))
        if dep is not None and dep.availability_objective is not None:
            # The availability SLI's counters, as the sidecar and the generated rules read them for this
            # gateway version; raw per instance (made monotone here, as the goodput counters are).
            spec = AVAILABILITY_SERIES[dep.gateway]
            self.queries["availability.total"] = aggregate(
                "sum", select(spec.total.family, (*on_d, *spec.total.matchers)), ("instance",))
            for i, bad in enumerate(spec.bad):
                self.queries[f"availability.bad.{i}"] = aggregate(
                    "sum", select(bad.family, (*on_d, *bad.matchers)), ("instance",))
        kv = prom_name_regex(KV_TRANSFER_LATENCY)
        self.queries["kv_transfer_latency"] = binop(rate_sum(_selector(kv + "_sum", d), lookback), "/",
                                                    rate_sum(_selector(kv + "_count", d), lookback))
        # Goodput (the sidecar's request-log counters), per target so counter resets are handled per series.
        self.queries["goodput.good"] = aggregate("sum", of(GOODPUT_REQUESTS_TOTAL), ("target",))
        self.queries["goodput.total"] = aggregate("sum", of(LOG_FINISHED_TOTAL), ("target",))
        self.queries["router_errors"] = rate_sum(of(SMG_ROUTER_ERRORS), lookback)
        self.queries["router_worker_errors"] = rate_sum(of(SMG_WORKER_ERRORS), lookback)


def _hists(buckets: list[tuple[dict[str, str], list[tuple[float, float]]]],
           sums: list[tuple[dict[str, str], list[tuple[float, float]]]], index: Callable[[float], int | None],
           n: int) -> tuple[Hist | None, ...]:
    """Per-instance cumulative buckets per step -> reset-adjusted per instance -> merged per step."""
    per: dict[str, list[dict[float, float]]] = {}
    for labels, points in buckets:
        inst = labels.get("instance", "")
        rows = per.setdefault(inst, [dict() for _ in range(n)])
        le = _le(labels.get("le", "+Inf"))
        for ts, v in points:
            i = index(ts)
            if i is not None:
                rows[i][le] = max(rows[i].get(le, 0.0), v)  # `1` and `1.0` are one bucket
    sum_by: dict[str, dict[int, float]] = {}
    for labels, points in sums:
        inst = labels.get("instance", "")
        for ts, v in points:
            i = index(ts)
            if i is not None:
                sum_by.setdefault(inst, {})[i] = v
    accs = {inst: HistAccumulator() for inst in per}
    out: list[Hist | None] = []
    for i in range(n):
        for inst, rows in per.items():
            row = rows[i]
            if math.inf not in row:
                continue  # no scrape of this process at this step: it keeps its last value
            edges = tuple(sorted(row))
            cum = tuple(row[e] for e in edges)
            accs[inst].update(Hist(edges, cum, sum_by.get(inst, {}).get(i, math.nan), row[math.inf]))
        adjusted = [h for h in (a.adjusted() for a in accs.values()) if h is not None]
        out.append(merge(adjusted) if adjusted else None)
    return tuple(out)


async def load_prometheus(url: str, deployment: str, start: float, end: float, span: float, *,
                          deployment_config: Deployment | None, step: float | None = None,
                          progress: Callable[[str], None] | None = None, timeout: float = 30.0) -> Dataset:
    say = progress or (lambda msg: print(msg, file=sys.stderr))
    async with aiohttp.ClientSession() as session:
        client = PromClient(url, session, timeout)
        say(f"prometheus {url}: reading the scrape interval ...")
        interval = await client.scrape_interval()
        step = step or choose_step(span, interval or 15.0)
        start = math.floor(start / step) * step  # Prometheus evaluates at start + k*step
        times = grid(start, end, step)
        lookback = f"{max(int(math.ceil(max(step, 4 * (interval or step)))), 1)}s"
        plan = _Plan(deployment, lookback, deployment_config)
        results: dict[str, Any] = {}
        done = 0

        async def run(name: str, q: str) -> None:
            nonlocal done
            results[name] = await client.query_range(q, times[0], times[-1], step)
            done += 1
            say(f"prometheus: [{done}/{len(plan.queries)}] {name} ({sum(len(p) for _, p in results[name])} points)")

        say(f"prometheus: {len(plan.queries)} range queries over {len(times)} steps of {step:g} s ...")
        await asyncio.gather(*(run(k, q) for k, q in plan.queries.items()))
        specs: dict[str, SliSpec] = {}
        if deployment_config is None:
            targets = await client.query(selector(M_SLI_TARGET, {"deployment": deployment}), end)
            objectives = {m.get("sli"): v for m, v in await client.query(
                selector(M_OBJECTIVE, {"deployment": deployment}), end)}
            if not targets:
                # The sidecar is not scraped there, but the generated rules record every SLI's target and objective
                # in the same Prometheus (`slo_monitor:target:seconds`, `slo_monitor:objective:ratio`).
                targets = await client.query(selector(names.TARGET, {"deployment": deployment}), end)
                objectives = {m.get("sli"): v for m, v in await client.query(
                    selector(names.OBJECTIVE, {"deployment": deployment}), end)}
                if targets:
                    say(f"prometheus: SLO targets of {deployment} read from the generated rules' {names.TARGET}")
            for m, v in targets:
                if m.get("sli"):
                    specs[m["sli"]] = SliSpec(m["sli"], v, objectives.get(m["sli"], 0.99))
            # The goodput objective lives in the generated rules (the sidecar does not export it).
            for _, v in await client.query(selector(names.OBJECTIVE, {"deployment": deployment, "sli": GOODPUT_SLI}), end):
                specs[GOODPUT_SLI] = goodput_spec(v)
            if not specs:
                raise ValueError(f"no SLO targets for {deployment!r}: Prometheus has neither the sidecar's {M_SLI_TARGET} "
                                 f"nor the generated rules' {names.TARGET} for it; pass the config with -c")
    return build_dataset(url, deployment, times, step, results, specs, deployment_config, interval)


def build_dataset(url: str, deployment: str, times: tuple[float, ...], step: float, results: dict[str, Any],
                  specs: dict[str, SliSpec], dep: Deployment | None, interval: float | None) -> Dataset:
    n = len(times)
    t0 = times[0]

    def index(ts: float) -> int | None:
        i = round((ts - t0) / step)
        return i if 0 <= i < n and abs(t0 + i * step - ts) < step / 2 else None

    def values(points: list[tuple[float, float]]) -> tuple[float | None, ...]:
        out: list[float | None] = [None] * n
        for ts, v in points:
            i = index(ts)
            if i is not None and math.isfinite(v):
                out[i] = v
        return tuple(out)

    hists = {sli: _hists(results[f"hist.{sli}.bucket"], results[f"hist.{sli}.sum"], index, n) for sli in SLI_FAMILIES}
    goodput = goodput_hists([values(p) for _, p in results.get("goodput.good") or []],
                            [values(p) for _, p in results.get("goodput.total") or []])
    if goodput is not None:
        hists[GOODPUT_SLI] = goodput
    if "availability.total" in results:
        bad_cols = [[values(p) for _, p in results[k]] for k in sorted(results) if k.startswith("availability.bad.")]
        available = availability_hists([values(p) for _, p in results["availability.total"]], bad_cols)
        if available is not None:
            hists[AVAILABILITY_SLI] = available
    hists = {k: v for k, v in hists.items() if any(h is not None for h in v)}
    series: dict[str, Series] = {}
    gauges: dict[tuple[str, str], tuple[float | None, ...]] = {}
    by_name = {canonical_name(v): k for k, v in GAUGES.items()}
    for key in ("gauges.count", "gauges.ratio"):
        for labels, points in results[key]:
            metric = by_name.get(canonical_name(labels.get("__name__", "")))
            if metric:
                gauges[(labels.get("role", "all"), metric)] = values(points)
    for labels, points in results["gauges.sidecar"]:
        k = (labels.get("role", "all"), labels.get("metric", ""))
        if k[1] in LOAD_LABELS and k not in gauges and not any(m == k[1] for _, m in gauges):
            gauges[k] = values(points)
    roles = {r for r, _ in gauges}
    keep = [r for r in ENGINE_ROLES if r in roles] or sorted(roles)
    for (role, metric), vals in sorted(gauges.items()):
        if role in keep:
            label, group, unit = LOAD_LABELS[metric]
            series[f"load.{role}.{metric}"] = Series(f"load.{role}.{metric}", label + role_suffix(role, roles),
                                                     group, unit, vals)
    for labels, points in results.get("stages") or []:
        role, stage = labels.get("role", "all"), labels.get(STAGE_LABEL, "")
        series[f"stage.{role}.{stage}"] = Series(f"stage.{role}.{stage}", stage_label(role, stage), "stages",
                                                 STAGE_UNIT, values(points))
    for labels, points in results.get("queue_time") or []:
        role = labels.get("role", "all")
        series[f"queue_time.{role}"] = Series(f"queue_time.{role}", queue_time_label(role), "queue", STAGE_UNIT,
                                              values(points))
    for name, (label, group, unit) in {**{f"rate.{k}": v for k, v in RATE_LABELS.items()},
                                       **{f"accel.{k}": v for k, v in ACCEL_LABELS.items()},
                                       **OTHER_LABELS}.items():
        res = results.get(name) or []
        if res:
            if name == "restarts":
                unit = "per lookback"
            series[name] = Series(name, label, group, unit, values(res[0][1]))
    period, recipe = 30 * 86400.0, {}
    if dep is not None:
        specs = {s: SliSpec(s, dep.target_seconds(s) or 0.0, dep.objective) for s in dep.slis}
        if dep.goodput_objective is not None:
            specs[GOODPUT_SLI] = goodput_spec(dep.goodput_objective)
        if dep.availability_objective is not None:
            specs[AVAILABILITY_SLI] = availability_spec(dep.availability_objective)
        period = float(dep.period_seconds)
        if dep.baseline is not None:
            recipe = {k: v for k, v in (("tpot", dep.baseline.tpot_mean_seconds),
                                        ("ttft", dep.baseline.ttft_mean_seconds)) if v}
    notes = []
    if not hists:
        notes.append(f"no SGLang latency histograms with deployment={deployment!r} in Prometheus; is the generated "
                     "scrape config (which adds the `deployment` label) loaded?")
    return Dataset(deployment, f"prometheus {url}", times, step, hists, series, specs, period, recipe, interval, notes)

