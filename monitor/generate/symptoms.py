"""Symptom alerts: the things that break before (or instead of) an SLO burn shows up."""

from __future__ import annotations

from monitor.config import Deployment
from monitor.conventions import names
from monitor.conventions.names import COUNTERS, GAUGES
from monitor.conventions.policy import KV_FULL_RATIO, REGRESSION_FACTOR
from monitor.conventions.slis import COUNTER_ROLES, ENGINE_ROLES
from monitor.escaping import template_literal
from monitor.generate.gateway import gateway_alerts
from monitor.generate.leading import leading_rules
from monitor.generate.options import Options
from monitor.generate.rule_model import AlertingRule, RecordingRule, Rule, RuleGroup
from monitor.generate.rules import alert, baseline_means, latency_means, record
from monitor.promql import (
    Expr,
    aggregate,
    binop,
    call,
    format_number,
    paren,
    per_rank_total,
    range_call,
    select,
    select_groups,
)
from monitor.slo_plan import engine_matchers, extra_labels, scraped_roles

PAGE_ROLES = frozenset({*ENGINE_ROLES, "router"})


def _mean_source(family: str, opts: Options) -> str:
    return f"histogram_sum/histogram_count of {family}" if opts.nhcb else f"{family}_sum/_count"


def _ann(summary: str, description: str, runbook: str) -> dict[str, str]:
    return {"summary": summary, "description": description, "runbook": runbook}


