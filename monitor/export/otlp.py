"""Push the sidecar's SLO and accelerator series to an OpenTelemetry collector (OTLP/HTTP protobuf).

For users whose metrics pipeline is an OpenTelemetry collector rather than a Prometheus that
scrapes the sidecar. The series are the ones `/metrics` serves (same names, the Prometheus labels
as attributes, see `otlp_points`), read through observable instruments from the status callable
(`Sidecar.start_otlp` passes `Sidecar.status`).

Once per export interval the reader takes ONE snapshot (status + accelerator families) and every
instrument's callback reads from it, so one export is one consistent state. New series names
(an accelerator source that appears later) become new instruments before the next collection.

Threading: the SDK collects on its own thread, while the sidecar's state belongs to the asyncio
loop. Pass `loop=` and the snapshot is computed on that loop (as a `/metrics` scrape is), with a
timeout; the final export at shutdown reuses the last snapshot so shutting down from the loop
thread cannot deadlock waiting for that same loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, OTELResourceDetector, Resource
from prometheus_client.core import Metric

from monitor.export.otlp_points import OtlpPoint, points_from_status
from monitor.status_model import StatusResponse
from monitor.version import __version__

log = logging.getLogger(__name__)

SCOPE = "monitor.export.otlp"
DEFAULT_TIMEOUT_SECONDS = 10.0


def _say_failure(said: dict[str, str], key: str, what: str, err: Exception) -> None:
    """An ERROR line per failed export; the traceback only when the error is not the one `key` said last
    (an error that persists was a traceback every interval)."""
    text = f"{type(err).__name__}: {err}"
    first = said.get(key) != text
    said[key] = text
    log.error("OTLP: %s (%s)%s", what, text, "" if first else "; again, its traceback above",
              exc_info=err if first else None)


class _SnapshotReader(PeriodicExportingMetricReader):
    """A periodic reader that refreshes the snapshot (and the instrument set) before each collection."""

    def __init__(self, exporter: OTLPMetricExporter, interval_ms: float, timeout_ms: float,
                 before_collect: Callable[[], None]) -> None:
        self._before_collect = before_collect
        self._said: dict[str, str] = {}
        super().__init__(exporter, export_interval_millis=interval_ms, export_timeout_millis=timeout_ms)

    def collect(self, timeout_millis: float = 10_000) -> None:
        try:
            self._before_collect()
        except Exception as err:  # a failed snapshot must not kill the exporter thread
            _say_failure(self._said, "status", "could not read the sidecar status; exporting no points this cycle",
                         err)
        super().collect(timeout_millis=timeout_millis)


class OtlpHandle:
    """A running OTLP export. `shutdown()` sends a last export and stops; `aclose()` from a coroutine."""

    def __init__(self, status: Callable[[], StatusResponse], endpoint: str, interval_seconds: float, *,
                 extra: Callable[[], Iterable[Metric]] | None = None,
                 loop: asyncio.AbstractEventLoop | None = None,
                 timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
                 resource_attributes: dict[str, str] | None = None, instance_id: str | None = None) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"OTLP export interval must be > 0 seconds, got {interval_seconds}")
        self.endpoint = endpoint
        self._status = status
        self._extra = extra
        self._loop = loop
        self._timeout = timeout_seconds
        self._lock = threading.Lock()  # guards the snapshot (callbacks vs refresh)
        self._create_lock = threading.Lock()  # the ticker and force_flush may refresh at once
        self._snapshot: dict[str, list[OtlpPoint]] = {}
        self._said: dict[str, str] = {}
        self._instruments: dict[str, Any] = {}
        self._closing = False
        self._closed = False
        resource = _resource(resource_attributes or {}, instance_id)
        exporter = OTLPMetricExporter(endpoint=endpoint, timeout=timeout_seconds)
        self._reader = _SnapshotReader(exporter, interval_seconds * 1000, timeout_seconds * 1000, self._refresh)
        self._provider = MeterProvider(resource=resource, metric_readers=[self._reader])
        self._meter = self._provider.get_meter(SCOPE, __version__)

    # --- snapshot ---------------------------------------------------------------------------
    def _points(self) -> list[OtlpPoint]:
        status = self._status()
        extra: list[Metric] = []
        if self._extra is not None:
            try:
                extra = list(self._extra())
            except Exception as err:  # accelerator families are optional: keep exporting the SLO series
                _say_failure(self._said, "extra", "accelerator families failed; exporting the SLO series only", err)
        return points_from_status(status, extra)

    def _read(self) -> list[OtlpPoint]:
        loop = self._loop
        if loop is None or not loop.is_running() or _on_loop_thread(loop):
            return self._points()

        async def on_loop() -> list[OtlpPoint]:
            return self._points()

        return asyncio.run_coroutine_threadsafe(on_loop(), loop).result(self._timeout)

    def _refresh(self) -> None:
        if self._closing:
            return  # final export at shutdown: the last snapshot (see module docstring)
        try:
            points = self._read()
        except Exception:
            with self._lock:
                self._snapshot = {}  # stale values exported as fresh would be worse than a gap
            raise
        by_name: dict[str, list[OtlpPoint]] = defaultdict(list)
        for p in points:
            by_name[p.name].append(p)
        with self._lock:
            self._snapshot = dict(by_name)
        with self._create_lock:
            for name, pts in by_name.items():
                if name not in self._instruments:
                    self._instruments[name] = self._create(pts[0])

    def _create(self, first: OtlpPoint) -> Any:
        def observe(_options: CallbackOptions, name: str = first.name) -> Iterable[Observation]:
            with self._lock:
                points = self._snapshot.get(name, ())
            return [Observation(p.value, p.labels) for p in points]

        factory = (self._meter.create_observable_counter if first.kind == "counter"
                   else self._meter.create_observable_gauge)
        return factory(first.name, callbacks=[observe], unit=first.unit, description=first.description)

    # --- lifecycle --------------------------------------------------------------------------
    def force_flush(self, timeout_seconds: float | None = None) -> bool:
        """Collect and export now (tests, or before a planned restart)."""
        return self._provider.force_flush(int((timeout_seconds or self._timeout) * 1000))

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = self._closing = True
        self._provider.shutdown()

    async def aclose(self) -> None:
        """Shut down without blocking the event loop (the exporter's last POST runs in a thread)."""
        await asyncio.get_running_loop().run_in_executor(None, self.shutdown)


def _resource(attributes: dict[str, str], instance_id: str | None) -> Resource:
    """The export's resource: `service.name` slo-monitor, OTEL_RESOURCE_ATTRIBUTES over it, `attributes` over both.

    `instance_id` is the `service.instance.id` unless the environment or `attributes` give one. The SDK's
    own default is a random UUID per process: a receiver that maps it to `instance` (Prometheus) then
    starts new series at every restart while the old ones still answer queries for the lookback delta
    (5 min), and a `sum by (deployment)` would count the sidecar twice."""
    resource = Resource.create({"service.name": "slo-monitor", "service.version": __version__, **attributes})
    given = SERVICE_INSTANCE_ID in attributes or SERVICE_INSTANCE_ID in OTELResourceDetector().detect().attributes
    if instance_id and not given:
        resource = resource.merge(Resource({SERVICE_INSTANCE_ID: instance_id}))
    return resource


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def start_otlp(status: Callable[[], StatusResponse], endpoint: str, interval_seconds: float, *,
               extra: Callable[[], Iterable[Metric]] | None = None,
               loop: asyncio.AbstractEventLoop | None = None,
               timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
               resource_attributes: dict[str, str] | None = None, instance_id: str | None = None) -> OtlpHandle:
    """Export `status()` (plus `extra()` families) to `endpoint` every `interval_seconds`.

    `endpoint` is the full OTLP/HTTP metrics URL, e.g. http://127.0.0.1:4318/v1/metrics (Prometheus 3's
    own receiver: http://PROMETHEUS:9090/api/v1/otlp/v1/metrics, docs/prometheus3.md). `instance_id` is the
    default `service.instance.id` (see `_resource`)."""
    return OtlpHandle(status, endpoint, interval_seconds, extra=extra, loop=loop, timeout_seconds=timeout_seconds,
                      resource_attributes=resource_attributes, instance_id=instance_id)
