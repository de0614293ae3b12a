"""`promtool test rules` files: each burn-rate alert fires on a breach, stays quiet when healthy or idle.

Inputs are synthetic counters at 2-minute steps with the labels the scrape config attaches
(`deployment`, `role`). Error ratios are multiples of the budget chosen so exactly the intended
window pairs cross their thresholds (20x: both pages; 10x: only 6h/30m; 4x: tickets only;
0.1x: nothing). Expected annotations are rendered here from the same templates the rules use.
Under --time-scale every interval and eval time is scaled with the rules. Under --histograms nhcb the
latency histograms are native histograms with custom buckets in promtool's `{{schema:-53 ...}}` notation
(Prometheus 3's promtool; 2.42's cannot read it).
"""

from __future__ import annotations

import re
from typing import Any

from monitor.config import Deployment
from monitor.conventions import names
from monitor.conventions.names import GAUGES, TPOT_LEADING_SOURCES
from monitor.conventions.policy import BURN_RATE_ALERTS
from monitor.conventions.slis import LEADING_SLI, LEADING_SOURCE, REQUEST_ROLES
from monitor.conventions.units import format_le, parse_duration
from monitor.escaping import matchers
from monitor.feeds import feed
from monitor.generate.leading import leading_rules
from monitor.generate.options import Options
from monitor.generate.rule_model import AlertingRule
from monitor.generate.rules import burn_alerts, burn_factor
from monitor.generate.symptoms import PAGE_ROLES, global_groups, symptom_groups
from monitor.promql import call, format_number, number, select, selector
from monitor.slo_plan import (
    AvailabilityPlan,
    GoodputPlan,
    Plan,
    SLIPlan,
    edges_for,
    scraped_roles,
)

_VALUE = re.compile(r'\{\{ \$value \| printf "(%[^"]+)" \}\}')
_LABEL = re.compile(r"\{\{ \$labels\.([a-zA-Z_][a-zA-Z0-9_]*) \}\}")
_WITH_LABEL = re.compile(r"\{\{ with \$labels\.([a-zA-Z_][a-zA-Z0-9_]*) \}\}(.*?)\{\{ end \}\}")
TOTAL_PER_STEP = 10_000.0
# 2-minute steps: the 5m windows still hold 2-3 samples, and promtool has half the steps to evaluate.
STEP = "2m"


def render(template: str, value: float, labels: dict[str, str]) -> str:
    """The subset of Prometheus' Go templates our annotations use."""
    text = _VALUE.sub(lambda m: m.group(1) % value, template)
    text = _WITH_LABEL.sub(lambda m: m.group(2).replace("{{ . }}", labels[m.group(1)]) if labels.get(m.group(1))
                           else "", text)
    text = _LABEL.sub(lambda m: labels.get(m.group(1), ""), text)
    return text.replace('{{ "{{" }}', "{{")


def expanded_labels(rule: AlertingRule) -> dict[str, str]:
    """An alert's labels as Prometheus expands them (the rule holds them escaped, see `rules.alert`)."""
    return {k: render(v, 0.0, {}) for k, v in rule.labels.items()}


def _rounded(selected: dict[str, str], metric: str, digits: str) -> str:
    """`round(metric{...}, digits)`: what an expected sample compares with."""
    return str(call("round", select(metric, [(k, "=", v) for k, v in selected.items()]), number(digits)))


def _counter(metric: str, labels: dict[str, str], per_step: float, steps: int) -> dict[str, str]:
    return {"series": selector(metric, labels), "values": f"0+{format_number(per_step)}x{steps}"}


