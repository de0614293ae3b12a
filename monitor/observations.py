"""What the sidecar knows about every target and deployment, fed by scrape results. No I/O.

The scrape loop (`monitor.scrape.loop`) produces a `ScrapeResult` per target and cycle; `apply` turns
it into target status, SLO engine input (`monitor.slo.engine`) and the latest telemetry. The sidecar owns
one `Observations`; its status, exporters and recording read from it.
"""

from __future__ import annotations

import logging

from monitor.config import Config
from monitor.parse.exposition import Sample
from monitor.parse.families import HistogramError
from monitor.scrape.result import ScrapeResult
from monitor.scrape.status import TargetStatus
from monitor.slo.engine import DeploymentEngine
from monitor.state import redact
from monitor.telemetry.model import TelemetryResult

log = logging.getLogger(__name__)


def router_summary(samples: list[Sample]) -> dict[str, float]:
    health = [s.value for s in samples if s.name == "smg_worker_health"]
    return {
        "workers": float(sum(1 for v in health if v >= 0)),
        "workers_healthy": float(sum(1 for v in health if v == 1)),
        "requests_total": float(sum(s.value for s in samples if s.name == "smg_router_requests_total")),
    }


class Observations:
    """Per deployment an SLO engine, per target its status and latest telemetry."""

    def __init__(self, config: Config, engines: dict[str, DeploymentEngine] | None = None) -> None:
        self.config = config
        self.engines = engines or {d.name: DeploymentEngine(d) for d in config.deployments}
        self.statuses: dict[tuple[str, str], TargetStatus] = {}
        self.telemetry: dict[tuple[str, str], TelemetryResult] = {}  # latest result per target
        for dep in config.deployments:
            for t in dep.targets:
                self.statuses[(dep.name, t.id)] = TargetStatus(
                    dep.name, t.id, t.role, t.source or "", t.url, placeholder=t.has_placeholder,
                    last_error="placeholder in target address: fill it in the config" if t.has_placeholder else None,
                )

    def apply(self, result: ScrapeResult) -> None:
        """One target's scrape: a failure keeps the windows' last good state (as Prometheus rejects a
        scrape whole) and drops the target's load gauges; a success feeds the deployment's engine."""
        target = result.target
        status = self.statuses[(result.deployment, target.id)]
        engine = self.engines[result.deployment]
        if result.telemetry is not None:
            self._apply_telemetry(result, status, result.telemetry)
            return
        error, expo = result.error, result.exposition
        if error is None and expo is not None:
            try:
                if target.source == "router":
                    status.detail = router_summary(expo.selected)
                else:
                    status.resets += engine.observe(target, expo)
            except HistogramError as err:
                error = f"malformed exposition: {err}"
        if error is not None or expo is None:
            status.record_failure(result.ts, error or "no exposition", result.duration_seconds)
            engine.target_down(target)
            return
        # What the scrape got wrong but could still be used (a _count off the +Inf bucket, no _sum):
        # said once when it changes, and kept on the target's status.
        warnings = engine.warnings.get(target.id, [])
        if status.warnings != warnings:
            log.log(logging.WARNING if warnings else logging.INFO, "%s %s: %s", result.deployment,
                    redact(target.id), "; ".join(warnings) or "exposition consistent again")
        status.record_success(result.ts, result.duration_seconds, expo.samples, result.bytes, expo.format, warnings)

    def _apply_telemetry(self, result: ScrapeResult, status: TargetStatus, telemetry: TelemetryResult) -> None:
        self.telemetry[(result.deployment, result.target.id)] = telemetry
        if telemetry.up:
            status.record_success(result.ts, telemetry.duration_seconds, len(telemetry.readings), 0,
                                  result.target.source)
            if telemetry.warnings:  # up with what the table gave; say what is missing
                more = f" (+{len(telemetry.warnings) - 1} more)" if len(telemetry.warnings) > 1 else ""
                status.last_error = f"partial: {telemetry.warnings[0]}{more}"
        else:
            status.record_failure(result.ts, telemetry.error or "telemetry collection failed",
                                  telemetry.duration_seconds)

    def snapshot(self, deployment: str, ts: float) -> None:
        """Close one scrape cycle of a deployment: its engine records the merged state at `ts`."""
        self.engines[deployment].snapshot(ts)

    def readings_by_deployment(self) -> dict[str, list[TelemetryResult]]:
        out: dict[str, list[TelemetryResult]] = {}
        for (dep, _tid), result in self.telemetry.items():
            out.setdefault(dep, []).append(result)
        return out
