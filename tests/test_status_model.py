"""/api/v1/status wire types: a NaN is absent (null) in every output, never a 0; target warnings are shown."""

from __future__ import annotations

import math

from monitor.commands.status import render_table
from monitor.config import parse_config
from monitor.export.otlp_points import points_from_status
from monitor.export.prometheus import families_from_status
from monitor.scrape.status import TargetStatus
from monitor.slo.engine import DeploymentEngine
from monitor.slo.histogram import Hist
from monitor.slo.windows import Snapshot
from monitor.status_model import StatusResponse, deployment_status, sidecar_status
from tests.conftest import strict_json

NAN = math.nan


def _status_with_nan() -> StatusResponse:
    """A deployment whose history holds NaN counts (e.g. a recording written before they were refused)."""
    dep = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04,
                                         "targets": [{"role": "server", "url": "http://127.0.0.1:1/metrics"}]}]}
                       ).deployments[0]
    engine = DeploymentEngine(dep)
    edges = (0.04, math.inf)
    engine.store.append(Snapshot(1000.0, {"tpot": Hist(edges, (1.0, 2.0), 1.0, 2.0)}, {"requests_total": 2.0}))
    engine.store.append(Snapshot(1060.0, {"tpot": Hist(edges, (NAN, NAN), NAN, NAN)}, {"requests_total": NAN}))
    target = TargetStatus("d", dep.targets[0].id, "server", "sglang", dep.targets[0].url, up=True,
                          warnings=["sglang:x{}: no _sum: no mean reported"])
    deps = [deployment_status(dep, engine.state(1060.0), [target])]
    return StatusResponse(sidecar=sidecar_status(900.0, 1060.0, 5.0, 2, 0.1), deployments=deps)


def test_nan_is_null_in_the_status_model_and_its_json_never_zero():
    st = _status_with_nan()
    w = st.deployments[0].slis[0].windows[0]
    assert w.events is None and w.good_ratio is None and w.burn_rate is None and w.mean_seconds is None
    assert w.p50_seconds is None and w.p99_seconds is None
    body = strict_json(st.model_dump_json())
    win = body["deployments"][0]["slis"][0]["windows"][0]
    assert win["burn_rate"] is None and win["events"] is None
    assert StatusResponse.model_validate(body) == st  # what `slo-monitor status` reads back


def test_nan_is_absent_from_metrics_and_otlp_never_zero():
    st = _status_with_nan()
    window = {"deployment": "d", "sli": "tpot", "window": "5m"}
    samples = [s for f in families_from_status(st) for s in f.samples]
    assert all(math.isfinite(s.value) for s in samples)
    in_window = {s.name for s in samples if window.items() <= s.labels.items()}
    assert not in_window & {"slo_monitor_sli_burn_rate", "slo_monitor_sli_events", "slo_monitor_latency_seconds_sum",
                            "slo_monitor_latency_seconds_count", "slo_monitor_latency_mean_seconds"}, in_window
    points = points_from_status(st)
    assert not [p for p in points if p.name == "slo_monitor_sli_burn_rate" and window.items() <= p.labels.items()]


def test_nan_shows_as_a_dash_in_the_status_table_and_target_warnings_are_listed():
    table = render_table(_status_with_nan(), color=False)
    row = next(line for line in table.splitlines() if line.startswith("d "))
    assert " 0.0x" not in row and " -  " in row
    assert "d server@http://127.0.0.1:1/metrics: sglang:x{}: no _sum: no mean reported" in table


def test_target_warnings_reach_the_status_api():
    st = _status_with_nan()
    assert st.deployments[0].targets[0].warnings == ["sglang:x{}: no _sum: no mean reported"]


def _window_series(status: StatusResponse, deployment: str) -> set[str]:
    return {s.name for f in families_from_status(status) for s in f.samples
            if s.labels.get("deployment") == deployment and "window" in s.labels}


