"""What each SLO of a deployment counts, in PromQL: below generate/ and interop/, so rules and OpenSLO/Sloth agree.

A latency SLI resolves to a bucket edge of its histogram or to an interpolation between two
(`resolve_sli`); goodput and availability are SLOs over a pair of counters (`GoodputPlan`,
`AvailabilityPlan`). `good_and_total` writes any plan as PromQL: the generator's recording rules and the
Sloth spec both use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.config import Deployment
from monitor.conventions.names import (
    AVAILABILITY_SERIES,
    AVAILABILITY_SLI,
    GATEWAY_SMG,
    GOODPUT_REQUESTS_TOTAL,
    LOG_FINISHED_TOTAL,
    AvailabilitySeries,
)
from monitor.conventions.slis import ENGINE_ROLES, GOODPUT_SLI, REQUEST_SLIS, SLI, SLI_BY_KEY, sharing_flag
from monitor.conventions.units import format_le
from monitor.feeds import feed
from monitor.promql import (
    Expr,
    chain,
    format_number,
    good_from_bad,
    good_rate,
    label_matcher,
    matched_select,
    nhcb_count_rate,
    nhcb_good_rate,
    select,
    selector,
    split_matchers,
    sum_rate,
    sum_rate_of,
)

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
    def record(self) -> SLI:
        return SLI_BY_KEY[self.sli]

    @property
    def title(self) -> str:
        return self.record.title

    @property
    def long_name(self) -> str:
        return self.record.long_name

    @property
    def sli_metric(self) -> str:
        """The series the SLI counts good events from (for annotations)."""
        return selector(self.family + "_bucket", {"le": self.le if not self.approximate else format_le(self.upper)})

    def describe(self) -> str:
        pct = format_number(round(self.objective * 100, 6))
        return f"{pct}% of {self.record.counts} with {self.record.long_name} <= {format_number(self.target)}s"

    def approximation_note(self, nhcb: bool = False) -> str:
        if not self.approximate:
            return ""
        if nhcb:  # the same interpolation, done by histogram_fraction inside the native histogram's bucket
            between = f"{format_number(self.lower)} and {format_number(self.upper)} by histogram_fraction"
        else:
            lo = "0" if self.lower == 0 else label_matcher("le", "=", format_le(self.lower))
            between = f"{lo} and {label_matcher('le', '=', format_le(self.upper))}"
        return (f"approximate: {format_number(self.target)}s is not a bucket edge of {self.family}; good events "
                f"are interpolated linearly between {between} (fix: {bucket_fix(self)})")


@dataclass(frozen=True)
class GoodputPlan:
    """The optional goodput SLO: requests that succeeded and met every latency target, counted by the
    sidecar from SGLang's request log. It records and alerts under the same names as the histogram
    SLIs (label sli="goodput"), from two counters instead of a histogram."""

    deployment: str
    objective: float
    # The latency targets a request must meet: each request-log SLI (REQUEST_SLIS) the deployment targets.
    targets: dict[str, float]
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
        met = " and ".join(f"{SLI_BY_KEY[s].title} <= {format_number(t)}s" for s, t in self.targets.items())
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
        return chain("+", [select(m.family) for m in self.series.bad])

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
    return tuple(dep.buckets.get(sli) or SLI_BY_KEY[sli].buckets)


def bucket_fix(plan: SLIPlan) -> str:
    values = sorted({*plan.edges, plan.target})
    flag = plan.record.bucket_flag
    if flag is None:  # SGLang 0.5.23 fixes these edges in its collector
        return (f"choose a target on one of SGLang's fixed edges of {plan.family} (no launch flag sets them), or "
                f"interpolate")
    shared = "".join(f" (this flag also sets the {SLI_BY_KEY[o].title} buckets)" for o in sharing_flag(plan.sli))
    return (f"relaunch SGLang with `{flag} {' '.join(format_number(v) for v in values)}`{shared} and set "
            f"`buckets: {{{plan.sli}: [...]}}` for deployment {plan.deployment} to the same list")


def resolve_sli(dep: Deployment, sli: str, approximate: bool) -> SLIPlan:
    target = dep.target_seconds(sli)
    assert target is not None
    edges = edges_for(dep, sli)
    for edge in edges:
        if abs(edge - target) <= 1e-9 * max(1.0, abs(target)):
            return SLIPlan(dep.name, sli, SLI_BY_KEY[sli].family, target, dep.objective, edges, edge, edge)
    above = [e for e in edges if e > target]
    below = [e for e in edges if e < target]
    plan = SLIPlan(dep.name, sli, SLI_BY_KEY[sli].family, target, dep.objective, edges,
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


def engine_matchers(dep: Deployment, roles: tuple[str, ...] = ENGINE_ROLES) -> tuple[dict[str, str], dict[str, str],
                                                                               dict[str, str]]:
    """(regex, not-equal, not-matching) label matchers for the SGLang series of `dep` that feed a number
    SGLang records on `roles`: `monitor.feeds`, the same targets and workers the sidecar reads."""
    return split_matchers(feed(dep, roles).matchers)


def extra_labels(dep: Deployment) -> dict[str, str]:
    """The deployment's own `labels:` (team, tier, ...) added to its alerts (names checked by the config)."""
    return dict(sorted(dep.labels.items()))


def good_and_total(dep: Deployment, plan: Plan, w: str, nhcb: bool = False) -> tuple[Expr, Expr]:
    """PromQL for good and total events per second over window `w` (the recording rules and the Sloth spec)."""
    eq = {"deployment": dep.name}
    if isinstance(plan, GoodputPlan):
        return sum_rate(plan.good_metric, eq, {}, w), sum_rate(plan.total_metric, eq, {}, w)
    if isinstance(plan, AvailabilityPlan):
        router = {**eq, "role": "router"}
        spec = plan.series
        total = sum_rate_of(matched_select(spec.total.family, router, spec.total.matchers), w)
        bad = [sum_rate_of(matched_select(m.family, router, m.matchers), w) for m in spec.bad]
        return good_from_bad(total, bad), total
    regex, neq, nregex = engine_matchers(dep, plan.record.roles)
    if nhcb:  # histogram_fraction interpolates a non-edge target the way good_rate does below
        return (nhcb_good_rate(plan.family, eq, regex, w, plan.target, neq, nregex),
                nhcb_count_rate(plan.family, eq, regex, w, neq, nregex))
    if not plan.approximate:
        lower, upper = plan.le, None
    else:
        lower = None if plan.lower == 0 else format_le(plan.lower)
        upper = format_le(plan.upper)
    return (good_rate(plan.family, eq, regex, w, lower, upper, round(plan.fraction, 9), neq, nregex),
            sum_rate(plan.family + "_count", eq, regex, w, neq=neq, nregex=nregex))
