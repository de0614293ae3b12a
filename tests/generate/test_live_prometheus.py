"""A real Prometheus (2.42 and 3.x) scrapes a server replaying the real SGLang OpenMetrics answer (with its
`sglang_` sample names) and evaluates the generated rules, time-scaled 60x."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from monitor.config import parse_config
from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.generate.writer import write
from tests.components import Build
from tests.conftest import free_port
from tests.generate.conftest import FIXTURES
from tests.generate.metrics_server import ThreadedMetricsServer
from tests.procs import running

OM_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def growing_exposition(text: str, factor: float) -> str:
    """Every sample multiplied by `factor`: counters and histograms grow consistently between scrapes."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            head, value = line.rsplit(" ", 1)
            line = f"{head} {float(value) * factor!r}"
        out.append(line)
    return "\n".join(out) + "\n"


class FixtureServer(ThreadedMetricsServer):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.hits = text, 0

    async def _metrics(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(body=growing_exposition(self.text, 1 + self.hits).encode(), headers={"Content-Type": OM_TYPE})


def api(port: int, path: str, **params: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def wait_for(check, timeout: float = 40.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out; last answer {last!r}")


@pytest.fixture()
def live(tmp_path: Path, prometheus_build: Build):
    text = (FIXTURES / "sglang_0.5.23_server_metrics.openmetrics.txt").read_text(encoding="utf-8")
    with FixtureServer(text) as server:
        config = parse_config({"sidecar": {"listen_port": free_port()}, "deployments": [{
            "name": "live", "tpot_target_seconds": 0.04, "ttft_target_seconds": 1.0,
            "targets": [{"role": "server", "url": f"http://127.0.0.1:{server.port}/metrics"}]}]})
        write(generate(config, Options(time_scale=60, alertmanager=f"127.0.0.1:{free_port()}")), tmp_path)
        port = free_port()
        argv = [prometheus_build.server, f"--config.file={tmp_path / 'alerts/prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]
        with running(argv, tmp_path / "prometheus.log"):
            yield port, server


def _values(port: int, query: str) -> list[float]:
    return [float(r["value"][1]) for r in api(port, "query", query=query)["data"]["result"]]


def test_rules_evaluate_cleanly_and_record_slis_from_a_real_sglang_scrape(live):
    port, server = live
    ids = '{deployment="live",sli="tpot"}'
    # The relabeling restored `sglang:` names from the OpenMetrics `sglang_` samples.
    assert wait_for(lambda: _values(port, 'count(sglang:request_time_per_output_token_seconds_bucket{le="0.04"})'))
    totals = wait_for(lambda: [v for v in _values(port, f"slo_monitor:sli_total:rate5m{ids}") if v > 0])
    assert totals
    errors = wait_for(lambda: _values(port, f"slo_monitor:sli_error:ratio_rate5m{ids}"))
    assert all(0 <= v <= 1 for v in errors)
    assert wait_for(lambda: _values(port, f"slo_monitor:burn_rate:ratio_rate1h{ids}"))
    assert wait_for(lambda: _values(port, 'slo_monitor:error_budget_remaining:ratio{deployment="live"}'))
    assert not _values(port, 'count({__name__=~"sglang_.+"})')

    def all_evaluated():
        rules = [r for g in api(port, "rules")["data"]["groups"] for r in g["rules"]]
        return rules if all(r["health"] == "ok" for r in rules) else None

    rules = wait_for(all_evaluated)
    assert not [r["name"] for r in rules if r.get("lastError")]
    assert server.hits >= 2