def test_before_the_first_completed_window_the_table_the_api_and_metrics_all_say_no_data():
    import asyncio

    from aiohttp import web

    from monitor.sidecar import Sidecar
    from tests.conftest import serve_routes
    from tests.slo.helpers import exposition

    async def handler(request):
        return web.Response(text=exposition(tpot=[0.03] * 5))

    async def go():
        runner, base = await serve_routes({"/metrics": handler})
        cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04,
                                             "targets": [{"role": "server", "url": f"{base}/metrics"}]}]})
        clock = {"t": 1000.0}
        sc = Sidecar(cfg, clock=lambda: clock["t"])
        try:
            before = sc.status()  # nothing scraped yet
            await sc.run(once=True)
            clock["t"] = 1002.0
            first = sc.status()  # one scrape: its series start counting here, nothing measured yet
            clock["t"] = 1005.0
            await sc.run(once=True)
            second = sc.status()
        finally:
            await sc.close()
            await runner.cleanup()
        return before, first, second

    before, first, second = asyncio.run(go())
    for st in (before, first):
        (dep,) = st.deployments
        (sli,) = dep.slis  # the SLI is listed, with its target, but no number
        assert sli.sli == "tpot" and sli.target_seconds == 0.04 and sli.error_budget_remaining is None
        for w in sli.windows:
            assert (w.events, w.good_ratio, w.burn_rate, w.p99_seconds) == (None, None, None, None), w
        assert not sli.breaching
        row = next(line for line in render_table(st, color=False).splitlines() if line.startswith("d "))
        assert "NO DATA" in row and "OK" not in row and "0.0x" not in row
        assert _window_series(st, "d") == set()  # absent, not 0
        names = {s.name for f in families_from_status(st) for s in f.samples}
        assert "slo_monitor_sli_target_seconds" in names
    # From the second scrape on there is a window: five seconds in which nothing happened.
    w5 = second.deployments[0].slis[0].windows[0]
    assert w5.events == 0 and w5.burn_rate == 0.0 and w5.good_ratio is None
    row = next(line for line in render_table(second, color=False).splitlines() if line.startswith("d "))
    assert "NO DATA" not in row and "0.0x" in row


def test_clients_that_left_reach_the_api_the_metrics_and_the_table_and_what_is_not_measured_is_absent():
    from monitor.conventions.names import M_ABORTED, M_CLIENT_CLOSED, M_CLIENT_CLOSED_RATIO
    from monitor.parse.exposition import parse
    from monitor.parse.gateway import ROUTER_WANTED

    dep = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
        {"role": "router", "url": "http://127.0.0.1:2/metrics"}]}]}).deployments[0]
    engine = DeploymentEngine(dep)
    for i, (ok, gone) in enumerate(((100, 0), (150, 30))):
        text = (f'smg_http_responses_total{{path="/generate",status_code="200",error_code=""}} {ok}\n'
                f'smg_http_responses_total{{path="/generate",status_code="499",error_code="client_closed_request"}} {gone}\n')
        engine.observe_gateway(dep.targets[0], parse(text, ROUTER_WANTED), 1000.0 + 60 * i)
        engine.snapshot(1000.0 + 60 * i)
    target = TargetStatus("d", dep.targets[0].id, "router", "router", dep.targets[0].url, up=True)
    st = StatusResponse(sidecar=sidecar_status(900.0, 1060.0, 5.0, 2, 0.1),
                        deployments=[deployment_status(dep, engine.state(1060.0), [target])])
    w5 = next(w for w in st.deployments[0].client_gone if w.window == "5m")
    assert (w5.gateway_answered, w5.gateway_client_closed, w5.gateway_client_closed_ratio) == (80.0, 30.0, 0.375)
    assert w5.server_aborted is None  # no SGLang server scraped: not measured, not 0
    body = strict_json(st.model_dump_json())
    assert body["deployments"][0]["client_gone"][0]["server_aborted"] is None
    got = {(s.name, s.labels["window"]): s.value for f in families_from_status(st) for s in f.samples
           if s.name in (M_CLIENT_CLOSED, M_CLIENT_CLOSED_RATIO, M_ABORTED)}
    assert got[(M_CLIENT_CLOSED, "5m")] == 30.0 and got[(M_CLIENT_CLOSED_RATIO, "5m")] == 0.375
    assert not [k for k in got if k[0] == M_ABORTED]
    table = render_table(st, color=False).splitlines()
    col = table[0].index("gone 5m")
    row = next(line for line in table if line.startswith("d "))
    assert row[col:].startswith("30 (37.5%)")
