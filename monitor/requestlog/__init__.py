"""Per-request SLIs from SGLang's `--export-metrics-to-file` logs: goodput and a cross-check of the histograms.

Histograms say what share of requests met TTFT and, separately, TPOT; only per-request records say
what share met both (goodput, as DistServe and `bench_serving --goodput` define it).

The goodput SLO's rules are generated with the others (`monitor.slo_plan.GoodputPlan`).
"""

from monitor.requestlog.reader import RequestLogReader, state_path_for

__all__ = ["RequestLogReader", "state_path_for"]
