"""OTLP/HTTP export, at the wire: what a hand-made receiver sees of each request (UCUM units, sum vs gauge,
monotonic cumulative sums, the scope, the resource) and how the hook behaves (off, failing sources).

That the export is the `/metrics` page (names, labels, values) as a real receiver stores it is proven
against Prometheus 3's own OTLP receiver: tests/export/test_otlp_prometheus3.py."""

from __future__ import annotations

import asyncio
import socket
from collections import defaultdict

import pytest
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE as CUMULATIVE

from monitor.config import parse_config
from monitor.export.otlp import _resource, start_otlp
from monitor.export.otlp_points import points_from_families, points_from_status, unit_for
from monitor.export.prometheus import families_from_status
from monitor.export.telemetry import telemetry_families
from monitor.sidecar import Sidecar
from tests.conftest import npu_exporter_documented, serve_routes
from tests.slo.helpers import exposition


class Clock:
    """A frozen clock, so two status() calls give identical values (OTLP vs Prometheus comparison)."""

    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


async def _otlp_receiver() -> tuple[web.AppRunner, str, list[bytes]]:
    """A real OTLP/HTTP endpoint: keeps every protobuf request body it is sent."""
    bodies: list[bytes] = []

    async def receive(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        bodies.append(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")

    runner, base = await serve_routes({"/v1/metrics": receive}, method="POST")
    return runner, f"{base}/v1/metrics", bodies


async def _sidecar(real_text: str, npu_text: str) -> tuple[Sidecar, web.AppRunner]:
    """Two deployments: synthetic traffic (non-trivial SLIs) and the real SGLang 0.5.23 fixture + npu-exporter."""
    synthetic = [exposition(tpot=[0.03] * 5), exposition(tpot=[0.03] * 50 + [0.2] * 5, running=2)]
    n = {"i": 0}

    async def synth(_request: web.Request) -> web.Response:
        return web.Response(text=synthetic[n["i"]])

    async def real(_request: web.Request) -> web.Response:
        return web.Response(text=real_text)

    async def npu(_request: web.Request) -> web.Response:
        return web.Response(text=npu_text)

    runner, base = await serve_routes({"/synth": synth, "/real": real, "/npu": npu})
    cfg = parse_config({"deployments": [
        {"name": "busy", "tpot_target_seconds": 0.04, "ttft_target_seconds": 1.0,
         "targets": [{"role": "server", "url": f"{base}/synth"}]},
        {"name": "real", "tpot_target_seconds": 0.05, "ttft_target_seconds": 2.0, "approximate": True,
         "targets": [{"role": "server", "url": f"{base}/real"},
                     {"role": "npu", "source": "npu-exporter", "url": f"{base}/npu", "node": "node-a"}]},
    ]})
    clock = Clock()
    sc = Sidecar(cfg, clock=clock)
    await sc.run(once=True)
    clock.t += 15
    n["i"] = 1
    await sc.run(once=True)
    return sc, runner


def _accelerators(sc: Sidecar):
    def families():
        grouped = defaultdict(list)
        for (dep, _target), result in sc.observations.telemetry.items():
            grouped[dep].append(result)
        return telemetry_families(grouped)

    return families


def _decode(bodies: list[bytes]) -> dict[str, dict]:
    """name -> {unit, kind, points: {sorted attrs: value}} from the last request that has each metric."""
    out: dict[str, dict] = {}
    for body in bodies:
        req = ExportMetricsServiceRequest()
        req.ParseFromString(body)
        for rm in req.resource_metrics:
            resource = {a.key: a.value.string_value for a in rm.resource.attributes}
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    data = getattr(m, kind)
                    points = {}
                    for dp in data.data_points:
                        attrs = tuple(sorted((a.key, a.value.string_value) for a in dp.attributes))
                        points[attrs] = dp.as_double if dp.HasField("as_double") else float(dp.as_int)
                    out[m.name] = {"unit": m.unit, "kind": kind, "points": points, "resource": resource,
                                   "monotonic": getattr(data, "is_monotonic", None), "scope": sm.scope.name,
                                   "temporality": getattr(data, "aggregation_temporality", None)}
    return out


def test_unit_is_set_only_where_the_name_carries_it():
    assert unit_for("slo_monitor_sli_target_seconds") == "s"
    assert unit_for("slo_monitor_sli_objective_ratio") == "1"
    assert unit_for("accelerator_memory_used_bytes") == "By"
    # The OTLP->Prometheus translator would rename these if they had a unit (`_ratio` moved, `_seconds` added).
    assert unit_for("slo_monitor_sli_good_ratio_lower_bound") == ""
    assert unit_for("slo_monitor_latency_seconds_sum") == ""
    assert unit_for("slo_monitor_deployment_rate_per_second") == ""
    assert unit_for("slo_monitor_sli_burn_rate") == ""


def test_the_wire_carries_ucum_units_cumulative_monotonic_sums_the_scope_and_the_resource(real_text):
    npu_text = npu_exporter_documented()

    async def go():
        sc, sglang = await _sidecar(real_text, npu_text)
        receiver, endpoint, bodies = await _otlp_receiver()
        extra = _accelerators(sc)
        # A long interval: the test drives the exports itself (force_flush), no timing involved.
        handle = start_otlp(sc.status, endpoint, 3600, extra=extra, loop=asyncio.get_running_loop(),
                            timeout_seconds=5, resource_attributes={"service.instance.id": "test"})
        try:
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, handle.force_flush)
            status = sc.status()
            accel = extra()
        finally:
            await handle.aclose()
            await receiver.cleanup()
            await sglang.cleanup()
        return bodies, status, accel

    bodies, status, accel = asyncio.run(go())
    assert bodies, "the receiver got no OTLP request"
    got = _decode(bodies[:1])

    kinds: dict[str, str] = {}
    for fam in [*families_from_status(status), *accel]:
        for s in fam.samples:
            kinds[s.name] = "sum" if fam.type == "counter" else "gauge"
    assert any(name.startswith("accelerator_") for name in kinds), "fixture produced no accelerator series"

    assert set(got) == set(kinds)
    for name, kind in kinds.items():
        metric = got[name]
        assert metric["unit"] == unit_for(name), name
        assert metric["kind"] == kind, name
        if kind == "sum":
            # Prometheus 3 takes cumulative sums only (a delta needs a feature flag there).
            assert metric["monotonic"] is True and metric["temporality"] == CUMULATIVE, name
    assert {"", "s", "1", "By"} <= {got[n]["unit"] for n in got}
    first = next(iter(got.values()))
    assert first["resource"]["service.name"] == "slo-monitor"
    assert first["resource"]["service.instance.id"] == "test"
    assert first["scope"] == "monitor.export.otlp"


def test_points_carry_prometheus_labels_and_no_created_samples(real_text):
    async def go():
        sc, runner = await _sidecar(real_text, "")
        try:
            return sc.status()
        finally:
            await runner.cleanup()

    status = asyncio.run(go())
    points = points_from_status(status)
    assert points == points_from_families(families_from_status(status))
    names = {p.name for p in points}
    assert "slo_monitor_target_scrapes_total" in names
    assert all(not n.endswith("_created") for n in names)
    up = [p for p in points if p.name == "slo_monitor_target_up"]
    assert {p.labels["deployment"] for p in up} == {"busy", "real"}
    assert all(set(p.labels) == {"deployment", "role", "target"} for p in up)
    quant = [p for p in points if p.name == "slo_monitor_latency_seconds"]
    assert quant and all("quantile" in p.labels and p.unit == "s" and p.kind == "gauge" for p in quant)


def test_sidecar_hook_is_off_without_an_endpoint_and_interval_is_checked():
    async def go():
        sc = Sidecar(parse_config({"deployments": []}))
        return sc.start_otlp()

    assert asyncio.run(go()) is None
    with pytest.raises(ValueError, match="interval"):
        start_otlp(lambda: None, "http://127.0.0.1:9/v1/metrics", 0)  # type: ignore[arg-type,return-value]


def test_sidecar_hook_exports_to_the_configured_endpoint():
    async def go():
        receiver, endpoint, bodies = await _otlp_receiver()
        cfg = parse_config({"sidecar": {"otlp_endpoint": endpoint, "otlp_interval_seconds": 3600},
                            "deployments": [{"name": "idle", "tpot_target_seconds": 0.05, "targets": []}]})
        sc = Sidecar(cfg)
        handle = sc.start_otlp()
        assert handle is not None
        try:
            await asyncio.get_running_loop().run_in_executor(None, handle.force_flush)
        finally:
            await handle.aclose()
            await receiver.cleanup()
        return bodies

    got = _decode(asyncio.run(go()))
    # No HTTP listener started: the instance is the configured port's (9464 by default), on this host.
    assert got["slo_monitor_deployment_info"]["resource"]["service.instance.id"] == f"{socket.gethostname()}:9464"
    info = got["slo_monitor_deployment_info"]
    assert info["points"] == {(("cards", ""), ("deployment", "idle"), ("hardware", "unknown"), ("mode", "pd-mixed"),
                               ("model", "unknown")): 1.0}
    assert info["unit"] == "" and info["kind"] == "gauge"


def test_the_instance_id_is_stable_unless_the_environment_or_the_caller_names_one(monkeypatch):
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert _resource({}, "host:9464").attributes["service.instance.id"] == "host:9464"  # not the SDK's random UUID
    assert _resource({"service.instance.id": "given"}, "host:9464").attributes["service.instance.id"] == "given"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=from-env,region=eu")
    env = _resource({}, "host:9464").attributes
    assert (env["service.instance.id"], env["region"], env["service.name"]) == ("from-env", "eu", "slo-monitor")


def test_a_failing_extra_source_does_not_stop_the_slo_series():
    async def go():
        receiver, endpoint, bodies = await _otlp_receiver()
        def broken():
            raise ImportError("no accelerator families")

        sc = Sidecar(parse_config({"deployments": [{"name": "idle", "tpot_target_seconds": 0.05}]}))
        handle = start_otlp(sc.status, endpoint, 3600, extra=broken, loop=asyncio.get_running_loop(),
                            timeout_seconds=5)
        try:
            await asyncio.get_running_loop().run_in_executor(None, handle.force_flush)
        finally:
            await handle.aclose()
            await receiver.cleanup()
        return bodies

    assert "slo_monitor_deployment_info" in _decode(asyncio.run(go()))


def test_a_failure_at_every_export_logs_its_traceback_once(caplog):
    """A source that fails at every export logged a traceback each interval."""
    async def go():
        receiver, endpoint, _ = await _otlp_receiver()

        def broken():
            raise ImportError("no accelerator families")

        def no_status():
            raise RuntimeError("status broken")

        sc = Sidecar(parse_config({"deployments": [{"name": "idle", "tpot_target_seconds": 0.05}]}))
        handles = [start_otlp(sc.status, endpoint, 3600, extra=broken, loop=asyncio.get_running_loop(), timeout_seconds=5),
                   start_otlp(no_status, endpoint, 3600, timeout_seconds=5)]
        try:
            for handle in handles:
                for _ in range(3):
                    await asyncio.get_running_loop().run_in_executor(None, handle.force_flush)
        finally:
            for handle in handles:
                await handle.aclose()
            await receiver.cleanup()

    with caplog.at_level("INFO", logger="monitor.export.otlp"):
        asyncio.run(go())
    for says in ("no accelerator families", "status broken"):
        lines = [r for r in caplog.records if r.name == "monitor.export.otlp" and says in r.getMessage()]
        assert len(lines) >= 3 and bool(lines[0].exc_info) and not any(r.exc_info for r in lines[1:]), says
