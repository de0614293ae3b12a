"""The running sidecar: scrape loop + state + HTTP endpoints, wired together."""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import gc
import logging
import math
import shutil
import socket
import sqlite3
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from monitor.config import Config, Deployment
from monitor.conventions.policy import (
    RECORDING_COARSE_STEP_SECONDS,
    RECORDING_LONG_AFTER_SECONDS,
    RECORDING_LONG_STEP_SECONDS,
)
from monitor.conventions.slis import SLI_BY_KEY
from monitor.conventions.units import parse_duration
from monitor.export import prometheus
from monitor.export.connections import ConnectionGuard
from monitor.export.http_server import build_app, start_server
from monitor.export.otlp import DEFAULT_TIMEOUT_SECONDS, OtlpHandle, start_otlp
from monitor.export.prometheus import SidecarCollector
from monitor.export.render_cache import Families, MetricsPage
from monitor.export.requestlog import request_log_families
from monitor.export.telemetry import telemetry_families
from monitor.fdlimit import default_max_connections, open_files_limits, raise_open_files_limit
from monitor.observations import Observations
from monitor.record.size import expected_bytes, rows_kept
from monitor.record.store import CorruptRecording, Recording, RecordingError, RecordingGone, move_aside
from monitor.redaction import redact_str
from monitor.reload import ReloadPlan, ReloadRefused, plan_reload, request_log_part
from monitor.requestlog import RequestLogReader, state_path_for
from monitor.requestlog.reader import TargetCounts
from monitor.scrape.loop import Scraper
from monitor.signals import on_reload_signal, on_stop_signals_named
from monitor.slo.state import fix_flag_for
from monitor.status_model import (
    ConfigReloadStatus,
    DeploymentStatus,
    LoopStatus,
    RecordingStatus,
    SidecarStatus,
    StatusResponse,
    deployment_status,
    loop_status,
    sidecar_status,
)
from monitor.telemetry.model import Reading

log = logging.getLogger(__name__)

# Reading the state for /metrics gives the event loop back this often (a scrape result, a probe waits no longer).
STATUS_SLICE_SECONDS = 0.005


def recording_thinning(full_resolution: str) -> tuple[tuple[float, float], ...]:
    """(age, step) pairs for Recording.write_tick: every tick for `full_resolution`, then one a minute,
    past the longest window one per the error budget's step (what the windows hold in memory)."""
    full = float(parse_duration(full_resolution))
    return ((full, RECORDING_COARSE_STEP_SECONDS),
            (max(full, RECORDING_LONG_AFTER_SECONDS), RECORDING_LONG_STEP_SECONDS))


def state_row(dep: DeploymentStatus, accelerator_readings: Iterable[Reading] = (),
              request_log_counts: Iterable[TargetCounts] = ()) -> dict[str, Any]:
    """The compact per-tick state row the recording keeps beside each snapshot, for post-incident analysis
    (`monitor.analyze.recording` reads it): the read model's SLIs, load and targets, the accelerators'
    readings, and the request-log targets' cumulative finished/good requests (so the goodput SLI can be
    analysed from the recording). Built here, where the three meet: the recording only stores it."""
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


def _reading(r: Reading) -> dict[str, Any]:
    d = dataclasses.asdict(r)
    d.pop("processes", None)
    return {k: v for k, v in d.items() if v not in (None, {}, ())}


def _goodput(dep: DeploymentStatus, counts: list[TargetCounts]) -> dict[str, Any]:
    if not counts:
        return {}
    objective = next((w.objective for w in dep.goodput or () if w.objective is not None), None)
    return {"goodput": {"objective": objective,
                        "targets": {c.target: {"finished": c.finished, "good": c.good} for c in counts}}}