def symptom_groups(dep: Deployment, opts: Options) -> list[RuleGroup]:
    d = template_literal(dep.name)
    eq = {"deployment": dep.name}
    engine = engine_matchers(dep)[0]
    base = {**extra_labels(dep), "deployment": dep.name}
    rec: list[RecordingRule] = [
        record(names.QUEUE, per_rank_total(GAUGES["num_queue_reqs"], eq, engine), {}),
        record(names.RUNNING, per_rank_total(GAUGES["num_running_reqs"], eq, engine), {}),
    ]
    rules: list[AlertingRule] = []
    for role in scraped_roles(dep):
        severity = "page" if role in PAGE_ROLES else "ticket"
        rules.append(alert(
            names.ALERT_TARGET_DOWN, binop(select_groups(names.UP, {**eq, "role": role}), "==", 0),
            opts.duration("2m"),
            {**base, "deployment": dep.name, "role": role, "severity": severity},
            _ann(f"{d}: {role} target {{{{ $labels.instance }}}} is down",
                 f"Prometheus cannot scrape {{{{ $labels.instance }}}} (job {{{{ $labels.job }}}}, role {role}) of "
                 f"deployment {d} (up == 0 for {opts.duration('2m')}).",
                 "Check the process and its --enable-metrics flag; curl the /metrics URL from the Prometheus host.")))
    if any(r in engine["role"].split("|") for r in scraped_roles(dep)):
        up = select_groups(names.UP, eq, engine)
        sglang = select_groups("", eq, {**engine, "__name__": "sglang:.+"})
        scraped = binop(aggregate("count", binop(up, "==", 1), ("deployment",)), "unless",
                        aggregate("count", sglang, ("deployment",)), on=("deployment",))
        rules.append(alert(
            names.ALERT_METRICS_ABSENT,
            binop(call("absent", up), "or", paren(scraped), before="\n", after="\n", parens="needed"),
            opts.duration("5m"), {**base, "severity": "ticket"},
            _ann(f"{d}: no sglang: metrics", f"Deployment {d} has no scraped SGLang engine target or its targets "
                 "expose no `sglang:` series.",
                 "Start SGLang with --enable-metrics. If Prometheus stores `sglang_...` names (prometheus_client "
                 ">= 0.23 answering an OpenMetrics scrape), add the generated metric_relabel_configs that restore "
                 "`sglang:`.")))
    queue = select_groups(names.QUEUE, eq)
    growing = binop(binop(queue, ">", 0), "and", binop(range_call("deriv", queue, opts.duration("10m")), ">", 0),
                    before="\n", after="\n", parens="needed")
    rules.append(alert(
        names.ALERT_QUEUE_GROWING, growing,
        opts.duration("10m"), {**base, "severity": "ticket"},
        _ann(f"{d}: {{{{ $labels.role }}}} queue keeps growing ({{{{ $value | printf \"%.0f\" }}}} waiting)",
             f"sglang:num_queue_reqs (summed over dp_rank) of deployment {d} grew for {opts.duration('10m')}.",
             "Arrivals exceed capacity: check running requests, KV-cache token usage and retractions; scale out "
             "or shed load.")))
    usage = select_groups(GAUGES["token_usage"], eq, engine)
    rules.append(alert(
        names.ALERT_KV_FULL,
        binop(aggregate("max", usage, ("deployment", "role", "instance")), ">", KV_FULL_RATIO),
        opts.duration("5m"), {**base, "severity": "ticket"},
        _ann(f"{d}: KV-cache token usage {{{{ $value | humanizePercentage }}}} on {{{{ $labels.instance }}}}",
             f"sglang:token_usage of deployment {d} above {format_number(KV_FULL_RATIO)}: new requests queue and "
             "running ones may be retracted.",
             "Lower --max-running-requests or context length, or add decode capacity.")))
    if dep.mode == "pd-disaggregated":
        for name, key, what in ((names.ALERT_PD_TRANSFER, "transfer_failed_total", "KV transfer"),
                                (names.ALERT_PD_BOOTSTRAP, "bootstrap_failed_total", "bootstrap")):
            counter = COUNTERS[key]
            roles = COUNTER_ROLES[key]
            failed = select_groups(counter, eq, engine_matchers(dep, roles)[0])
            increased = aggregate("sum", range_call("increase", failed, opts.duration("5m")), ("deployment", "role"))
            rules.append(alert(
                name, binop(increased, ">", 0),
                opts.duration("1m"), {**base, "severity": "page"},
                _ann(f"{d}: PD {what} failures on {{{{ $labels.role }}}} ({{{{ $value | printf \"%.0f\" }}}} in "
                     f"{opts.duration('5m')})",
                     f"{counter} increased: requests of deployment {d} fail between prefill and decode.",
                     "Check the transfer backend (mooncake/ascend), --disaggregation-ib-device and the bootstrap "
                     "port between the prefill and decode nodes.")))
    recipe = template_literal((dep.baseline and dep.baseline.source) or "recipe")
    for sli, value in baseline_means(dep):
        limit = format_number(round(value * REGRESSION_FACTOR, 9))
        rules.append(alert(
            names.ALERT_REGRESSION,
            binop(select_groups(names.latency_mean("30m"), {**eq, "sli": sli.key}), ">",
                  round(value * REGRESSION_FACTOR, 9)),
            opts.duration("15m"), {**base, "deployment": dep.name, "sli": sli.key, "severity": "ticket"},
            _ann(f"{d}: mean {sli.title} {{{{ $value | printf \"%.4f\" }}}}s is over "
                 f"{format_number(REGRESSION_FACTOR)}x the recipe baseline {format_number(value)}s",
                 f"Mean {sli.title} over {opts.duration('30m')} from {_mean_source(sli.family, opts)} exceeds "
                 f"{limit}s = {format_number(REGRESSION_FACTOR)} x baseline "
                 f"({recipe}).",
                 "Compare the launch flags and load with the recipe; look for retractions, low spec accept "
                 "length and accelerator throttling.")))
    rules += gateway_alerts(dep, opts, base)
    # One group, recordings first: the alerts read them at the same evaluation (see rules.slo_groups).
    lead = leading_rules(dep, opts)
    lead_rec = [r for r in lead if isinstance(r, RecordingRule)]
    lead_alerts = [r for r in lead if isinstance(r, AlertingRule)]
    every: list[Rule] = [*latency_means(dep, opts), *rec, *lead_rec, *rules, *lead_alerts]
    return [RuleGroup(name=names.group(dep.name, "symptoms"), rules=every)]


def _increased(metric: str, window: str) -> Expr:
    return binop(range_call("increase", select(metric), window), ">", 0)