def _availability_series(plan: AvailabilityPlan, error: float | None, steps: int) -> list[dict[str, str]]:
    """The gateway's counters as its version writes them (docs/gateways.md): failures of every kind the SLI
    counts, and around them what it must not count (client disconnects, 4xx, the gateway's own endpoints)."""
    base = {"deployment": plan.deployment, "role": "router", "instance": "10.0.0.3:29000", "job": "sglang-router"}
    total = 0.0 if error is None else TOTAL_PER_STEP
    bad = 0.0 if error is None else TOTAL_PER_STEP * error
    resp, errors = names.SMG_HTTP_RESPONSES, names.SMG_ROUTER_ERRORS
    if plan.gateway == names.GATEWAY_SGLANG_ROUTER:
        def code(status: str, n: float) -> dict[str, str]:
            return _counter(resp, {**base, "status_code": status, "error_code": ""}, n, steps)
        return [_counter(names.SMG_ROUTER_REQUESTS, {**base, "endpoint": "generate", "streaming": "true"}, total, steps),
                code("200", total - bad + 50), code("500", bad), code("408", 0.02 * total)]
    # smg 1.13: half the failures are a worker's 500 passed through (status 500, no error_code, and a
    # backend_error), a quarter the gateway's own 503, a quarter streams broken mid-body (200 + backend_error).
    passed, own = bad / 2, bad / 4
    disconnects, full = 0.05 * total, 0.02 * total

    def answered(path: str, status: str, error_code: str, n: float) -> dict[str, str]:
        return _counter(resp, {**base, "path": path, "status_code": status, "error_code": error_code}, n, steps)
    return [answered("/generate", "200", "", total - passed - own - disconnects - full),
            answered("/generate", "500", "", passed),
            answered("/generate", "503", "no_available_workers", own),
            answered("/generate", "499", "client_closed_request", disconnects),
            answered("/generate", "429", "admission_queue_full", full),
            answered("/health_generate", "503", "no_workers", 50.0),
            answered("/readiness", "503", "", 50.0),
            _counter(errors, {**base, "endpoint": "generate", "error_type": "backend_error"}, bad - own, steps)]


def nhcb_value(edges: tuple[float, ...], counts: dict[int, float], total_sum: float) -> str:
    """A native histogram with custom buckets in promtool's series notation (schema -53): `counts` by bucket
    index (len(edges) is the +Inf bucket), as Prometheus 3 stores a converted classic histogram."""
    buckets = [counts.get(i, 0.0) for i in range(len(edges) + 1)]
    return (f"{{{{schema:-53 sum:{format_number(total_sum)} count:{format_number(sum(buckets))} "
            f"custom_values:[{' '.join(format_number(e) for e in edges)}] "
            f"buckets:[{' '.join(format_number(b) for b in buckets)}]}}}}")


def nhcb_counter(edges: tuple[float, ...], counts: dict[int, float], total_sum: float, steps: int) -> str:
    """A histogram growing by the same observations every step, from empty (the native form of `0+NxS`)."""
    return f"{nhcb_value(edges, {}, 0.0)}+{nhcb_value(edges, counts, total_sum)}x{steps}"


def _series(plan: Plan, role: str, error: float | None, steps: int, nhcb: bool = False) -> list[dict[str, str]]:
    """Counters for one SLI; `error=None` means no traffic (flat counters)."""
    if isinstance(plan, AvailabilityPlan):
        return _availability_series(plan, error, steps)
    base = {"deployment": plan.deployment, "role": role}
    total = 0.0 if error is None else TOTAL_PER_STEP
    good = 0.0 if error is None else TOTAL_PER_STEP * (1 - error)
    if isinstance(plan, GoodputPlan):  # the sidecar's counters, as its scrape job labels them
        base = {"deployment": plan.deployment, "job": names.SIDECAR_JOB, "role": "sidecar", "target": "decode-0-log"}
        return [{"series": selector(plan.total_metric, base), "values": f"0+{format_number(total)}x{steps}"},
                {"series": selector(plan.good_metric, base), "values": f"0+{format_number(good)}x{steps}"}]
    if nhcb:
        # Good observations in the bucket ending at the target (or at the edge below it: the interpolation
        # then adds nothing, as the classic case's equal neighbours), bad ones in the +Inf bucket.
        good_bucket = plan.edges.index(plan.lower if plan.lower else plan.upper)
        bad = total - good
        counts = {good_bucket: good, len(plan.edges): bad}
        total_sum = good * plan.edges[good_bucket] + bad * 2 * plan.edges[-1]
        return [{"series": selector(plan.family, base),
                 "values": nhcb_counter(plan.edges, counts, round(total_sum, 6), steps)}]
    les = [plan.le] if not plan.approximate else [format_le(e) for e in (plan.lower, plan.upper) if e]
    out = [{"series": selector(plan.family + "_count", base), "values": f"0+{format_number(total)}x{steps}"}]
    for le in les:  # interpolation neighbours get the same good count, so the interpolation is exact
        out.append({"series": selector(plan.family + "_bucket", {**base, "le": le}),
                    "values": f"0+{format_number(good)}x{steps}"})
    return out


