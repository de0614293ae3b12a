"""The compact per-tick state row kept for post-incident analysis."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from monitor.requestlog.export import TargetCounts
from monitor.status_model import DeploymentStatus
from monitor.telemetry.model import Reading


def _reading(r: Reading) -> dict[str, Any]:
    d = dataclasses.asdict(r)
    d.pop("processes", None)
    return {k: v for k, v in d.items() if v not in (None, {}, ())}


def state_row(dep: DeploymentStatus, accelerator_readings: Iterable[Reading] = (),
              request_log_counts: Iterable[TargetCounts] = ()) -> dict[str, Any]:
    """`request_log_counts`: the deployment's request-log targets' cumulative finished/good requests
    (monitor.requestlog TargetCounts), so the goodput SLI can be analysed from the recording."""
    slis = {
        s.sli: {
            "target": s.target_seconds,
            "objective": s.objective,
            "budget_remaining": s.error_budget_remaining,
            "windows": {w.window: {"events": w.events, "good_ratio": w.good_ratio, "burn_rate": w.burn_rate,
                                   "p50": w.p50_seconds, "p90": w.p90_seconds, "p99": w.p99_seconds,
                                   "mean": w.mean_seconds} for w in s.windows},
        }
        for s in dep.slis
    }
    return {
        "slis": slis,
        "load": dep.load,
        "rates": dep.rates,
        "targets": {t.id: {"role": t.role, "up": t.up, "restarts": t.counter_resets, "error": t.last_error}
                    for t in dep.targets if not t.placeholder},
        "accelerators": [_reading(r) for r in accelerator_readings],
        **_goodput(dep, list(request_log_counts)),
    }


def _goodput(dep: DeploymentStatus, counts: list[TargetCounts]) -> dict[str, Any]:
    if not counts:
        return {}
    objective = next((w.objective for w in dep.goodput or () if w.objective is not None), None)
    return {"goodput": {"objective": objective,
                        "targets": {c.target: {"finished": c.finished, "good": c.good} for c in counts}}}
