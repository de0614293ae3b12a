"""SLO recording rules and multi-window multi-burn-rate alerts (SRE workbook ch. 5, Sloth naming).

Per deployment and SLI (only SLIs with `<sli>_target_seconds`):
  slo_monitor:sli_good:rate<w>          sum by (deployment) rate of `_bucket{le="<target>"}`
  slo_monitor:sli_total:rate<w>         sum by (deployment) rate of `_count`
  (--histograms nhcb: histogram_fraction(-Inf, <target>, H) * histogram_count(H) and histogram_count(H), H the
  summed rate of the native histogram with custom buckets Prometheus converted the classic one into)
  slo_monitor:sli_error:ratio_rate<w>   1 - good/total, absent when total == 0 (no traffic)
  slo_monitor:burn_rate:ratio_rate<w>   error ratio / (1 - objective)
for w in RULE_WINDOWS (5m 30m 1h 2h 6h 1d 3d), computed from raw counters so every window is
traffic-weighted (the optional goodput SLO, sli="goodput", from the sidecar's two request-log counters; the
optional availability SLO, sli="availability", from the gateway's counters: good = requests - failed, see
conventions.AVAILABILITY_SERIES); the SLO period (e.g. 30d) is the ratio of `sum_over_time` of the 5m good and
total rates (traffic-weighted, cheap). All carry labels {deployment, sli}.
"""

from __future__ import annotations

import math

from monitor.config import Deployment
from monitor.conventions import names
from monitor.conventions.policy import BURN_RATE_ALERTS, RULE_WINDOWS
from monitor.conventions.slis import REQUEST_FAILED, SLI, SLI_RECORDS
from monitor.conventions.units import parse_duration
from monitor.escaping import template_literal
from monitor.generate.options import Options
from monitor.generate.rule_model import AlertingRule, RecordingRule, RuleGroup
from monitor.promql import (
    Expr,
    binop,
    call,
    error_ratio,
    format_number,
    histogram_fraction,
    mean_latency,
    range_call,
    select,
    selector,
)
from monitor.slo_plan import (
    AvailabilityPlan,
    GoodputPlan,
    Plan,
    SLIPlan,
    engine_matchers,
    extra_labels,
    good_and_total,
)

PERIOD_30D = 30 * 86400


def record(name: str, expr: Expr, labels: dict[str, str]) -> RecordingRule:
    """A recording rule, its labels sorted."""
    return RecordingRule(record=name, expr=expr, labels=dict(sorted(labels.items())))


def alert(name: str, expr: Expr, for_: str | None, labels: dict[str, str],
          annotations: dict[str, str]) -> AlertingRule:
    """An alerting rule, its labels and annotations sorted. Prometheus expands its label values as templates,
    like its annotations: each value here is literal text (a deployment's `team: "{{"` must neither break the
    file nor run)."""
    return AlertingRule(alert=name, expr=expr, for_=for_ or None,
                        labels={k: template_literal(v) for k, v in sorted(labels.items())},
                        annotations=dict(sorted(annotations.items())))


def burn_factor(nominal: float, period_seconds: int) -> float:
    """The workbook factors are for 30d; keep the same share of budget per window for other periods."""
    return round(nominal * period_seconds / PERIOD_30D, 6)


def _ids(dep: Deployment, plan: Plan) -> tuple[tuple[str, str, str], ...]:
    return (("deployment", "=", dep.name), ("sli", "=", plan.sli))


def sli_recordings(dep: Deployment, plan: Plan, opts: Options) -> list[RecordingRule]:
    labels = {"sli": plan.sli}
    ids = _ids(dep, plan)
    rules = []
    for window in RULE_WINDOWS:
        good, total = good_and_total(dep, plan, opts.duration(window), opts.nhcb)
        rules.append(record(names.sli_good(window), good, labels))
        rules.append(record(names.sli_total(window), total, labels))
    for window in RULE_WINDOWS:
        rules.append(record(names.sli_error(window), error_ratio(
            select(names.sli_good(window), ids), select(names.sli_total(window), ids)), labels))
    return rules


