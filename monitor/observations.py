"""What the sidecar knows about every target and deployment, fed by scrape results. No I/O.

The scrape loop (`monitor.scrape.loop`) produces a `ScrapeResult` per target and cycle; `apply` turns
it into target status, SLO engine input (`monitor.slo.engine`) and the latest telemetry. The sidecar owns
one `Observations`; its status, exporters and recording read from it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping

from monitor.config import Config, Deployment, Target
from monitor.conventions.policy import SERIES_EXPIRY_SECONDS
from monitor.conventions.slis import ENGINE_ROLES
from monitor.feeds import feed
from monitor.parse.exposition import Exposition
from monitor.parse.families import HistogramError, dated_warnings, warning_key
from monitor.parse.gateway import router_summary, split_workers
from monitor.redaction import redact
from monitor.scrape.flapping import FlapDamper, FlapSummary
from monitor.scrape.result import ScrapeResult
from monitor.scrape.status import TargetStatus
from monitor.slo.accumulate import SeriesBook
from monitor.slo.engine import DeploymentEngine
from monitor.slo.leading import carried_since
from monitor.slo.state import DeploymentState
from monitor.slo.windows import Snapshot
from monitor.telemetry.model import TelemetryResult

log = logging.getLogger(__name__)

# A wall clock that ran ahead of the steady clock by more than this between two cycles of a deployment stepped
# forward; less is the time between reading the two clocks, or NTP slewing (at most 0.5 ms a second).
CLOCK_STEP_MIN_SECONDS = 1.0
CHURN_SAY_SECONDS = 3600.0  # label churn is said at most this often per target (it is counted at every sweep)


def _changed(status: TargetStatus, was_up: bool, scrapes_before: int) -> bool:
    """Down after up (or from its first scrape on), or up after down."""
    if not status.up:
        return was_up or not scrapes_before
    return not was_up and bool(scrapes_before)


def _say_flaps(name: str, status: TargetStatus, summary: FlapSummary) -> None:
    state = "up" if status.up else f"down: {redact(status.last_error)}"
    log.log(logging.INFO if status.up else logging.WARNING, "%s: flapped %d time%s in the last %.0f s, now %s",
            name, summary.changes, "" if summary.changes == 1 else "s", summary.seconds, state)


class Observations:
    """Per deployment an SLO engine, per target its status and latest telemetry."""

    def __init__(self, config: Config, engines: dict[str, DeploymentEngine] | None = None) -> None:
        self.config = config
        self.engines = engines or {d.name: DeploymentEngine(d) for d in config.deployments}
        self.statuses: dict[tuple[str, str], TargetStatus] = {}
        self.telemetry: dict[tuple[str, str], TelemetryResult] = {}  # latest result per target
        self._steady: dict[str, tuple[float, float]] = {}  # per deployment: (wall, steady) at its last cycle
        for dep in config.deployments:
            for t in dep.targets:
                self.statuses[(dep.name, t.id)] = TargetStatus(
                    dep.name, t.id, t.role, t.source or "", t.url, placeholder=t.has_placeholder,
                    last_error="placeholder in target address: fill it in the config" if t.has_placeholder else None,
                )
        # router-engine-metrics: the per-worker targets each one fed last time, and the workers each
        # deployment scrapes directly (those are read from their own target only, never twice).
        self._worker_targets: dict[tuple[str, str], list[Target]] = {}
        self.flaps = FlapDamper()
        self._said_warnings: dict[tuple[str, str], list[str]] = {}  # per target, the warning_keys last logged
        self._feeds = {d.name: feed(d, ENGINE_ROLES) for d in config.deployments}

    def reloaded(self, config: Config, keep: Collection[str], rebuilt: Collection[str] = ()) -> Observations:
        """The observations of a reloaded `config`: the deployments in `keep` (unchanged by the reload) go
        on with their engines (windows, accumulators) and what `carry_over` carries; the others start empty,
        but a `rebuilt` one keeps the TPOT leading warning's hold while its TPOT target is the same."""
        engines = {d.name: self.engines[d.name] if d.name in keep else DeploymentEngine(d) for d in config.deployments}
        for name in rebuilt:
            old = self.engines[name]
            engines[name].tpot_over_since = carried_since(old.tpot_over_since, old.deployment.tpot_target_seconds,
                                                          engines[name].deployment.tpot_target_seconds)
        new = Observations(config, engines)
        new.carry_over(self, set(keep))
        return new

    def restore(self, history: Mapping[str, tuple[Iterable[Snapshot], SeriesBook | None]]) -> dict[str, int]:
        """Windows and accumulators an earlier run recorded (`{deployment: (snapshots, book)}`), read into
        fresh engines that replace the running ones only once every history is read: a damaged row found
        half-way raises and leaves them untouched. Returns the snapshots restored per deployment."""
        engines = {d.name: DeploymentEngine(d) for d in self.config.deployments}
        loaded = {name: engines[name].restore(snapshots, book) for name, (snapshots, book) in history.items()}
        self.engines.update(engines)
        return loaded

    def carry_over(self, old: Observations, deployments: set[str]) -> None:
        """After a config reload: what `old` knew of the unchanged `deployments` (target statuses, latest
        telemetry, a gateway's workers) continues here; their engines are handed over by the caller."""
        for store, previous in ((self.statuses, old.statuses), (self.telemetry, old.telemetry),
                                (self._worker_targets, old._worker_targets)):
            store.update({k: v for k, v in previous.items() if k[0] in deployments})  # type: ignore[attr-defined]
        self._steady.update({k: v for k, v in old._steady.items() if k in deployments})

    def apply(self, result: ScrapeResult) -> None:
        """One target's scrape: a failure keeps the windows' last good state (as Prometheus rejects a
        scrape whole) and drops the target's load gauges; a success feeds the deployment's engine. A
        target going down or coming back is logged (`say_transition`)."""
        status = self.statuses[(result.deployment, result.target.id)]
        was_up, scrapes = status.up, status.scrapes
        self._apply(result)
        self.say_transition(status, was_up, scrapes, result.ts)

    def say_transition(self, status: TargetStatus, was_up: bool, scrapes_before: int, now: float) -> None:
        """A target that goes down is logged once with its reason (not on every failed scrape after), and
        again when it is back up; one that fails from its first scrape on is down too. A flapping target's
        further changes within a minute are counted and said in one line per minute (`FlapDamper`)."""
        name = f"{status.deployment} {redact(status.target_id)}"
        say, summary = self.flaps.observe((status.deployment, status.target_id),
                                          _changed(status, was_up, scrapes_before), now)
        if say and not status.up:
            log.warning("%s: down: %s", name, redact(status.last_error))
        elif say:
            log.info("%s: up again", name)
        if summary is not None:
            _say_flaps(name, status, summary)

    def say_pending_flaps(self, now: float) -> None:
        """Summaries of changes counted but not said yet, for every target (the sidecar is stopping)."""
        for (dep, tid), summary in self.flaps.pending(now):
            status = self.statuses[(dep, tid)]
            _say_flaps(f"{dep} {redact(tid)}", status, summary)

    def apply_request_log(self, deployment: str, target: Target, now: float, lines: int, last_error: str | None,
                          *, found: bool) -> None:
        """A request-log target after a poll of its directory (`found`: it exists): up, with its last
        malformed line as its error (those are skipped, not fatal), or down saying why."""
        status = self.statuses[(deployment, target.id)]
        was_up, scrapes = status.up, status.scrapes
        if found:
            status.record_success(now, 0.0, lines, 0, "request-log")
            status.last_error = last_error
        else:
            status.record_failure(now, f"request-log directory {target.path} does not exist "
                                  "(is SGLang launched with --export-metrics-to-file-dir?)", 0.0)
        self.say_transition(status, was_up, scrapes, now)

    def _apply(self, result: ScrapeResult) -> None:
        target = result.target
        status = self.statuses[(result.deployment, target.id)]
        engine = self.engines[result.deployment]
        if result.telemetry is not None:
            self._apply_telemetry(result, status, result.telemetry)
            return
        error, expo, note = result.error, result.exposition, None
        dep = self.config.deployment(result.deployment)
        if error is None and expo is not None:
            try:
                if target.source == "router":
                    status.detail = router_summary(expo.selected)
                    status.resets += engine.observe_gateway(target, expo, result.ts)
                elif target.source == "router-engine-metrics":
                    note = self._observe_workers(dep, target, expo, result.ts)
                else:
                    status.resets += engine.observe(target, expo, result.ts)
            except HistogramError as err:
                error = f"malformed exposition: {err}"
        if error is not None or expo is None:
            status.record_failure(result.ts, error or "no exposition", result.duration_seconds)
            self._target_down(dep, target)
            return
        # What the scrape got wrong but could still be used (a _count off the +Inf bucket, no _sum):
        # said once when it changes, and kept on the target's status. Compared with what was said last,
        # not with the status (a failed scrape clears that): a flapping target says it once, not per recovery.
        # Compared by what each warning is about (warning_key), not its text: a _count off +Inf quotes
        # counts that grow every scrape, which made it a new warning every scrape.
        warnings = engine.warnings.get(target.id, []) + dated_warnings(expo.dated)  # and the parse's (stale samples)
        key = (result.deployment, target.id)
        about = [warning_key(w) for w in warnings]
        if self._said_warnings.get(key, []) != about:
            log.log(logging.WARNING if warnings else logging.INFO, "%s %s: %s", result.deployment,
                    redact(target.id), "; ".join(warnings) or "exposition consistent again")
            self._said_warnings[key] = about
        status.record_success(result.ts, result.duration_seconds, expo.samples, result.bytes, expo.format, warnings)
        status.last_error = note

    def _observe_workers(self, dep: Deployment, target: Target, expo: Exposition, ts: float) -> str | None:
        """Feed a gateway's /engine_metrics to the engine one worker at a time, each with the role its
        engine_type label names (series without one: the target's role when it is a server role, else
        `server`). A worker the deployment also scrapes directly is left out: its requests would count
        twice. Returns a note saying so."""
        engine = self.engines[dep.name]
        status = self.statuses[(dep.name, target.id)]
        fallback = target.role if target.role in ENGINE_ROLES else "server"
        fed: list[Target] = []
        direct: list[str] = []
        warnings: list[str] = []
        for addr, (role, samples) in sorted(split_workers(expo.selected).items()):
            if not self._feeds[dep.name].reads_worker(addr):
                direct.append(addr)
                continue
            part = target.model_copy(update={"role": role or fallback, "name": f"{target.id} worker {addr}"})
            status.resets += engine.observe(part, expo._replace(selected=samples), ts)
            warnings += engine.warnings.pop(part.id, [])
            fed.append(part)
        engine.warnings[target.id] = warnings
        key = (dep.name, target.id)
        now = {t.id for t in fed}
        for gone in self._worker_targets.get(key, []):  # a worker no longer in the merge: its gauges are stale
            if gone.id not in now:
                engine.target_down(gone)
        self._worker_targets[key] = fed
        status.detail = {"workers": float(len(fed) + len(direct)), "workers_scraped_directly": float(len(direct))}
        if not direct:
            return None
        return (f"note: {len(direct)} of {len(fed) + len(direct)} workers are also scraped directly "
                f"({', '.join(direct)}): read from their own targets only, so no request counts twice")

    def _target_down(self, dep: Deployment, target: Target) -> None:
        engine = self.engines[dep.name]
        engine.target_down(target)
        for part in self._worker_targets.pop((dep.name, target.id), []):
            engine.target_down(part)

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

    def snapshot(self, deployment: str, ts: float, elapsed: float | None = None) -> None:
        """Close one scrape cycle of a deployment: its engine records the merged state at `ts`. `elapsed`: a
        steady clock's reading (one that neither steps nor stops in a suspend), when the caller has one: a
        wall clock that ran ahead of it since the previous cycle stepped forward."""
        step = 0.0
        if elapsed is not None:
            before = self._steady.get(deployment)
            self._steady[deployment] = (ts, elapsed)
            if before is not None:
                ahead = (ts - before[0]) - (elapsed - before[1])
                step = ahead if ahead > CLOCK_STEP_MIN_SECONDS else 0.0
        engine = self.engines[deployment]
        shift = engine.snapshot(ts, step)
        if engine.churned:
            self._say_churn(deployment, engine.churned)
            engine.churned = {}
        if shift < 0:  # once per step: from the next cycle on the history is in the new time line
            log.warning("%s: the wall clock stepped back (NTP step, VM resume?): the SLO history moved back "
                        "%.0f s with it, so windows keep their length and events", deployment, -shift)
        elif shift > 0:
            log.warning("%s: the wall clock stepped forward %.0f s more than the time that passed (NTP step, a clock "
                        "set by hand?): the SLO history moved forward with it, so windows keep their length and "
                        "events", deployment, shift)

    def _say_churn(self, deployment: str, churned: dict[str, int]) -> None:
        """Series retired early for label churn (`monitor.slo.engine.CHURN_FACTOR`): counted on the target's
        status (`slo_monitor_target_series_retired_early_total`) and said, at most once an hour per target."""
        for tid, n in churned.items():
            status = self.statuses.get((deployment, tid))
            if status is None:
                continue
            status.retired_early += n
            if status.retired_early_said is None or status.last_scrape_ts is None or (
                    status.last_scrape_ts - status.retired_early_said >= CHURN_SAY_SECONDS):
                status.retired_early_said = status.last_scrape_ts or 0.0
                log.warning("%s %s: label churn: %d series absent from its latest scrape retired before the %.0f h "
                            "expiry (%d since start), so memory and the recording stay bounded; their counts stay in "
                            "their families' totals, and one that comes back counts from 0 again",
                            deployment, redact(tid), n, SERIES_EXPIRY_SECONDS / 3600, status.retired_early)

    def state(self, deployment: str, now: float) -> DeploymentState:
        """The deployment's SLO state at `now` (its engine's windows)."""
        return self.engines[deployment].state(now)

    def target_statuses(self, dep: Deployment) -> list[TargetStatus]:
        """The statuses of the deployment's targets, in its config's order."""
        return [self.statuses[(dep.name, t.id)] for t in dep.targets]

    def latest(self, deployment: str) -> tuple[Snapshot, SeriesBook] | None:
        """What the recording keeps of a deployment: its latest snapshot and its accumulators (None before
        its first snapshot)."""
        engine = self.engines[deployment]
        snap = engine.store.latest()
        return None if snap is None else (snap, engine.book)

    def readings_by_deployment(self) -> dict[str, list[TelemetryResult]]:
        out: dict[str, list[TelemetryResult]] = {}
        for (dep, _tid), result in self.telemetry.items():
            out.setdefault(dep, []).append(result)
        return out
