"""Names of everything the generator records or alerts on (Sloth-style, one family per concept).

Every SLO series carries the labels `deployment` and `sli` (ttft|tpot|itl|e2e); windows are in the
name (`..:rate5m`), so dashboards and tests select by labels only. Names keep the nominal window
even under --time-scale.
"""

from __future__ import annotations

NS = "slo_monitor"


def sli_good(window: str) -> str:
    return f"{NS}:sli_good:rate{window}"


def sli_total(window: str) -> str:
    return f"{NS}:sli_total:rate{window}"


def sli_error(window: str) -> str:
    return f"{NS}:sli_error:ratio_rate{window}"


def burn_rate(window: str) -> str:
    return f"{NS}:burn_rate:ratio_rate{window}"


def latency_mean(window: str) -> str:
    return f"{NS}:latency_mean:seconds_rate{window}"


SLI_ERROR_PERIOD = f"{NS}:sli_error:ratio_period"  # + label period="30d"
PERIOD_BURN_RATE = f"{NS}:period_burn_rate:ratio"
BUDGET_REMAINING = f"{NS}:error_budget_remaining:ratio"
OBJECTIVE = f"{NS}:objective:ratio"
ERROR_BUDGET = f"{NS}:error_budget:ratio"
TARGET = f"{NS}:target:seconds"
QUEUE = f"{NS}:queue_requests:sum"  # labels deployment, role
RUNNING = f"{NS}:running_requests:sum"  # labels deployment, role

# Alerts. Burn-rate alerts carry severity, long_window, short_window, burn_rate_threshold.
ALERT_PAGE = "SLOErrorBudgetBurnFast"  # severity=page: 1h/5m and 6h/30m
ALERT_TICKET = "SLOErrorBudgetBurnSlow"  # severity=ticket: 1d/2h and 3d/6h
ALERT_TARGET_DOWN = "SGLangTargetDown"
ALERT_METRICS_ABSENT = "SGLangMetricsAbsent"
ALERT_QUEUE_GROWING = "SGLangQueueGrowing"
ALERT_KV_FULL = "SGLangKVCacheNearFull"
ALERT_PD_TRANSFER = "SGLangPDTransferFailures"
ALERT_PD_BOOTSTRAP = "SGLangPDBootstrapFailures"
ALERT_REGRESSION = "SGLangLatencyRegression"  # label sli=tpot|ttft
ALERT_ROUTER_WORKER = "SGLangRouterWorkerUnhealthy"
ALERT_SIDECAR_DOWN = "SLOMonitorSidecarDown"

SIDECAR_JOB = "slo-monitor"


def group(deployment: str, kind: str) -> str:
    return f"slo-monitor:{deployment}:{kind}"


def rules_file(deployment: str) -> str:
    return f"rules/{deployment}.rules.yml"


def test_file(deployment: str) -> str:
    return f"tests/{deployment}.test.yml"