def _expected(dep: Deployment, plan: Plan, alerts: list[AlertingRule], error: float, alertname: str,
              pairs: set[tuple[str, str]]) -> list:
    rules = [r for r in alerts if r.alert == alertname
             and (r.labels["long_window"], r.labels["short_window"]) in pairs]
    burn = error / plan.budget
    labels = {"deployment": dep.name, "sli": plan.sli}
    return [{"exp_labels": {**labels, **expanded_labels(r)},
             "exp_annotations": {k: render(v, burn, labels) for k, v in r.annotations.items()}} for r in rules]


def _case(dep: Deployment, plan: Plan, alerts: list[AlertingRule], role: str, name: str, multiple: float | None,
          eval_min: int, pages: set[tuple[str, str]], tickets: set[tuple[str, str]],
          opts: Options) -> dict[str, Any] | None:
    error = None if multiple is None else multiple * plan.budget
    if error is not None and error > 1:
        return None
    at = opts.duration(eval_min * 60)
    case: dict[str, Any] = {"name": f"{dep.name} {plan.sli}: {name}", "interval": opts.duration(STEP),
                            "input_series": _series(plan, role, error, eval_min // 2 + 3, opts.nhcb)}
    ids = {"deployment": dep.name, "sli": plan.sli}
    if error is None:
        total = selector(names.sli_total("5m"), ids)
        case["promql_expr_test"] = [
            {"expr": selector(names.sli_error("5m"), ids), "eval_time": at, "exp_samples": []},
            {"expr": total, "eval_time": at, "exp_samples": [{"labels": total, "value": 0}]}]
    else:
        case["promql_expr_test"] = [{"expr": _rounded(ids, names.sli_error("5m"), "0.0001"), "eval_time": at,
                                     "exp_samples": [{"labels": matchers(ids), "value": round(error, 4)}]}]
    case["alert_rule_test"] = [
        {"eval_time": at, "alertname": names.ALERT_PAGE,
         "exp_alerts": _expected(dep, plan, alerts, error or 0, names.ALERT_PAGE, pages)},
        {"eval_time": at, "alertname": names.ALERT_TICKET,
         "exp_alerts": _expected(dep, plan, alerts, error or 0, names.ALERT_TICKET, tickets)},
    ]
    return case


def _target_down_case(dep: Deployment, symptoms: list[AlertingRule], opts: Options) -> dict[str, Any] | None:
    roles = scraped_roles(dep)
    if not roles:
        return None
    role = roles[0]
    rule = next(r for r in symptoms if r.alert == names.ALERT_TARGET_DOWN and r.labels.get("role") == role)
    labels = {"deployment": dep.name, "role": role, "instance": "10.0.0.1:30000", "job": f"sglang-{role}"}
    series = selector("up", labels)
    return {"name": f"{dep.name}: {role} target down", "interval": opts.duration(STEP),
            "input_series": [{"series": series, "values": "1 1 0x5"}],
            "alert_rule_test": [
                {"eval_time": opts.duration("2m"), "alertname": names.ALERT_TARGET_DOWN, "exp_alerts": []},
                {"eval_time": opts.duration("6m"), "alertname": names.ALERT_TARGET_DOWN, "exp_alerts": [
                    {"exp_labels": {**labels, **expanded_labels(rule),
                                    "severity": "page" if role in PAGE_ROLES else "ticket"},
                     "exp_annotations": {k: render(v, 0, labels) for k, v in rule.annotations.items()}}]}]}


def _leading_cases(dep: Deployment, opts: Options) -> list[dict[str, Any]]:
    """The leading TPOT warning: quiet while running requests decode within the TPOT target, firing (after
    its `for`) when either the ITL mean or running / gen_throughput goes over it, quiet when idle.
    15 s samples: the 1m ITL rate needs several in its window. TPOT and ITL are the warning's roles in
    conventions (`LEADING_SLI`, `LEADING_SOURCE`), as in the rules it tests."""
    rule = next((r for r in leading_rules(dep, opts) if isinstance(r, AlertingRule)), None)
    target = dep.target_seconds(LEADING_SLI.key)
    if rule is None or target is None:
        return []
    source = LEADING_SOURCE.family
    itl_role = feed(dep, LEADING_SOURCE.roles).target_roles[0]
    rank_role = feed(dep, REQUEST_ROLES).target_roles[0]
    itl = {"deployment": dep.name, "role": itl_role}
    rank = {"deployment": dep.name, "role": rank_role, "instance": "10.0.0.1:30000", "tp_rank": "0"}
    step, tokens, running, steps = "15s", 150, 8, 24

    def series(itl_seconds: float | None, thr_seconds: float | None) -> list[dict[str, str]]:
        out = []
        if itl_seconds is not None and opts.nhcb:  # the same tokens in the bucket holding itl_seconds
            edges = edges_for(dep, LEADING_SOURCE.key)
            at = next(i for i, e in enumerate(edges + (float("inf"),)) if itl_seconds <= e)
            out.append({"series": selector(source, itl), "values": nhcb_counter(
                edges, {at: float(tokens)}, round(tokens * itl_seconds, 9), steps)})
        elif itl_seconds is not None:  # `tokens` per step, each taking itl_seconds
            out += [{"series": selector(source + "_count", itl), "values": f"0+{tokens}x{steps}"},
                    {"series": selector(source + "_sum", itl),
                     "values": f"0+{format_number(round(tokens * itl_seconds, 9))}x{steps}"}]
        n, gen = (running, running / thr_seconds) if thr_seconds else (0, 0)
        out += [{"series": selector(GAUGES["num_running_reqs"], rank), "values": f"{n}x{steps}"},
                {"series": selector(GAUGES["gen_throughput"], rank), "values": f"{format_number(round(gen, 6))}x{steps}"}]
        return out

    at = opts.duration("5m")
    labels = {"deployment": dep.name, "source": TPOT_LEADING_SOURCES[2]}

    def case(name: str, itl_s: float | None, thr_s: float | None, fires: float | None) -> dict[str, Any]:
        exp = [] if fires is None else [{"exp_labels": {**labels, **expanded_labels(rule)},
                                        "exp_annotations": {k: render(v, fires, labels)
                                                            for k, v in rule.annotations.items()}}]
        return {"name": f"{dep.name} {LEADING_SLI.key}: {name}", "interval": opts.duration(step),
                "input_series": series(itl_s, thr_s),
                "alert_rule_test": [{"eval_time": at, "alertname": names.ALERT_TPOT_LEADING, "exp_alerts": exp}]}

    slow, fine = 1.5 * target, 0.5 * target
    checked = case("running requests decode slower than the target: warns", slow, fine, slow)
    checked["promql_expr_test"] = [
        {"expr": _rounded({"deployment": dep.name, "source": src}, names.TPOT_LEADING, "0.000001"),
         "eval_time": at, "exp_samples": [{"labels": matchers({"deployment": dep.name, "source": src}),
                                           "value": round(value, 6)}]}
        for src, value in zip(TPOT_LEADING_SOURCES, (slow, fine, slow))]
    return [checked,
            case("decode throughput alone says slower than the target (no tokens streamed yet): warns", None, 2 * target,
                 2 * target),
            case("healthy stays quiet", fine, fine, None),
            case("idle stays quiet", None, None, None)]
def _symptom_case(dep: Deployment, symptoms: list[AlertingRule], opts: Options, name: str, alertname: str,
                  series: dict[str, str], quiet_at: int, firing_at: int, fired: dict[str, str],
                  value: float) -> dict[str, Any]:
    """One symptom alert over 1-minute samples: quiet at `quiet_at` minutes, firing with `fired` labels later."""
    rule = next(r for r in symptoms if r.alert == alertname)
    labels = {**expanded_labels(rule), **fired}
    return {"name": f"{dep.name}: {name}", "interval": opts.duration("1m"),
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [
                {"eval_time": opts.duration(quiet_at * 60), "alertname": alertname, "exp_alerts": []},
                {"eval_time": opts.duration(firing_at * 60), "alertname": alertname, "exp_alerts": [
                    {"exp_labels": labels,
                     "exp_annotations": {k: render(v, value, labels) for k, v in rule.annotations.items()}}]}]}


def _gateway_cases(dep: Deployment, symptoms: list[AlertingRule], opts: Options) -> list[dict[str, Any]]:
    """A circuit breaker that opens pages nothing for a minute, then tickets; PD rendezvous failures at smg
    1.13's registration probe (one per prefill without a bootstrap listener) never fire, a bootstrap-phase one
    does."""
    if not dep.router_targets:
        return []
    base = {"deployment": dep.name, "role": "router", "instance": "10.0.0.3:29000", "job": "sglang-router"}
    worker = {**base, "worker": "http://10.0.0.9:30000"}
    cases = [_symptom_case(dep, symptoms, opts, "gateway circuit breaker open", names.ALERT_GATEWAY_CIRCUIT_OPEN,
                           {selector(names.SMG_WORKER_CB_STATE, worker): "0 0 1x6"}, 2, 5, worker, 1.0)]
    if dep.mode == "pd-disaggregated" and names.gateway_has(dep.gateway, names.SMG_PD_RENDEZVOUS_FAILURES):
        failures = names.SMG_PD_RENDEZVOUS_FAILURES
        probe = {**base, "leg": "prefill", "phase": names.RENDEZVOUS_PROBE_PHASE}
        bootstrap = {**base, "leg": "decode", "phase": "bootstrap"}
        cases.append(_symptom_case(
            dep, symptoms, opts, "PD rendezvous failures: registration probes stay quiet, a bootstrap failure pages",
            names.ALERT_GATEWAY_PD_FAILURES,
            {selector(failures, probe): "0 1 2x9", selector(failures, bootstrap): "0x5 2x5"}, 5, 8,
            {"deployment": dep.name, "leg": "decode", "phase": "bootstrap"}, 2.0))
    return cases


def promtool_test(dep: Deployment, plans: list[Plan], opts: Options) -> dict[str, Any]:
    period = parse_duration(dep.period)
    pairs = {sev: {(lw, sw) for s, lw, sw, f in BURN_RATE_ALERTS if s == sev} for sev in ("page", "ticket")}

    def firing(severity: str, multiple: float) -> set[tuple[str, str]]:
        return {(lw, sw) for s, lw, sw, f in BURN_RATE_ALERTS
                if s == severity and multiple > burn_factor(f, period)}

    # The rules are built once here, not once per case that looks one up (fleet-scale generate time).
    symptoms = [r for g in symptom_groups(dep, opts) for r in g.alerts]
    tests = []
    for plan in plans:
        alerts = burn_alerts(dep, plan, opts)
        # A role whose series feed the SLI (goodput and availability read their own series, not a role's).
        role = feed(dep, plan.record.roles if isinstance(plan, SLIPlan) else REQUEST_ROLES).target_roles[0]
        # A constant error ratio gives the same value in every window that holds >= 2 samples, so 64
        # minutes (a full 1h window) decides every pair; longer simulations only cost test time.
        for name, multiple, minutes in (("fast burn pages", 20.0, 64), ("medium burn pages via 6h/30m only", 10.0, 64),
                                        ("slow burn tickets, does not page", 4.0, 64),
                                        ("healthy stays quiet", 0.1, 64), ("no traffic stays quiet", None, 30)):
            m = multiple or 0.0
            case = _case(dep, plan, alerts, role, name, multiple, minutes,
                         firing("page", m) & pairs["page"], firing("ticket", m) & pairs["ticket"], opts)
            if case:
                tests.append(case)
    down = _target_down_case(dep, symptoms, opts)
    if down:
        tests.append(down)
    tests += _leading_cases(dep, opts)
    tests += _gateway_cases(dep, symptoms, opts)
    return {"rule_files": [f"../{names.rules_file(dep.name)}"], "evaluation_interval": opts.duration(STEP),
            "tests": tests}


def _fired(rule: AlertingRule, labels: dict[str, str], value: float) -> dict[str, Any]:
    return {"exp_labels": {**labels, **expanded_labels(rule)},
            "exp_annotations": {k: render(v, value, labels) for k, v in rule.annotations.items()}}


def self_test(opts: Options) -> dict[str, Any]:
    """The sidecar's own alerts (`global_groups`): each quiet, then firing, at 1-minute steps."""
    rules = {r.alert: r for g in global_groups(opts) for r in g.alerts}
    sidecar = {"instance": "127.0.0.1:9464", "job": names.SIDECAR_JOB}
    stuck = {**sidecar, "loop": names.LOOP_SCRAPE, "deployment": "stuck-deployment"}
    healthy = {**sidecar, "loop": names.LOOP_SCRAPE, "deployment": "healthy-deployment"}
    own = {**sidecar, "loop": names.LOOP_SIDECAR}  # the sidecar's own loop has no deployment
    age, restarts = names.M_LOOP_CYCLE_AGE, names.M_LOOP_RESTARTS
    step, at = opts.duration("1m"), opts.duration
    # Scrape interval 5 s: stale past 3 x 5 s. Ages in seconds (the sidecar's clock is not scaled).
    return {"rule_files": [f"../{names.rules_file(names.SELF_RULES)}"], "evaluation_interval": step, "tests": [
        {"name": "sidecar down", "interval": step,
         "input_series": [{"series": selector("up", sidecar), "values": "1 1 0x10"}],
         "alert_rule_test": [
             {"eval_time": at("3m"), "alertname": names.ALERT_SIDECAR_DOWN, "exp_alerts": []},
             {"eval_time": at("8m"), "alertname": names.ALERT_SIDECAR_DOWN,
              "exp_alerts": [_fired(rules[names.ALERT_SIDECAR_DOWN], sidecar, 0)]}]},
        {"name": "a loop with no completed cycle in 3 intervals", "interval": step,
         "input_series": [{"series": selector(names.M_SCRAPE_INTERVAL, sidecar), "values": "5x15"},
                          {"series": selector(age, stuck), "values": "3x4 60+60x10"},
                          {"series": selector(age, own), "values": "3x4 60+60x10"},
                          {"series": selector(age, healthy), "values": "3x15"}],
         "alert_rule_test": [
             {"eval_time": at("4m"), "alertname": names.ALERT_LOOP_STUCK, "exp_alerts": []},
             {"eval_time": at("8m"), "alertname": names.ALERT_LOOP_STUCK,
              "exp_alerts": [_fired(rules[names.ALERT_LOOP_STUCK], labels, 240) for labels in (stuck, own)]}]},
        {"name": "a loop restarted after an error", "interval": step,
         "input_series": [{"series": selector(restarts, stuck), "values": "0 0 0 1x12"},
                          {"series": selector(restarts, healthy), "values": "0x15"}],
         "alert_rule_test": [
             {"eval_time": at("2m"), "alertname": names.ALERT_LOOP_RESTARTING, "exp_alerts": []},
             {"eval_time": at("5m"), "alertname": names.ALERT_LOOP_RESTARTING,
              "exp_alerts": [_fired(rules[names.ALERT_LOOP_RESTARTING], stuck, 1)]}]},
        # A full disk from minute 3: one failed write per 15 s recording tick, 4 a minute.
        {"name": "the recording cannot be written", "interval": step,
         "input_series": [{"series": selector(names.M_RECORDING_WRITE_ERRORS, sidecar), "values": "0 0 0 4+4x12"}],
         "alert_rule_test": [
             {"eval_time": at("2m"), "alertname": names.ALERT_RECORDING_FAILING, "exp_alerts": []},
             {"eval_time": at("5m"), "alertname": names.ALERT_RECORDING_FAILING,
              "exp_alerts": [_fired(rules[names.ALERT_RECORDING_FAILING], sidecar, 12)]}]},
        {"name": "a config reload failed", "interval": step,
         "input_series": [{"series": selector(names.M_CONFIG_RELOAD_OK, sidecar), "values": "1 1 0x12"}],
         "alert_rule_test": [
             {"eval_time": at("4m"), "alertname": names.ALERT_CONFIG_RELOAD_FAILED, "exp_alerts": []},
             {"eval_time": at("8m"), "alertname": names.ALERT_CONFIG_RELOAD_FAILED,
              "exp_alerts": [_fired(rules[names.ALERT_CONFIG_RELOAD_FAILED], sidecar, 0)]}]},
    ]}
