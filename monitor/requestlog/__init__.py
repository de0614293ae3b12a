"""Per-request SLIs from SGLang's `--export-metrics-to-file` logs: goodput and a cross-check of the histograms.

Histograms say what share of requests met TTFT and, separately, TPOT; only per-request records say
what share met both (goodput, as DistServe and `bench_serving --goodput` define it).
"""

from monitor.requestlog.reader import RequestLogReader, state_path_for
from monitor.requestlog.rules import goodput_rule_groups

__all__ = ["RequestLogReader", "goodput_rule_groups", "state_path_for"]
