"""What each SLO of a deployment counts, in PromQL: below generate/ and interop/, so rules and OpenSLO/Sloth agree.

A latency SLI resolves to a bucket edge of its histogram or to an interpolation between two
(`resolve_sli`); goodput and availability are SLOs over a pair of counters (`GoodputPlan`,
`AvailabilityPlan`). `good_and_total` writes any plan as PromQL: the generator's recording rules and the
Sloth spec both use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.config import Deployment
from monitor.conventions import (
    AVAILABILITY_SERIES,
    AVAILABILITY_SLI,
    BUCKET_FLAGS,
    DEFAULT_BUCKETS,
    ENGINE_ROLES,
    ENGINE_TYPE_LABEL,
    GATEWAY_SMG,
    GOODPUT_REQUESTS_TOTAL,
    GOODPUT_SLI,
    LOG_FINISHED_TOTAL,
    PREFILL_ENGINE_TYPE,
    REQUEST_SLIS,
    SLI_FAMILIES,
    SLI_ROLES,
    AvailabilitySeries,
    format_le,
)
from monitor.promql import (
    format_number,
    good_from_bad,
    good_rate,
    matched_selector,
    nhcb_count_rate,
    nhcb_good_rate,
    sum_rate,
    sum_rate_of,
)

SLI_TITLES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E latency"}
SLI_LONG = {
    "ttft": "time to first token",
    "tpot": "time per output token",
    "itl": "inter-token latency",
    "e2e": "end-to-end request latency",
}
# ITL's histogram is token-weighted (one bucket increment per output token); the others per request.
SLI_UNIT = {"ttft": "requests", "tpot": "requests", "itl": "output tokens", "e2e": "requests"}
# Prometheus' exported sample names (prometheus-client) of each scraped source, by role.
SCRAPED_SOURCES = ("sglang", "router", "router-engine-metrics", "npu-exporter", "dcgm")


class GenerateError(ValueError):
    """A config the generator refuses; the message says how to fix it."""


@dataclass(frozen=True)
class SLIPlan:
    deployment: str
    sli: str
    family: str
    target: float
    objective: float
    edges: tuple[float, ...]
    lower: float  # the edge at/below the target (0 when the target is below the first edge)
    upper: float  # the edge above the target; equal to `lower` when the target is an edge

    @property
    def approximate(self) -> bool:
        return self.lower != self.upper

    @property
    def budget(self) -> float:
        return round(1.0 - self.objective, 12)

    @property
    def le(self) -> str:
        return format_le(self.lower)

    @property
    def fraction(self) -> float:
        """Where the target sits between `lower` and `upper` (linear interpolation weight)."""
        return 0.0 if not self.approximate else (self.target - self.lower) / (self.upper - self.lower)

    @property
    def title(self) -> str:
        return SLI_TITLES[self.sli]

    @property
    def long_name(self) -> str:
        return SLI_LONG[self.sli]

    @property
    def sli_metric(self) -> str:
        """The series the SLI counts good events from (for annotations)."""
        return f'{self.family}_bucket{{le="{self.le if not self.approximate else format_le(self.upper)}"}}'

    def describe(self) -> str:
        pct = format_number(round(self.objective * 100, 6))
        return (f"{pct}% of {SLI_UNIT[self.sli]} with {SLI_LONG[self.sli]} <= {format_number(self.target)}s")

    def approximation_note(self, nhcb: bool = False) -> str:
        if not self.approximate:
            return ""
        if nhcb:  # the same interpolation, done by histogram_fraction inside the native histogram's bucket
            between = f"{format_number(self.lower)} and {format_number(self.upper)} by histogram_fraction"
        else:
            lo = "0" if self.lower == 0 else f'le="{format_le(self.lower)}"'
            between = f"{lo} and le=\"{format_le(self.upper)}\""
        return (f"approximate: {format_number(self.target)}s is not a bucket edge of {self.family}; good events "
                f"are interpolated linearly between {between} (fix: {bucket_fix(self)})")


@dataclass(frozen=True)
class GoodputPlan:
    """The optional goodput SLO: requests that succeeded and met every latency target, counted by the
    sidecar from SGLang's request log. It records and alerts under the same names as the histogram
    SLIs (label sli="goodput"), from two counters instead of a histogram."""

    deployment: str
    objective: float
    targets: dict[str, float]  # the latency targets a request must meet (ttft, tpot, e2e)
    sli: str = GOODPUT_SLI
    good_metric: str = GOODPUT_REQUESTS_TOTAL
    total_metric: str = LOG_FINISHED_TOTAL
    approximate: bool = False

    @property
    def budget(self) -> float:
        return round(1.0 - self.objective, 12)

    @property
    def title(self) -> str:
        return "Goodput"

    @property
    def long_name(self) -> str:
        return "goodput"

    @property
    def sli_metric(self) -> str:
        return self.good_metric

    def describe(self) -> str:
        pct = format_number(round(self.objective * 100, 6))
        met = " and ".join(f"{SLI_TITLES[s]} <= {format_number(t)}s" for s, t in self.targets.items())
        return f"{pct}% of requests succeeding" + (f" with {met}" if met else "")


@dataclass(frozen=True)
class AvailabilityPlan:
    """The optional availability SLO: requests the gateway answered without a server-side failure, from the
    gateway's own counters (which ones depends on its version: `conventions.AVAILABILITY_SERIES`). It records
    and alerts under the same names as the other SLIs (label sli="availability")."""

    deployment: str
    objective: float
    gateway: str
    sli: str = AVAILABILITY_SLI
    approximate: bool = False

    @property
    def series(self) -> AvailabilitySeries:
        return AVAILABILITY_SERIES[self.gateway]

    @property
    def budget(self) -> float:
        return round(1.0 - self.objective, 12)

    @property
    def title(self) -> str:
        return "Availability"

    @property
    def long_name(self) -> str:
        return "gateway availability"

    @property
    def sli_metric(self) -> str:
        return " + ".join(m.family for m in self.series.bad)

    def describe(self) -> str:
        pct = format_number(round(self.objective * 100, 6))
        failure = "a 5xx or a stream broken mid-body" if self.gateway == GATEWAY_SMG else "a 5xx"
        return f"{pct}% of the requests the gateway ({self.gateway}) answers without a server-side failure ({failure})"


Plan = SLIPlan | GoodputPlan | AvailabilityPlan


def goodput_plan(dep: Deployment) -> GoodputPlan | None:
    if dep.goodput_objective is None:
        return None
    targets = {s: t for s in REQUEST_SLIS if (t := dep.target_seconds(s)) is not None}
    return GoodputPlan(dep.name, dep.goodput_objective, targets)


def availability_plan(dep: Deployment) -> AvailabilityPlan | None:
    if dep.availability_objective is None:
        return None
    return AvailabilityPlan(dep.name, dep.availability_objective, dep.gateway)


def edges_for(dep: Deployment, sli: str) -> tuple[float, ...]:
    return tuple(dep.buckets.get(sli) or DEFAULT_BUCKETS[sli])


def bucket_fix(plan: SLIPlan) -> str:
    values = sorted({*plan.edges, plan.target})
    flag = BUCKET_FLAGS[plan.sli]
    shared = " (this flag also sets the TPOT buckets)" if plan.sli == "itl" else ""
    shared = " (this flag also sets the ITL buckets)" if plan.sli == "tpot" else shared
    return (f"relaunch SGLang with `{flag} {' '.join(format_number(v) for v in values)}`{shared} and set "
            f"`buckets: {{{plan.sli}: [...]}}` for deployment {plan.deployment} to the same list")


def resolve_sli(dep: Deployment, sli: str, approximate: bool) -> SLIPlan:
    target = dep.target_seconds(sli)
    assert target is not None
    edges = edges_for(dep, sli)
    for edge in edges:
        if abs(edge - target) <= 1e-9 * max(1.0, abs(target)):
            return SLIPlan(dep.name, sli, SLI_FAMILIES[sli], target, dep.objective, edges, edge, edge)
    above = [e for e in edges if e > target]
    below = [e for e in edges if e < target]
    plan = SLIPlan(dep.name, sli, SLI_FAMILIES[sli], target, dep.objective, edges,
                   below[-1] if below else 0.0, above[0] if above else float("inf"))
    if not above:
        raise GenerateError(
            f"deployment {dep.name}: {sli}_target_seconds {format_number(target)} is above the last finite bucket "
            f"edge {format_number(edges[-1])} of {plan.family}; nothing can be interpolated there. Fix: {bucket_fix(plan)}")
    if not (approximate or dep.approximate):
        raise GenerateError(
            f"deployment {dep.name}: {sli}_target_seconds {format_number(target)} is not a bucket edge of "
            f"{plan.family} (edges: {', '.join(format_number(e) for e in edges)}). Fix: {bucket_fix(plan)}; "
            f"or set `approximate: true` on the deployment (or pass --approximate) to interpolate between "
            f"{format_number(plan.lower)} and {format_number(plan.upper)}")
    return plan


def plan_slis(dep: Deployment, approximate: bool = False) -> list[Plan]:
    """The histogram SLIs with a target, then the goodput and availability SLOs the deployment has.
    `approximate`: interpolate a target that is not a bucket edge (else refused, unless the deployment
    says `approximate: true`)."""
    plans: list[Plan] = [resolve_sli(dep, sli, approximate) for sli in dep.slis]
    return plans + [p for p in (goodput_plan(dep), availability_plan(dep)) if p is not None]


def scraped_roles(dep: Deployment) -> list[str]:
    """Roles Prometheus scrapes for this deployment (any target with a URL source), sorted."""
    return sorted({t.role for t in dep.targets if t.source in SCRAPED_SOURCES})


def engine_selector(dep: Deployment, roles: tuple[str, ...] = ENGINE_ROLES) -> dict[str, str]:
    """Label matchers (name -> regex) for the SGLang series of `dep` that feed a number SGLang records
    on `roles` (the same targets the sidecar reads: `Deployment.engine_targets`)."""
    found = sorted({t.role for t in dep.engine_targets(roles)})
    return {"role": "|".join(found or [r for r in ENGINE_ROLES if r in roles])}


def engine_exclusions(dep: Deployment, roles: tuple[str, ...] = ENGINE_ROLES) -> dict[str, str]:
    """`!=` matchers: inside a router's merged /engine_metrics, the prefill workers' series when
    `roles` excludes prefill (they record prefill-only E2E and would count each PD request twice)."""
    merged = any(t.source == "router-engine-metrics" for t in dep.engine_targets(roles))
    return {ENGINE_TYPE_LABEL: PREFILL_ENGINE_TYPE} if merged and "prefill" not in roles else {}


def extra_labels(dep: Deployment) -> dict[str, str]:
    """The deployment's own `labels:` (team, tier, ...) added to its alerts (names checked by the config)."""
    return dict(sorted(dep.labels.items()))