def meta_recordings(dep: Deployment, plan: Plan, opts: Options) -> list[RecordingRule]:
    ids = _ids(dep, plan)
    budget = plan.budget
    static = {"deployment": dep.name, "sli": plan.sli}
    period = opts.duration(dep.period)
    rules = [
        record(names.OBJECTIVE, call("vector", plan.objective), static),
        record(names.ERROR_BUDGET, call("vector", budget), static),
    ]
    if isinstance(plan, SLIPlan):  # goodput has no single latency target
        rules.append(record(names.TARGET, call("vector", plan.target), static))
    for window in RULE_WINDOWS:
        rules.append(record(names.burn_rate(window), binop(select(names.sli_error(window), ids), "/", budget),
                            {"sli": plan.sli}))
    good5, total5 = select(names.sli_good("5m"), ids), select(names.sli_total("5m"), ids)
    rules.append(record(names.SLI_ERROR_PERIOD, error_ratio(range_call("sum_over_time", good5, period),
                                                            range_call("sum_over_time", total5, period)),
                        {"sli": plan.sli, "period": dep.period}))
    period_burn = binop(select(names.SLI_ERROR_PERIOD, ids), "/", budget)
    rules.append(record(names.PERIOD_BURN_RATE, period_burn, {"sli": plan.sli, "period": dep.period}))
    rules.append(record(names.BUDGET_REMAINING, binop(1, "-", period_burn, parens="needed"),
                        {"sli": plan.sli, "period": dep.period}))
    return rules


def baseline_means(dep: Deployment) -> list[tuple[SLI, float]]:
    """The records the recipe baseline gives a mean for (its `<key>_mean_seconds`, monitor/config.py Baseline), in
    record order, each with that mean: a regression alert each (symptoms.py), reading the record's 30m mean."""
    baseline = dep.baseline
    if baseline is None:
        return []
    means = ((sli, getattr(baseline, f"{sli.key}_mean_seconds", None)) for sli in SLI_RECORDS)
    return [(sli, value) for sli, value in means if value]


def mean_slis(dep: Deployment) -> list[SLI]:
    """The records whose mean latency the deployment's rules record: those it targets (the mean beside the SLO,
    as the sidecar exports it) and those its recipe baseline has a mean for (the regression alerts read it).
    Nothing else reads the recordings (the dashboards and the analyzer compute their means from the histograms),
    so an SLI no deployment targets adds no rule, and adding one changes only the deployments that target it."""
    wanted = {*dep.slis, *(sli.key for sli, _ in baseline_means(dep))}
    return [sli for sli in SLI_RECORDS if sli.key in wanted]


def latency_means(dep: Deployment, opts: Options) -> list[RecordingRule]:
    """Mean latency from `_sum/_count` (NHCB: histogram_sum/histogram_count) of each of `mean_slis`."""
    eq = {"deployment": dep.name}
    out = []
    slis = mean_slis(dep)
    for window in ("5m", "30m"):
        for sli in slis:
            regex, neq, nregex = engine_matchers(dep, sli.roles)
            out.append(record(names.latency_mean(window), mean_latency(
                sli.family, eq, regex, opts.duration(window), neq, opts.nhcb, nregex), {"sli": sli.key}))
    return out


def burn_annotations(dep: Deployment, plan: Plan, severity: str, long_w: str, short_w: str, factor: float,
                     opts: Options) -> dict[str, str]:
    name, title, fac = template_literal(dep.name), plan.title, format_number(factor)
    scale = f" (time-scaled 1/{format_number(opts.time_scale)}: {opts.duration(long_w)}/{opts.duration(short_w)})" \
        if opts.scaled else ""
    ann = {
        "summary": f"{name}: {title} SLO burning its error budget at {{{{ $value | printf \"%.1f\" }}}}x "
                   f"({severity}: > {fac}x over {long_w} and {short_w})",
        "description": template_literal(
            f"Deployment {dep.name} ({dep.model} on {dep.hardware}): the {plan.long_name} SLO is "
            f"{plan.describe()} over {dep.period}. ") + (
            f"The error ratio over the last {long_w}{scale} burns the budget (1 - objective = "
            f"{format_number(plan.budget)}) at {{{{ $value | printf \"%.2f\" }}}}x, above {fac}x, and the "
            f"{short_w} window confirms it is still happening."),
        "runbook": template_literal(_runbook(dep, plan, long_w)),
        "deployment": template_literal(dep.name),
        "sli": plan.sli,
        "objective": format_number(plan.objective),
        "burn_rate": "{{ $value | printf \"%.2f\" }}",
        "sli_metric": plan.sli_metric,
    }
    if isinstance(plan, SLIPlan):
        ann["target_seconds"] = format_number(plan.target)
        if opts.nhcb:
            ann["sli_metric"] = histogram_fraction(-math.inf, plan.target, select(plan.family))
        if plan.approximate:
            ann["approximation"] = template_literal(plan.approximation_note(opts.nhcb))
    return ann