def global_groups(opts: Options) -> list[RuleGroup]:
    """The sidecar watched by Prometheus: down, a loop that completes no cycle, a loop that restarts, a
    recording that cannot be written, a config reload that failed."""
    interval, age = select(names.M_SCRAPE_INTERVAL), select(names.M_LOOP_CYCLE_AGE)
    which = "its {{ $labels.loop }} loop{{ with $labels.deployment }} of deployment {{ . }}{{ end }}"
    window = opts.duration("15m")
    stale = paren(binop(names.LOOP_STALE_INTERVALS, "*", interval))
    return [RuleGroup(name="slo-monitor:self", rules=[
        alert(names.ALERT_SIDECAR_DOWN, binop(select(names.UP, [("job", "=", names.SIDECAR_JOB)]), "==", 0),
              opts.duration("5m"),
              {"severity": "ticket"},
              _ann("slo-monitor sidecar {{ $labels.instance }} is down",
                   "Prometheus cannot scrape the slo-monitor sidecar; its own SLO series and accelerator telemetry stop.",
                   "Check the sidecar process (slo-monitor run) and its listen address.")),
        # The loop's age is measured by the sidecar on its monotonic clock; the threshold is the one
        # its /healthz applies, in its own scrape intervals.
        alert(names.ALERT_LOOP_STUCK,
              binop(age, ">", stale, ignoring=("loop", "deployment"), group_left=(), before="\n", after="\n"),
              opts.duration("1m"), {"severity": "ticket"},
              _ann(f"slo-monitor {{{{ $labels.instance }}}}: {which} has completed no cycle for "
                   "{{ $value | printf \"%.0f\" }}s",
                   f"A loop of the sidecar completed no cycle in {names.LOOP_STALE_INTERVALS} scrape intervals: for "
                   "a deployment its SLO series stop moving. The sidecar's /healthz fails with the same reason.",
                   "Read /healthz and the sidecar's log (each failure is logged with its error); /api/v1/status "
                   "lists every loop (sidecar.loops). Restart the sidecar if the loop does not recover.")),
        alert(names.ALERT_LOOP_RESTARTING, _increased(names.M_LOOP_RESTARTS, window), None,
              {"severity": "ticket"},
              _ann(f"slo-monitor {{{{ $labels.instance }}}}: {which} restarted after an error "
                   f"({{{{ $value | printf \"%.0f\" }}}} in {window})",
                   "An unexpected exception ended the loop and it was restarted (with a pause that grows while it "
                   "keeps failing): a bug in the sidecar, or input it does not handle.",
                   "The sidecar's log has the error with its traceback; /api/v1/status shows the loop's last "
                   "error (sidecar.loops). Report it with that traceback.")),
        alert(names.ALERT_RECORDING_FAILING,
              _increased(names.M_RECORDING_WRITE_ERRORS, window), None,
              {"severity": "ticket"},
              _ann(f"slo-monitor {{{{ $labels.instance }}}}: its recording could not be written "
                   f"({{{{ $value | printf \"%.0f\" }}}} failed writes in {window})",
                   "The sidecar's SQLite recording (sidecar.recording_path) fails to write (disk full, I/O error): "
                   "the SLO state is still served and scraped, but not kept, so a restart loses the windows and "
                   "`analyze --recording` misses this time. Its /healthz says \"degraded\" with the reason.",
                   "Read /healthz or the sidecar's log for the error; free space on (or fix) the file system of "
                   "the recording. Writing resumes by itself.")),
        alert(names.ALERT_CONFIG_RELOAD_FAILED, binop(select(names.M_CONFIG_RELOAD_OK), "==", 0), opts.duration("5m"),
              {"severity": "ticket"},
              _ann("slo-monitor {{ $labels.instance }}: its last config reload failed",
                   "A reload (SIGHUP or POST /-/reload) was refused: the sidecar still runs its previous config, "
                   "so the file on disk is not what it monitors.",
                   "/api/v1/status (sidecar.config.last_error) and the sidecar's log say why; fix the file and "
                   "reload again.")),
    ])]
