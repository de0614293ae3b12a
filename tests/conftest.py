"""Shared test helpers: where the real fixtures live, free ports, a tiny exposition server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.emulate.topology import find_free_port as free_port  # noqa: F401 - re-exported; outside the ephemeral range
from tests.components import ALERTMANAGER_BUILDS, PROMETHEUS_BUILDS, Build

ROOT = Path(__file__).resolve().parents[1]
# Real output of the systems the sidecar observes, committed with the project (tests/fixtures/real/README.md).
REAL_FIXTURES = ROOT / "tests" / "fixtures" / "real"
REAL_TEXT = REAL_FIXTURES / "sglang_0.5.23_server_metrics.txt"
REAL_OM = REAL_FIXTURES / "sglang_0.5.23_server_metrics.openmetrics.txt"
DOCS_SAMPLE = REAL_FIXTURES / "sglang_docs_metrics_sample.txt"
ROUTER_ENGINE = REAL_FIXTURES / "sglang_router_0.3.2_engine_metrics.txt"
ROUTER_METRICS = REAL_FIXTURES / "sglang_router_0.3.2_metrics.txt"
ROUTER_PD = REAL_FIXTURES / "sglang_router_0.3.2_pd_metrics.txt"
ROUTER_500 = REAL_FIXTURES / "sglang_router_0.3.2_engine_metrics_label_mismatch_error.txt"
# The real gateways, captured by tools/gateway_capture (tests/fixtures/gateway/README.md).
GATEWAY_FIXTURES = ROOT / "tests" / "fixtures" / "gateway"
GATEWAY_MEASUREMENTS = GATEWAY_FIXTURES / "measurements.json"
GATEWAY_500 = GATEWAY_FIXTURES / "sglang_router_0.3.2_pd_engine_metrics_http_500.txt"
GATEWAY_EXPOSITIONS = sorted(GATEWAY_FIXTURES.glob("*metrics.txt"))  # every capture but the 500 body


def npu_exporter_documented() -> str:
    """Huawei's documented npu-exporter scrape as an exporter serves it: without the doc's `...` elisions."""
    text = (REAL_FIXTURES / "npu_exporter_sample.txt").read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(keepends=True) if line.strip() != "...")


def strict_json(text: str):
    """json.loads refusing NaN/Infinity, which Python writes and other JSON readers reject."""

    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="session")
def real_text() -> str:
    return REAL_TEXT.read_text()


@pytest.fixture(scope="session")
def real_openmetrics() -> str:
    return REAL_OM.read_text()


async def serve_routes(routes: dict, method: str = "GET") -> tuple:
    """Serve aiohttp handlers ({path: handler}) on 127.0.0.1:<free>; returns (runner, base URL).

    `method` is the HTTP method the routes answer ("*" for any). The caller awaits `runner.cleanup()`."""
    from aiohttp import web

    app = web.Application()
    for path, handler in routes.items():
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture(params=PROMETHEUS_BUILDS, ids=lambda b: b.name)
def prometheus_build(request: pytest.FixtureRequest) -> Build:
    """Each test that runs a real Prometheus (or promtool) runs on 2.42 and on 3.x."""
    return request.param.require()


@pytest.fixture(params=ALERTMANAGER_BUILDS, ids=lambda b: b.name)
def alertmanager_build(request: pytest.FixtureRequest) -> Build:
    return request.param.require()


# Module- and session-scoped fixtures cheap enough to build once per pytest-xdist worker.
_CHEAP_SHARED = {"real_text", "real_openmetrics", "small_config", "k26_path", "k3_path", "synthetic_path"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `-n N --dist loadgroup` (the Makefile's `test`): the tests that share one of our module- or
    session-scoped fixtures (a running stack, a recorded incident) go to one worker, in file order, so the
    fixture is built once and tests that rely on running after their neighbours (a stack's state) still do.
    A parametrized fixture groups per parameter: the Prometheus 2.42 and 3 stacks run side by side."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        callspec = getattr(item, "callspec", None)
        keys = []
        for name in info.names_closure:
            defs = info.name2fixturedefs.get(name)
            if not defs or name in _CHEAP_SHARED:
                continue
            fixdef = defs[-1]
            if fixdef.scope not in ("module", "session") or not fixdef.baseid:
                continue  # function scope, or a plugin's fixture (tmp_path_factory)
            index = callspec.indices.get(name) if callspec is not None else None
            # No "]" in a group name: xdist takes the text after "@" as the group only when no "]" follows it.
            keys.append(f"{fixdef.baseid}::{name}" + (f"#{index}" if index is not None else ""))
        if keys:
            item.add_marker(pytest.mark.xdist_group(min(keys)))
