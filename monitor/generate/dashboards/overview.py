"""Overview: every deployment's SLO status, budget left, burn rate and each targeted SLI against its target."""

from __future__ import annotations

from typing import Any

from monitor.config import Config
from monitor.conventions import names, policy
from monitor.conventions.slis import SLI
from monitor.generate.dashboards.common import (
    Matchers,
    dashboard,
    label_values,
    quantile,
    query_var,
    stat,
    targeted,
    timeseries,
)
from monitor.promql import aggregate, binop, select

SEL: Matchers = (("deployment", "=~", "$deployment"),)


def quantile_vs_target(sli: SLI, nhcb: bool = False) -> Any:
    family, title = sli.family, sli.title
    over = "the native histogram with custom buckets" if nhcb else "SGLang buckets summed by le"
    return timeseries(
        f"{title} p99 vs target", f"p99 {title} per deployment (histogram_quantile over {over}; "
        "display only, the SLO uses the bucket ratio) and each deployment's target (dashed).",
        [(quantile(0.99, family, SEL, by=("deployment",), nhcb=nhcb), "p99 {{deployment}}"),
         (select(names.TARGET, (*SEL, ("sli", "=", sli.key))), "target {{deployment}}")],
        unit="s", overrides=[{"matcher": {"id": "byRegexp", "options": "target .*"},
                              "properties": [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}}]}])


def build(config: Config, nhcb: bool = False) -> dict[str, Any]:
    status = stat(
        "SLO status (period)", "1 = the SLI over the SLO period meets its objective, 0 = breached; one value per "
        "deployment and SLI.",
        [(binop(binop(1, "-", select(names.SLI_ERROR_PERIOD, SEL)), ">=", select(names.OBJECTIVE, SEL), bool_=True,
                on=("deployment", "sli")), "{{deployment}} {{sli}}")],
        thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}],
        mappings=[{"type": "value", "options": {"0": {"text": "BREACH", "color": "red"},
                                                "1": {"text": "OK", "color": "green"}}}])
    budget = stat("Error budget left", "Share of the period's error budget not yet spent (negative = overspent).",
                  [(select(names.BUDGET_REMAINING, SEL), "{{deployment}} {{sli}}")], unit="percentunit",
                  thresholds=[{"color": "red", "value": None}, {"color": "orange", "value": 0.25},
                              {"color": "green", "value": 0.5}])
    burn = stat("Burn rate (1h)", "Error ratio over 1h divided by the budget (1 = spending exactly the budget).",
                [(select(names.burn_rate("1h"), SEL), "{{deployment}} {{sli}}")],
                thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1},
                            {"color": "red", "value": policy.PAGE_BURN_RATE_SLOW}])
    burn_ts = timeseries("Burn rate over time", "1h and 5m burn rates; the page thresholds are "
                         f"{policy.PAGE_BURN_RATE:g} (1h/5m) and {policy.PAGE_BURN_RATE_SLOW:g} (6h/30m).",
                         [(select(names.burn_rate("1h"), SEL), "1h {{deployment}} {{sli}}"),
                          (select(names.burn_rate("5m"), SEL), "5m {{deployment}} {{sli}}")],
                         thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": policy.PAGE_BURN_RATE_SLOW},
                                     {"color": "red", "value": policy.PAGE_BURN_RATE}])
    budget_ts = timeseries("Error budget left over time", "Budget remaining for each deployment and SLI.",
                           [(select(names.BUDGET_REMAINING, SEL), "{{deployment}} {{sli}}")], unit="percentunit")
    alerts = timeseries("Firing SLO and symptom alerts", "Alerts firing per deployment (Prometheus ALERTS series).",
                        [(aggregate("count", select(names.ALERTS, (("alertstate", "=", "firing"), *SEL)),
                                    ("deployment", "alertname", "severity")),
                          "{{deployment}} {{alertname}} ({{severity}})")])
    rows = [
        ("SLO status", [(status, 8, 6), (budget, 8, 6), (burn, 8, 6)]),
        ("Burn and budget", [(burn_ts, 12, 8), (budget_ts, 12, 8), (alerts, 24, 6)]),
    ]
    # A latency SLI against its target: those some deployment of the config targets (none: no row).
    against = [(quantile_vs_target(sli, nhcb), 12, 8) for sli in targeted(config)]
    if against:
        rows.append(("Latency against target", against))
    variables = [query_var("deployment", "Deployment", label_values(names.OBJECTIVE, "deployment"), multi=True)]
    return dashboard("SGLang SLO overview", "slo-monitor-overview",
                     f"Every deployment of the config ({len(config.deployments)}): SLO status, budget, burn rate.",
                     variables, rows, time_from="now-24h")
