"""Source: the sidecar's own SQLite recording (monitor.record) -> Dataset."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

from monitor.analyze.catalog import (
    ACCEL_LABELS,
    LOAD_LABELS,
    OTHER_LABELS,
    RATE_LABELS,
    STAGE_UNIT,
    role_suffix,
    stage_label,
)
from monitor.analyze.model import (
    Dataset,
    Series,
    SliSpec,
    availability_spec,
    choose_step,
    count_hist,
    goodput_hists,
    goodput_spec,
    grid,
    sample,
)
from monitor.config import Deployment
from monitor.conventions.names import (
    AVAILABILITY_SLI,
    GATEWAY_FAILED,
    GATEWAY_REQUESTS,
    RECORDED_STAGES,
    stage_counters,
)
from monitor.conventions.slis import ENGINE_ROLES, GOODPUT_SLI, STAGE_ROLES
from monitor.record.store import Recording, RecordingError
from monitor.slo.histogram import Hist


def _accelerators(readings: list[dict[str, Any]]) -> dict[str, float]:
    """Per deployment: hottest chip, mean utilisation, fullest HBM, mean power, chips not healthy, and where the
    telemetry reports them, the lowest slowdown temperature and the chips throttling for heat."""
    out: dict[str, float] = {}
    temps = [r["temperature_celsius"] for r in readings if r.get("temperature_celsius") is not None]
    utils = [r["utilization_ratio"] for r in readings if r.get("utilization_ratio") is not None]
    mems = [r["memory_used_bytes"] / r["memory_total_bytes"] for r in readings
            if r.get("memory_used_bytes") is not None and r.get("memory_total_bytes")]
    power = [r["power_watts"] for r in readings if r.get("power_watts") is not None]
    health = [r["health"] for r in readings if r.get("health") is not None]
    limits = [r["temperature_slowdown_celsius"] for r in readings if r.get("temperature_slowdown_celsius")]
    throttling = [r["thermal_throttling"] for r in readings if r.get("thermal_throttling") is not None]
    if temps:
        out["temperature_max"] = max(temps)
    if utils:
        out["utilization_mean"] = sum(utils) / len(utils)
    if mems:
        out["memory_ratio_max"] = max(mems)
    if power:
        out["power_mean"] = sum(power) / len(power)
    if health:
        out["unhealthy"] = float(sum(1 for h in health if h > 0))
    if limits:
        out["temperature_slowdown_min"] = min(limits)
    if throttling:
        out["thermal_throttling"] = float(sum(throttling))
    return out


def _goodput(states: list[tuple[float, dict[str, Any]]], times: tuple[float, ...],
             max_age: float) -> tuple[tuple[Hist | None, ...] | None, float | None]:
    """The request-log targets' cumulative counts in the state rows, summed reset-aware per target, and the
    goodput objective the sidecar last ran with."""
    per_target: dict[str, dict[str, list[tuple[float, float]]]] = {}
    objective = None
    for ts, st in states:
        goodput = st.get("goodput", {})
        objective = goodput.get("objective") or objective
        for target, c in goodput.get("targets", {}).items():
            parts = per_target.setdefault(target, {"good": [], "finished": []})
            parts["good"].append((ts, float(c["good"])))
            parts["finished"].append((ts, float(c["finished"])))
    cols = {part: [sample(p[part], times, max_age) for p in per_target.values()] for part in ("good", "finished")}
    return goodput_hists(cols["good"], cols["finished"]), objective


def load_recording(path: str, deployment: str, start: float, end: float, *, deployment_config: Deployment | None,
                   step: float | None = None, progress: Callable[[str], None] | None = None) -> Dataset:
    say = progress or (lambda msg: print(msg, file=sys.stderr))
    try:
        rec = Recording(path, readonly=True)
    except RecordingError as err:
        raise ValueError(str(err)) from None
    try:
        if deployment not in rec.deployments():
            known = ", ".join(rec.deployments()) or "none"
            raise ValueError(f"{path}: no recording of deployment {deployment!r} (recorded: {known})")
        say(f"reading {path}: snapshots of {deployment} ...")
        snaps = list(rec.snapshots(deployment, start, end))
        say(f"reading {path}: {len(snaps)} snapshots; state rows ...")
        states = list(rec.states(deployment, start, end))
    finally:
        rec.close()
    if len(snaps) < 2:
        raise ValueError(f"{path}: fewer than two recorded ticks of {deployment} between the given times")
    ticks = [s.ts for s in snaps]
    gaps = sorted(b - a for a, b in zip(ticks, ticks[1:]))
    interval = statistics.median(gaps)
    step = step or choose_step(ticks[-1] - ticks[0], interval, points=600)
    times = grid(ticks[0], ticks[-1], step)
    # Older rows are thinned (one a minute, then one per 5 minutes: docs/recording.md): their spacing is
    # not an outage. The 90th percentile gap is that spacing when they are a tenth of the range or more.
    max_age = max(2 * interval, step, 2 * gaps[int(0.9 * (len(gaps) - 1))])

    hists: dict[str, tuple[Hist | None, ...]] = {}
    for sli in sorted({k for s in snaps for k in s.hists}):
        hists[sli] = sample([(s.ts, s.hists[sli]) for s in snaps if sli in s.hists], times, max_age)  # type: ignore[misc]
    # The availability SLI's two counters (merged, reset-adjusted by the sidecar) as a two-bucket histogram.
    gateway = [(s.ts, count_hist(max(s.counters[GATEWAY_REQUESTS] - s.counters.get(GATEWAY_FAILED, 0.0), 0.0),
                                 s.counters[GATEWAY_REQUESTS])) for s in snaps if GATEWAY_REQUESTS in s.counters]
    if gateway:
        hists[AVAILABILITY_SLI] = sample(gateway, times, max_age)  # type: ignore[arg-type]

    series: dict[str, Series] = {}

    def add(key: str, label: str, group: str, unit: str, points: list[tuple[float, float]]) -> None:
        if points:
            series[key] = Series(key, label, group, unit, sample(points, times, max_age))

    roles = {r for _, st in states for r in st.get("load", {})}
    per_role = [r for r in ENGINE_ROLES if r in roles] or (["all"] if "all" in roles else [])
    for role in per_role:
        for metric, (label, group, unit) in LOAD_LABELS.items():
            pts = [(ts, st["load"][role][metric]) for ts, st in states if metric in st.get("load", {}).get(role, {})]
            add(f"load.{role}.{metric}", label + role_suffix(role, roles), group, unit, pts)
    # Per-step rates from the snapshots' merged, reset-adjusted counters (the state rows' rates are
    # 5-minute averages: too smooth and too late to time anything by).
    def increases(counter: str) -> tuple[float | None, ...]:
        """A merged, reset-adjusted counter's increase per step (None where a step has no reading)."""
        cum = sample([(s.ts, s.counters[counter]) for s in snaps if counter in s.counters], times, max_age)
        return tuple(None if a is None or b is None else max(b - a, 0.0) for a, b in zip((None, *cum[:-1]), cum))

    for counter, (label, group, unit) in RATE_LABELS.items():
        inc = increases(counter)
        if any(v is not None for v in inc):
            rates = tuple(None if v is None else v / step for v in inc)
            series[f"rate.{counter}"] = Series(f"rate.{counter}", label, group, unit, rates)
    # Each recorded scheduler stage's mean seconds per request in a step (the increase of its _sum over that of
    # its _count), under the role that observes it: what Prometheus reads as rate(_sum) / rate(_count).
    for stage in RECORDED_STAGES:
        secs, reqs = (increases(c) for c in stage_counters(stage))
        role = next((r for r in STAGE_ROLES[stage] if r in roles), STAGE_ROLES[stage][0])
        means = tuple(None if s is None or not n else s / n for s, n in zip(secs, reqs))
        if any(v is not None for v in means):
            key = f"stage.{role}.{stage}"
            series[key] = Series(key, stage_label(role, stage), "stages", STAGE_UNIT, means)
    accel = [(ts, _accelerators(st.get("accelerators") or [])) for ts, st in states]
    for key, (label, group, unit) in ACCEL_LABELS.items():
        add(f"accel.{key}", label, group, unit, [(ts, a[key]) for ts, a in accel if key in a])
    # Restarts per step from the cumulative per-target reset counts; down targets as a count.
    restarts, down, last = [], [], None
    for ts, st in states:
        total = sum(t.get("restarts") or 0 for t in st.get("targets", {}).values())
        restarts.append((ts, float(total - last) if last is not None else 0.0))
        last = total
        down.append((ts, float(sum(1 for t in st.get("targets", {}).values() if not t.get("up")))))
    add("restarts", *OTHER_LABELS["restarts"], restarts)
    add("targets_down", *OTHER_LABELS["targets_down"], down)

    slis: dict[str, SliSpec] = {}
    period = 30 * 86400.0
    recipe: dict[str, float] = {}
    if deployment_config is not None:
        for sli in deployment_config.slis:
            slis[sli] = SliSpec(sli, deployment_config.target_seconds(sli) or 0.0, deployment_config.objective)
        if deployment_config.availability_objective is not None and AVAILABILITY_SLI in hists:
            slis[AVAILABILITY_SLI] = availability_spec(deployment_config.availability_objective)
        period = float(deployment_config.period_seconds)
        b = deployment_config.baseline
        if b is not None:
            recipe = {k: v for k, v in (("tpot", b.tpot_mean_seconds), ("ttft", b.ttft_mean_seconds)) if v}
    else:  # the state rows carry each SLI's target and objective as the sidecar ran them
        for _, st in states[-1:]:
            for sli, s in st.get("slis", {}).items():
                if s.get("target"):
                    slis[sli] = SliSpec(sli, float(s["target"]), float(s.get("objective") or 0.99))
    notes = []
    if step > interval * 1.5:
        notes.append(f"recording ticks every {interval:g} s; analysed at {step:g} s steps")
    goodput, recorded_objective = _goodput(states, times, max_age)
    objective = deployment_config.goodput_objective if deployment_config is not None else recorded_objective
    if goodput is not None:
        hists[GOODPUT_SLI] = goodput
        if objective is not None:
            slis[GOODPUT_SLI] = goodput_spec(float(objective))
    elif objective is not None:
        notes.append("goodput: this recording has no request-log counts (no request-log target was read while "
                     "it was recorded); analyse with --prometheus for the goodput SLO")
    return Dataset(deployment, f"recording {path}", times, step, hists, series, slis, period, recipe, interval, notes)