def _runbook(dep: Deployment, plan: Plan, long_w: str) -> str:
    rule = selector(names.sli_error(long_w), {"deployment": dep.name, "sli": plan.sli})
    if isinstance(plan, AvailabilityPlan):
        return (f"Requests fail at the gateway ({plan.gateway}). Open the 'SGLang deployment' dashboard, row "
                f"'Gateway', for {dep.name}: which status codes and error codes (5xx; 499 are client disconnects and "
                f"do not count), which workers are unhealthy or behind an open circuit breaker, whether it sheds "
                f"load; then the workers' own logs. Rules: {rule}.")
    if isinstance(plan, GoodputPlan):
        # What a request of this deployment can miss (the sidecar's `missed` label): its request-log targets, or
        # failing; the other request-log SLIs stay 0 on it.
        missed = ", ".join((*plan.targets, REQUEST_FAILED))
        return (f"Goodput is counted per request from SGLang's request log by the slo-monitor sidecar. Check "
                f'{selector(names.M_MISSED, {"deployment": dep.name})} for which target requests miss '
                f"({missed}), then the alerts of that SLI and the 'SGLang deployment' dashboard. Rules: {rule}.")
    return (f"Open the Grafana dashboard 'SGLang deployment' for {dep.name}; compare {plan.title} percentiles "
            f"with the target, then check queued requests, KV-cache token usage, PD transfer queues and the "
            f"router. Rules: {rule}.")


def burn_alerts(dep: Deployment, plan: Plan, opts: Options) -> list[AlertingRule]:
    ids = _ids(dep, plan)
    period = parse_duration(dep.period)
    rules = []
    for severity, long_w, short_w, nominal in BURN_RATE_ALERTS:
        factor = burn_factor(nominal, period)
        if factor * plan.budget >= 1:
            continue  # the error ratio can never exceed 1: this alert could never fire
        fac = format_number(factor)
        expr = binop(binop(select(names.burn_rate(long_w), ids), ">", factor), "and",
                     binop(select(names.burn_rate(short_w), ids), ">", factor), before="\n", after="\n",
                     parens="needed")
        # deployment/sli repeat the series labels so rules stay distinct (promtool's duplicate-rule lint).
        labels = {**extra_labels(dep), "deployment": dep.name, "sli": plan.sli, "severity": severity, "long_window": long_w, "short_window": short_w,
                  "burn_rate_threshold": fac}
        name = names.ALERT_PAGE if severity == "page" else names.ALERT_TICKET
        rules.append(alert(name, expr, None, labels,
                           burn_annotations(dep, plan, severity, long_w, short_w, factor, opts)))
    return rules


def slo_groups(dep: Deployment, plans: list[Plan], opts: Options) -> list[RuleGroup]:
    """One group per deployment, in dependency order: raw rates -> error ratios -> burn rates -> alerts.

    Prometheus evaluates the rules of a group one after another at the same timestamp, each seeing what
    the earlier ones just recorded; groups run independently, so an alert reading a burn rate recorded in
    another group sees it up to one evaluation interval late (and that group's error ratios one more).
    The mean latencies go with the symptom rules that read them."""
    if not plans:
        return []
    return [RuleGroup(name=names.group(dep.name, "slo"), rules=[
        *(r for p in plans for r in sli_recordings(dep, p, opts)),
        *(r for p in plans for r in meta_recordings(dep, p, opts)),
        *(r for p in plans for r in burn_alerts(dep, p, opts)),
    ])]