def good_and_total(dep: Deployment, plan: Plan, w: str, nhcb: bool = False) -> tuple[str, str]:
    """PromQL for good and total events per second over window `w` (the recording rules and the Sloth spec)."""
    eq = {"deployment": dep.name}
    if isinstance(plan, GoodputPlan):
        return sum_rate(plan.good_metric, eq, {}, w), sum_rate(plan.total_metric, eq, {}, w)
    if isinstance(plan, AvailabilityPlan):
        router = {**eq, "role": "router"}
        spec = plan.series
        total = sum_rate_of(matched_selector(spec.total.family, router, spec.total.matchers), w)
        bad = [sum_rate_of(matched_selector(m.family, router, m.matchers), w) for m in spec.bad]
        return good_from_bad(total, bad), total
    roles = SLI_ROLES[plan.sli]
    regex, neq = engine_selector(dep, roles), engine_exclusions(dep, roles)
    if nhcb:  # histogram_fraction interpolates a non-edge target the way good_rate does below
        return (nhcb_good_rate(plan.family, eq, regex, w, plan.target, neq),
                nhcb_count_rate(plan.family, eq, regex, w, neq))
    if not plan.approximate:
        lower, upper = plan.le, None
    else:
        lower = None if plan.lower == 0 else format_le(plan.lower)
        upper = format_le(plan.upper)
    return (good_rate(plan.family, eq, regex, w, lower, upper, round(plan.fraction, 9), neq),
            sum_rate(plan.family + "_count", eq, regex, w, neq=neq))
