"""The leading TPOT signal as recording rules, and its warning (docs/leading-tpot.md).

  slo_monitor:tpot_leading:seconds{source="itl"}             mean ITL over 1m (token-weighted)
  slo_monitor:tpot_leading:seconds{source="gen_throughput"}  running requests / generated tokens per second
  slo_monitor:tpot_leading:seconds{source="max"}             the larger of the two
  SLOTPOTLeadingWarning  max over the TPOT target for 1m: severity warning (a ticket), never a page

The same numbers the sidecar exports as `slo_monitor_tpot_leading_seconds` (monitor/slo/leading.py),
from the same series: ITL from the roles that answer requests, the scheduler gauges per DP rank and
never summed over TP ranks.
"""

from __future__ import annotations

from monitor.config import Deployment
from monitor.conventions import names
from monitor.conventions.names import GAUGES
from monitor.conventions.slis import LEADING_SLI, LEADING_SOURCE, REQUEST_ROLES
from monitor.escaping import template_literal
from monitor.generate.options import Options
from monitor.generate.rule_model import Rule
from monitor.generate.rules import alert, record
from monitor.promql import aggregate, binop, format_number, mean_latency, per_rank_total, select
from monitor.slo_plan import engine_matchers, extra_labels

ITL, THROUGHPUT, MAX = names.TPOT_LEADING_SOURCES


def leading_rules(dep: Deployment, opts: Options) -> list[Rule]:
    """Recordings then the warning, for a deployment with a TPOT target (none without one).

    The warning is about one SLI, TPOT, and reads another's mean, ITL's: both through their roles in
    conventions (`LEADING_SLI`, `LEADING_SOURCE`: the output-token and inter-token latencies), not their keys."""
    target = dep.target_seconds(LEADING_SLI.key)
    if target is None:
        return []
    eq = {"deployment": dep.name}
    window = opts.duration(names.TPOT_LEADING_WINDOW)
    regex, neq, nregex = engine_matchers(dep, LEADING_SOURCE.roles)
    itl = mean_latency(LEADING_SOURCE.family, eq, regex, window, neq, opts.nhcb, nregex)
    ranks = engine_matchers(dep, REQUEST_ROLES)[0]
    running = per_rank_total(GAUGES["num_running_reqs"], eq, ranks)
    generated = per_rank_total(GAUGES["gen_throughput"], eq, ranks)
    per_token = binop(aggregate("sum", running, ("deployment",)), "/",
                      binop(aggregate("sum", generated, ("deployment",)), ">", 0), before="\n", parens="needed")
    both = select(names.TPOT_LEADING, (("deployment", "=", dep.name), ("source", "=~", f"{ITL}|{THROUGHPUT}")))
    lead = select(names.TPOT_LEADING, (("deployment", "=", dep.name), ("source", "=", MAX)))
    d, limit = template_literal(dep.name), format_number(target)
    over = opts.duration(names.TPOT_LEADING_FOR)
    return [
        record(names.TPOT_LEADING, itl, {"source": ITL}),
        record(names.TPOT_LEADING, per_token, {"source": THROUGHPUT}),
        record(names.TPOT_LEADING, aggregate("max", both, ("deployment",)), {"source": MAX}),
        alert(names.ALERT_TPOT_LEADING, binop(lead, ">", target), over,
              {**extra_labels(dep), "deployment": dep.name, "sli": LEADING_SLI.key, "severity": "warning"},
              {"summary": f"{d}: running requests decode at {{{{ $value | printf \"%.4f\" }}}}s per token, over the "
                          f"{LEADING_SLI.title} target {limit}s",
               "description": f"The requests deployment {d} is decoding now take {{{{ $value | printf \"%.4f\" }}}}s "
                              f"per output token (the larger of the mean {LEADING_SOURCE.title} over {window} and "
                              f"running requests / generated tokens per second) for {over}. {LEADING_SLI.title} is "
                              "observed when a request finishes: the SLO burn follows as they do. A warning, not a "
                              "page: the page is the burn rate.",
               "runbook": f"Open the 'SGLang deployment' dashboard ({LEADING_SLI.title} row, leading signal): check "
                          "running requests against --max-running-requests, KV-cache token usage, retractions, speculative "
                          "accept length and accelerator throttling.",
               "target_seconds": limit}),
    ]