class Sidecar:
    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time,
                 recording_reset: bool = False, loader: Callable[[], Config] | None = None,
                 steady: Callable[[], float] | None = None) -> None:
        """`loader` reads and validates the config again (the config file, as `run` does): what
        `reload()` (SIGHUP, POST /-/reload) applies. `steady`: the clock that tells a wall clock step
        (`Scraper`; by default the machine's steady clock with the real wall clock)."""
        self.config = config
        self.clock = clock
        self.steady = steady
        self.started_at = clock()
        self.loader = loader
        self._reload_ok = True
        self._loaded_at = self.started_at
        self._reload_attempt: float | None = None
        self._reload_error: str | None = None
        self.observations = Observations(config)
        self.scraper = Scraper(config, self.observations, clock=clock, steady=steady)
        self.registry = CollectorRegistry(auto_describe=False)
        self.request_logs = RequestLogReader(config, state_path_for(config.sidecar.recording_path), clock=clock)
        self.registry.register(SidecarCollector(self.status, self.extra_families))
        # /metrics: rendered at most once per scrape cycle (or reload), and never older than the scrape
        # interval of the config running at the time of the request (a reload may change it).
        self._changes = 0  # reloads tried: each changes what the page shows (the state, or the reload status)
        self.metrics_page = MetricsPage(self.gather_metrics, version=self.page_version,
                                        max_age=lambda: self.config.sidecar.scrape_interval_seconds, clock=clock)
        self.guard: ConnectionGuard | None = None  # the port's connection cap, once serving
        self.runner: web.AppRunner | None = None
        self.port: int | None = None
        self._stop = asyncio.Event()
        self._generation = asyncio.Event()  # set to end the running scraper (stop, or a reload replaced it)
        self._running: Scraper | None = None
        self.recording: Recording | None = None
        self._last_record = 0.0
        self._record_error: str | None = None
        self._record_errors = 0  # failed writes since start (slo_monitor_recording_write_errors_total)
        self._record_failing_since: float | None = None
        self._last_written: float | None = None
        self._said_size = False
        self.restored: dict[str, int] = {}
        # The whole status, built for /api/v1/status readers once per page version (`status_for_api`).
        self._api_status: tuple[Hashable, asyncio.Future[StatusResponse]] | None = None
        self._recording_reset = recording_reset
        self._record_stopped: str | None = None  # why the recording is no longer written (damaged, replaced)
        if config.sidecar.recording_path:
            self._open_recording(config.sidecar.recording_path, reset=recording_reset)

    def _open_recording(self, path: str, *, reset: bool) -> None:
        """Open the recording and restore from it; a damaged one is refused, or with `reset` moved
        aside (kept for a post-mortem) and replaced by a fresh one."""
        try:
            self.recording = Recording(path)
            self.restored = self._restore()
        except CorruptRecording as err:
            if self.recording is not None:
                self.recording.close()
                self.recording = None
            if not reset:
                raise RecordingError(f"{err}; start with `slo-monitor run --recording-reset` to move it aside "
                                     "and begin a fresh recording, or set sidecar.recording_path to another file"
                                     ) from None
            aside = move_aside(path, self.clock())
            log.warning("%s; moved it to %s and started a fresh recording", err, aside.name)
            self.recording = Recording(path)

    def _restore(self) -> dict[str, int]:
        """Reload windows and accumulators an earlier run recorded (SLO windows survive restarts).

        Everything is read into fresh engines first: a damaged row found half-way leaves the
        scraper's engines untouched."""
        assert self.recording is not None
        now = self.clock()
        horizon = now - parse_duration(self.config.sidecar.recording_retention)
        history = {}
        for dep in self.config.deployments:
            saved = self.recording.book(dep.name, [t.id for t in dep.targets])
            # From the deployment's last rebuild by a reload (its windows started empty then), when later.
            start = max(horizon, self.recording.epoch(dep.name) or -math.inf)
            history[dep.name] = (self.recording.snapshots(dep.name, start=start, end=now), saved[1] if saved else None)
            self._say_future_rows(dep.name, now)
        loaded = self.observations.restore(history)
        for name, n in loaded.items():
            if n:
                log.info("restored %d recorded snapshots of %s", n, name)
            for note in self.observations.engines[name].restore_notes:
                log.warning("%s: %s", name, note)
        return loaded

    def _say_future_rows(self, deployment: str, now: float) -> None:
        """Snapshots dated after now were written while the clock ran ahead: they cannot start windows
        that end now. Left in the file (for `analyze`), not restored, said once."""
        assert self.recording is not None
        span = self.recording.span(deployment)
        if span is None or span[1] <= now:
            return
        ahead = sum(1 for _ in self.recording.snapshots(deployment, start=math.nextafter(now, math.inf)))
        log.warning("recording %s: %d snapshot%s of %s dated in the future (up to %.0f s ahead of the clock, "
                    "which has stepped back since they were written): not restored; they stay in the file",
                    self.recording.path, ahead, "" if ahead == 1 else "s", deployment, span[1] - now)

    def record(self, now: float, *, force: bool = False, retry: bool = True) -> bool:
        """Write one recording tick when the recording interval has passed."""
        if self.recording is None:
            return False
        # A negative gap is a clock that stepped back: write now rather than wait for it to catch up.
        if not force and 0 <= now - self._last_record < self.config.sidecar.recording_interval_seconds:
            return False
        if self._record_stopped is not None:  # each tick not written counts, as a failed write does
            self._last_record = now
            return self._write_failed(now, self._record_stopped)
        status = self.status()
        telemetry = self.observations.readings_by_deployment()
        logs: dict[str, list[TargetCounts]] = {}
        for c in self.request_logs.counts() if self.request_logs else ():
            logs.setdefault(c.deployment, []).append(c)
        rows = []
        for dep, ds in zip(self.config.deployments, status.deployments):
            latest = self.observations.latest(dep.name)
            if latest is None:
                continue
            snap, book = latest
            readings = [r for res in telemetry.get(dep.name, []) for r in res.readings]
            rows.append((dep.name, snap, state_row(ds, readings, logs.get(dep.name, ())), book))
        try:
            self.recording.check_file()
            written = self.recording.write_tick(
                rows, retain_seconds=parse_duration(self.config.sidecar.recording_retention),
                thin=recording_thinning(self.config.sidecar.recording_full_resolution))
        except (RecordingGone, CorruptRecording) as err:  # deleted, replaced or damaged under us
            if retry and self._recording_lost(err):
                return self.record(now, force=True, retry=False)  # into the fresh recording, at once
            return self._write_failed(now, self._record_stopped or str(err))
        except sqlite3.Error as err:  # disk full, I/O error: the file may be sound
            return self._write_failed(now, str(err))
        if self._record_error is not None:
            log.info("recording %s: writing again", self.recording.path)
            self._record_error = None
            self._record_failing_since = None
        self._last_record = now
        self._last_written = now
        if not self._said_size and rows:
            self._say_size(written / len(rows))
        return True

    def _write_failed(self, now: float, error: str) -> bool:
        """A tick not written: said once (and again when it recovers), counted, on /healthz ("degraded")."""
        assert self.recording is not None
        if error != self._record_error:
            log.error("recording %s: cannot write (%s); the SLO state is still served, but not kept",
                      self.recording.path, error)
        self._record_error = error
        self._record_errors += 1
        if self._record_failing_since is None:
            self._record_failing_since = now
        return False

    def _recording_lost(self, err: RecordingError) -> bool:
        """The file being written was deleted, replaced or damaged while running. A deleted one is started
        again at its path (nothing is left to keep: the windows in memory go on into the new file); a replaced
        or damaged one is moved aside for a fresh one with --recording-reset, as at start, and otherwise no
        longer written (never into a file that is not ours). True when a fresh recording is open."""
        assert self.recording is not None
        path = self.recording.path
        self.recording.close()
        deleted = isinstance(err, RecordingGone) and not path.exists()
        if not deleted and not self._recording_reset:
            self._record_stopped = (f"{err}; not written any more: restart with --recording-reset to move it aside "
                                    "and begin a fresh recording")
            return False  # said by _write_failed, once
        try:
            if deleted:
                log.warning("%s: starting a new recording there (the history before now went with the deleted "
                            "file; the windows in memory go on)", err)
            else:
                aside = move_aside(path, self.clock())
                log.warning("%s; moved it to %s (--recording-reset) and started a fresh recording", err, aside.name)
            self.recording = Recording(path)
        except (RecordingError, OSError, sqlite3.Error) as again:
            self._record_stopped = f"{err}; a fresh recording could not be started either: {again}"
            return False
        self._record_stopped = None
        return True

    def _say_size(self, row_bytes: float) -> None:
        """Once, from the first tick's rows: how large the recording will grow with this fleet, thinning
        and retention; a WARNING when its filesystem has less free space than that."""
        assert self.recording is not None
        side = self.config.sidecar
        retain = parse_duration(side.recording_retention)
        rows = rows_kept(retain, side.recording_interval_seconds, recording_thinning(side.recording_full_resolution))
        full = expected_bytes(row_bytes, len(self.config.deployments), rows)
        self._said_size = True
        try:
            free = shutil.disk_usage(self.recording.path.resolve().parent).free
        except OSError:
            free = None
        what = (f"recording {self.recording.path}: {len(self.config.deployments)} deployments, ~{row_bytes / 1024:.1f} kB "
                f"a row, {rows:.0f} rows each kept over {side.recording_retention} (thinned): it grows to "
                f"~{full / 1e6:,.0f} MB")
        if free is not None and full > free:
            log.warning("%s, and its filesystem has %.0f MB free: shorten sidecar.recording_retention, free space "
                        "or shard the fleet (--shard i/N); writes that fail are logged", what, free / 1e6)
        else:
            log.info("%s%s", what, "" if free is None else f" ({free / 1e6:,.0f} MB free)")

    def recording_status(self) -> RecordingStatus | None:
        if self.recording is None:
            return None
        return RecordingStatus(path=str(self.recording.path), writing=self._record_error is None,
                               write_errors=self._record_errors, last_error=self._record_error,
                               failing_since=self._record_failing_since, last_write_ts=self._last_written)

    def degradations(self) -> list[str]:
        """What works less than it should while the SLO state is still served: /healthz answers 200
        "degraded" with these (a restart would not fix them, and would drop the windows)."""
        out = []
        if self._record_error is not None and self.recording is not None:
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._record_failing_since or 0.0))
            out.append(f"recording {self.recording.path}: cannot write since {since} ({self._record_errors} failed "
                       f"write{'' if self._record_errors == 1 else 's'} in all; last: {self._record_error}); the SLO "
                       "state is still served, but not kept")
        return out

    async def reload_async(self) -> str | None:
        """`reload()`, with the file read and validated in a thread (a 1,000-deployment file takes ~0.1 s and
        more on a busy machine): probes and scrape results do not wait for it. Applied on the event loop."""
        loaded: Config | BaseException | None = None
        if self.loader is not None:
            try:
                loaded = await asyncio.to_thread(self.loader)
            except Exception as err:  # said by reload(), as a file that does not load
                loaded = err
        return self.reload(loaded)

    def reload(self, loaded: Config | BaseException | None = None) -> str | None:
        """Read the config again (or take what `reload_async` read: a Config, or why it failed) and apply it;
        None when it worked, else why not (logged, and the running config stays). Validation comes first; then
        unchanged deployments keep their engines (windows, accumulators), target statuses and telemetry,
        changed ones start empty. Runs on the event loop, between scrape results, so status and scrapes always
        see one config."""
        now = self.clock()
        self._reload_attempt = now
        self._changes += 1
        try:
            if self.loader is None:
                raise ReloadRefused("no config file to reload from")
            if isinstance(loaded, BaseException):
                raise loaded
            new = loaded if loaded is not None else self.loader()
            plan = plan_reload(self.config, new)
        except Exception as err:  # a bad file (or a bug reading it): the running config stays
            # One line (a config error lists each field on its own line): the log, the JSON answer, /api.
            text = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
            reason = redact_str(text or type(err).__name__)
            self._reload_ok, self._reload_error = False, reason
            log.error("config reload failed, still running the previous config: %s", reason)
            return reason
        self._reload_ok, self._reload_error, self._loaded_at = True, None, now
        if new == self.config:  # nothing to apply: every loop, window and tick goes on untouched
            log.info("config reloaded: unchanged (%d deployment%s kept)", len(new.deployments),
                     "" if len(new.deployments) == 1 else "s")
            return None
        self._apply(new, plan)
        log.info("config reloaded: %d deployment%s (%s)", len(new.deployments),
                 "" if len(new.deployments) == 1 else "s", plan.summary())
        return None

    def _apply(self, new: Config, plan: ReloadPlan) -> None:
        keep = set(plan.kept)
        old_scraper = self.scraper
        observations = self.observations.reloaded(new, keep, plan.rebuilt)
        self._mark_epochs([*plan.rebuilt, *plan.added])
        if request_log_part(new) != request_log_part(self.config):
            self.request_logs = RequestLogReader(new, state_path_for(new.sidecar.recording_path), clock=self.clock)
        if old_scraper.can_update(new):
            # The running loops go on: unchanged deployments keep their schedule, the cycle tick (request logs,
            # recording) its own; only the changed deployments' loops start again.
            self.config, self.observations = new, observations
            old_scraper.update(new, observations, keep)
            return
        scraper = Scraper(new, observations, clock=self.clock, steady=self.steady)
        scraper.cycles, scraper.last_cycle_seconds = old_scraper.cycles, old_scraper.last_cycle_seconds
        scraper.npu_details = {k: v for k, v in old_scraper.npu_details.items() if k[0] in keep}
        self.config, self.observations, self.scraper = new, observations, scraper
        self._generation.set()  # the running scraper ends its cycle; run() starts the new one
        if old_scraper is not self._running:
            old_scraper.close()  # replaced before it ever ran

    def _mark_epochs(self, names: list[str]) -> None:
        """The deployments a reload rebuilt or added start their windows empty now: the recording says so, so
        that a restart restores their windows from here on, not stitched from their earlier rows as well."""
        if self.recording is None or not names:
            return
        try:
            self.recording.mark_epochs(names, self.clock())
        except sqlite3.Error as err:
            log.error("recording %s: cannot note that %s started again (%s); after a restart their windows may "
                      "include rows from before this reload", self.recording.path, ", ".join(names), err)

    def reload_status(self) -> ConfigReloadStatus:
        return ConfigReloadStatus(successful=self._reload_ok, last_success_ts=self._loaded_at,
                                  last_attempt_ts=self._reload_attempt, last_error=self._reload_error)

    def status(self, only: Collection[str] | None = None) -> StatusResponse:
        """The read model of every deployment, or of those named in `only` (a page of /api/v1/status)."""
        now = self.clock()
        wanted = None if only is None else set(only)
        read = self._deployment_reader(now)
        deps = [read(dep) for dep in self.config.deployments if wanted is None or dep.name in wanted]
        return StatusResponse(sidecar=self._sidecar_status(now), deployments=deps)

    async def status_in_slices(self, only: Collection[str] | None = None) -> StatusResponse:
        """status(only), read on the event loop a few ms at a time: each deployment between two scrape results
        (never while one is applied), and a probe or a scrape result waits at most one slice. Read from
        the config, observations and request logs current at its start (a reload meanwhile shows next time)."""
        now = self.clock()
        config, read = self.config, self._deployment_reader(now)
        wanted = None if only is None else set(only)
        deps = []
        mark = time.perf_counter()
        for dep in config.deployments:
            if wanted is not None and dep.name not in wanted:
                continue
            if time.perf_counter() - mark > STATUS_SLICE_SECONDS:
                await asyncio.sleep(0)
                mark = time.perf_counter()
            deps.append(read(dep))
        return StatusResponse(sidecar=self._sidecar_status(now), deployments=deps)

    async def status_for_api(self, only: Collection[str] | None = None) -> StatusResponse:
        """/api/v1/status: a page's own deployments built in slices; every deployment (a state filter reads
        them all) built once per scrape cycle or reload however many readers ask, and in slices, so readers of
        a large fleet neither hold the event loop nor multiply its work (issue #34 item 7)."""
        if only is not None and len(only) < len(self.config.deployments):
            return await self.status_in_slices(only)
        version = self.page_version()
        cached = self._api_status
        if cached is None or cached[0] != version:
            cached = self._api_status = (version, asyncio.ensure_future(self.status_in_slices()))
        whole = await asyncio.shield(cached[1])
        return whole.model_copy(update={"deployments": list(whole.deployments)})

    def _deployment_reader(self, now: float) -> Callable[[Deployment], DeploymentStatus]:
        observations, request_logs = self.observations, self.request_logs

        def read(dep: Deployment) -> DeploymentStatus:
            return deployment_status(dep, observations.state(dep.name, now), observations.target_statuses(dep),
                                     request_logs.summaries.get(dep.name, {}).values())
        return read

    def _sidecar_status(self, now: float) -> SidecarStatus:
        return sidecar_status(self.started_at, now, self.config.sidecar.scrape_interval_seconds,
                              self.scraper.cycles, self.scraper.last_cycle_seconds, self.loops(),
                              recording=self.recording_status(), config=self.reload_status(),
                              degraded=self.degradations())

    def page_version(self) -> Hashable:
        """What the /metrics page shows changes with each scrape cycle and each reload tried."""
        return self._changes, self.scraper.cycles

    async def gather_metrics(self) -> Families:
        """The /metrics page's state, read on the event loop; what it returns builds the families from
        that alone, in the render thread."""
        status = await self.status_in_slices()
        extra = list(self.extra_families(status))  # live state (telemetry, request logs): read here, on the loop
        # Looked up at each render (not imported by name): tests count renders through it.
        return lambda: chain(prometheus.families_from_status(status), extra)

    def loops(self) -> list[LoopStatus]:
        """Every loop's health (cheap: /healthz reads it on each probe)."""
        interval = self.config.sidecar.scrape_interval_seconds
        return [loop_status(h, interval) for h in (*self.scraper.loops.values(), self.scraper.cycle_loop)]

    def problems(self) -> list[str]:
        """Why /healthz fails: each loop with no completed cycle in a few intervals (empty when healthy)."""
        return [lp.problem for lp in self.loops() if lp.problem]

    def extra_families(self, status: StatusResponse) -> Iterator[Metric]:
        """Families beside the SLO state: accelerator telemetry and the request-log SLIs."""
        yield from telemetry_families(self.observations.readings_by_deployment())
        if self.request_logs:
            yield from request_log_families(self.request_logs.summaries, self.request_logs.counts(), status)
        if self.guard is not None:
            yield from self.guard.families()

    def poll_request_logs(self, now: float) -> None:
        """Tail SGLang's per-request logs; a missing directory marks the target down."""
        if not self.request_logs:
            return
        self.request_logs.poll(now)
        for tl in self.request_logs.targets:
            found = bool(tl.target.path and Path(tl.target.path).is_dir())
            self.observations.apply_request_log(tl.deployment, tl.target, now, tl.lines, tl.last_error, found=found)

    def _on_cycle(self, now: float) -> None:
        self.poll_request_logs(now)
        self.record(now)

    def start_otlp(self) -> OtlpHandle | None:
        """Push the /metrics series over OTLP when `sidecar.otlp_endpoint` is set (else None). Call it
        from a coroutine on the sidecar's loop: its state is read on that loop."""
        settings = self.config.sidecar
        if not settings.otlp_endpoint:
            return None
        # The receiver's `instance`: stable across restarts (so a restart continues the same series), and
        # distinct per sidecar on a host (shards); OTEL_RESOURCE_ATTRIBUTES=service.instance.id=... wins.
        instance = f"{socket.gethostname()}:{self.port if self.port is not None else settings.listen_port}"
        handle = start_otlp(self.status, settings.otlp_endpoint, settings.otlp_interval_seconds,
                            extra=lambda: self.extra_families(self.status()), loop=asyncio.get_running_loop(),
                            timeout_seconds=min(DEFAULT_TIMEOUT_SECONDS, settings.otlp_interval_seconds),
                            instance_id=instance)
        log.info("exporting SLO series over OTLP/HTTP to %s every %gs (service.instance.id %s unless "
                 "OTEL_RESOURCE_ATTRIBUTES names one)", settings.otlp_endpoint, settings.otlp_interval_seconds, instance)
        return handle

    async def start_http(self, host: str | None = None, port: int | None = None) -> int:
        side = self.config.sidecar
        soft = open_files_limits()[0]
        limit = side.max_connections or default_max_connections(soft, side.max_concurrent_scrapes)
        self.guard = ConnectionGuard(limit, open_files=soft)
        log.debug("at most %d connections to the sidecar's port (open-files limit %s)", limit, soft)
        app = build_app(self.metrics_page, self.status, api_token=lambda: self.config.sidecar.api_bearer_token,
                        header_timeout=side.http_header_timeout_seconds, problems=self.problems,
                        degraded=self.degradations, reload=self.reload_async,
                        lifecycle=side.enable_lifecycle, status_async=self.status_for_api,
                        deployment_names=lambda: [d.name for d in self.config.deployments], guard=self.guard)
        self.runner, self.port = await start_server(app, host or side.listen_host,
                                                    side.listen_port if port is None else port)
        return self.port

    async def run(self, *, once: bool = False) -> None:
        if once:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                now = await self.scraper.cycle(session)
            self.poll_request_logs(now)
            self.record(now, force=True)
            return
        while not self._stop.is_set():
            # One scraper per config: a reload replaces it and ends this one's run (its cycle in flight
            # finishes into the engines it shares with the new one for unchanged deployments).
            self._generation = asyncio.Event()
            scraper = self._running = self.scraper
            await scraper.run(self._generation, on_cycle=self._on_cycle)
            self._running = None
            if scraper is not self.scraper:
                scraper.close()

    def stop(self) -> None:
        self._stop.set()
        self._generation.set()

    async def close(self) -> None:
        self.stop()
        self.scraper.close()
        self.observations.say_pending_flaps(self.clock())
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        self.metrics_page.close()
        if self.recording is not None:
            # The last scrapes since the previous tick (up to recording_interval_seconds) are kept too.
            if self.record(self.clock(), force=True):
                log.info("recording %s: last tick written", self.recording.path)
            self.recording.close()
            self.recording = None


# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_scrape_buffers() -> None:
    """Let glibc keep the memory of freed scrape bodies for the next scrape.

    By default it gives a large freed block back to the OS at once (munmap, or trimming the heap), so
    every 1.5 MB body was faulted in again page by page: ~750 page faults and ~3.5 ms of kernel time per
    scrape of the 32-DP-rank anchor, a third of the sidecar's whole cost (bench/RESULTS.md). Blocks up
    to 8 MB now come from the heap, which is trimmed only beyond 32 MB free: RSS keeps at most that."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, 8 << 20) and libc.mallopt(M_TRIM_THRESHOLD, 32 << 20)
    except (OSError, AttributeError):  # not glibc (musl, macOS): its own defaults stay
        ok = False
    if not ok:
        log.debug("malloc tuning not available here; scrape buffers are the allocator's default")


def say_off_edge_targets(config: Config) -> None:
    """A target that is not an edge of the buckets the config declares (SGLang's defaults unless its
    `buckets:` says otherwise) gives an interpolated SLI: said once at start, with the launch flag that
    makes it exact (the status table's footer says it again from the buckets actually scraped)."""
    for dep in config.deployments:
        for sli in dep.slis:
            target = dep.target_seconds(sli)
            assert target is not None
            flag = fix_flag_for(sli, target, tuple(dep.buckets.get(sli) or SLI_BY_KEY[sli].buckets))
            if flag is None:
                continue
            whose = "the buckets its config declares" if sli in dep.buckets else "SGLang's default buckets"
            log.log(logging.INFO if dep.approximate else logging.WARNING,
                    "%s: %s target %g ms is not a bucket edge of %s, so its SLI is interpolated (approximate); "
                    "for an exact one relaunch the servers with %s and give the config the same list "
                    "(buckets: {%s: [...]})", dep.name, sli, target * 1000, whose, flag, sli)


async def serve(config: Config, *, host: str | None = None, port: int | None = None,
                recording_reset: bool = False, loader: Callable[[], Config] | None = None) -> None:
    """Run until SIGINT/SIGTERM; SIGHUP (and POST /-/reload) reloads the config through `loader`."""
    say_off_edge_targets(config)
    keep_scrape_buffers()
    # Before anything opens files: the port's connection cap is derived from what this leaves.
    raise_open_files_limit(config.sidecar.open_files_limit)
    sidecar = Sidecar(config, recording_reset=recording_reset, loader=loader)
    bound = await sidecar.start_http(host, port)
    # What is loaded by now (modules, classes, config, restored windows) lives as long as the process:
    # frozen out of the garbage collector's full passes, which otherwise walk it all again and again
    # (~60k objects, tens of ms each time, during which /healthz waits).
    gc.freeze()
    otlp = sidecar.start_otlp()  # None unless sidecar.otlp_endpoint is set
    stopping: list[str] = []

    def on_stop(name: str) -> None:
        if not stopping:
            log.info("%s received: stopping (writing the recording's last tick first)", name)
        stopping.append(name)
        sidecar.stop()

    # Before saying it serves: from then on a SIGTERM stops it cleanly and a SIGHUP reloads, never kills.
    on_stop_signals_named(on_stop)
    reloading: set[asyncio.Task[str | None]] = set()  # held until done (the loop keeps only weak references)

    def on_sighup() -> None:
        task = asyncio.ensure_future(sidecar.reload_async())
        reloading.add(task)
        task.add_done_callback(reloading.discard)

    on_reload_signal(on_sighup)
    log.info("serving /metrics, /healthz and /api/v1/status on http://%s:%d",
             host or config.sidecar.listen_host, bound)
    try:
        await sidecar.run()
    finally:
        if otlp is not None:
            await otlp.aclose()
        await sidecar.close()
        log.info("stopped")
