"""`--histograms nhcb`: rules and dashboards over native histograms with custom buckets (NHCB), which Prometheus 3
converts SGLang's classic histograms into at scrape time (`convert_classic_histograms_to_nhcb`).

The proof runs a real Prometheus 3 over one server written by prometheus_client (as SGLang's collectors are),
under a steady load that adds the same observations every quarter second (counters preloaded, so no window
extrapolates toward zero). Deployment `nhcb` is scraped once, keeping both the classic series and the NHCB
(`always_scrape_classic_histograms`): the generated NHCB rules and the classic rules (renamed `slo_monitor_classic:`)
run in the same rule groups, so both read the very same samples at the same evaluation timestamps and must agree
within 1e-9 on every recording (SLI events, error ratios, burn rates per window, means) and on every alert.
Deployment `only` is scraped with the generated job as is: no classic series are stored, and the NHCB rules and
dashboards must still read it. A third job asks for OpenMetrics and shows why the generated job asks for the text
format (docs/prometheus3.md#native-histograms-with-custom-buckets-nhcb).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import choose_encoder

from monitor.config import parse_config
from monitor.conventions.slis import DEFAULT_BUCKETS, SLI_FAMILIES
from monitor.generate.build import generate
from monitor.generate.dashboards import HISTOGRAM_DASHBOARDS
from monitor.generate.dashboards.common import panel_queries
from monitor.generate.options import Options
from monitor.generate.writer import write
from monitor.promql import metric_names
from tests.components import PROMETHEUS_3
from tests.conftest import free_port
from tests.generate.conftest import run_tool
from tests.generate.metrics_server import ThreadedMetricsServer
from tests.procs import running

TICK = 0.25  # seconds between two identical batches of requests
PRELOAD = 4000  # batches observed before the first scrape
TOLERANCE = 1e-9
# Per batch, (latency, how many): TTFT 30% over its 2 s edge (pages), TPOT 0.5% over 0.04 s (quiet), E2E 4% over
# 8 s (tickets), ITL's 0.05 s target between the 0.04 and 0.06 edges (interpolated: 80 + 16 / 2 of 100 good, 12%
# bad, the 6h/30m page); queue time 0.5% over 1 s. Observations exactly on an edge count as good in both forms.
LOAD: dict[str, list[tuple[float, int]]] = {
    "ttft": [(0.3, 30), (2.0, 40), (3.0, 25), (50.0, 5)],
    "tpot": [(0.02, 120), (0.04, 79), (0.05, 1)],
    "e2e": [(3.0, 60), (8.0, 36), (9.0, 3), (500.0, 1)],
    "itl": [(0.01, 80), (0.045, 10), (0.055, 6), (0.07, 4)],
    "queue_time": [(0.0, 100), (0.3, 79), (1.0, 20), (4.0, 1)],  # 0.5% over its 1 s edge (zeros: the 0 edge)
}
TARGETS = {"ttft": 2.0, "tpot": 0.04, "e2e": 8.0, "itl": 0.05, "queue_time": 1.0}


class SteadyServer(ThreadedMetricsServer):
    """SGLang's latency histograms in a prometheus_client registry, answering in the format the scrape
    asks for (OpenMetrics with `sglang_` sample names under `sglang:` TYPE lines, as prometheus_client >= 0.23
    writes them; the classic text with `sglang:` names)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.hists = {sli: Histogram(SLI_FAMILIES[sli], "latency", ["model_name"], registry=self.registry,
                                     buckets=DEFAULT_BUCKETS[sli]).labels("kimi") for sli in LOAD}
        super().__init__()
        self._batches(PRELOAD)
        self.applied, self.start = PRELOAD, time.monotonic()

    def _batches(self, n: int) -> None:
        for _ in range(n):
            for sli, load in LOAD.items():
                for value, count in load:
                    for _ in range(count):
                        self.hists[sli].observe(value)

    async def _metrics(self, request: web.Request) -> web.Response:
        # Whole batches only, applied on the event loop before rendering: every scrape sees the same mix.
        due = PRELOAD + int((time.monotonic() - self.start) / TICK)
        self._batches(due - self.applied)
        self.applied = due
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self.registry), headers={"Content-Type": content_type})


def api(port: int, path: str, **params: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def query(port: int, expr: str, **params: str) -> list[dict[str, Any]]:
    answer = api(port, "query", query=expr, **params)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def config(port: int) -> Any:
    url = f"http://127.0.0.1:{port}/metrics"
    slis = {f"{sli}_target_seconds": t for sli, t in TARGETS.items()}
    return parse_config({"sidecar": {"listen_port": free_port()}, "deployments": [
        {"name": name, "objective": 0.99, "approximate": True, **slis, "targets": [{"role": "server", "url": url}]}
        for name in ("nhcb", "only")]})


def classic_renamed(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The classic rules under other names (`slo_monitor_classic:...`, alerts `Classic...`) so they can run next
    to the NHCB ones; their expressions are untouched but for the names of the recordings they read."""
    out = []
    for rule in rules:
        rule = {**rule, "expr": rule["expr"].replace("slo_monitor:", "slo_monitor_classic:")}
        if "record" in rule:
            rule["record"] = rule["record"].replace("slo_monitor:", "slo_monitor_classic:")
        else:
            rule["alert"] = "Classic" + rule["alert"]
        out.append(rule)
    return out


def side_by_side(nhcb_files: dict[str, str], classic_files: dict[str, str]) -> str:
    """Deployment nhcb's groups, each holding the NHCB rules then the renamed classic ones: one group evaluates
    its rules one after another at one timestamp, so both forms read the same samples."""
    path = "alerts/rules/nhcb.rules.yml"
    nhcb, classic = yaml.safe_load(nhcb_files[path]), yaml.safe_load(classic_files[path])
    assert [g["name"] for g in nhcb["groups"]] == [g["name"] for g in classic["groups"]]
    groups = [{**n, "rules": n["rules"] + classic_renamed(c["rules"])} for n, c in zip(nhcb["groups"], classic["groups"])]
    return yaml.safe_dump({"groups": groups}, sort_keys=False)


def scrape_config(nhcb_files: dict[str, str], rules: list[str], om_port: int) -> str:
    """The generated NHCB prometheus.yml with deployment nhcb moved to a copy of its job that also keeps the
    classic series, and two jobs that negotiate OpenMetrics (deployments `om-utf8`, `om-underscores`)."""
    doc = yaml.safe_load(nhcb_files["alerts/prometheus.yml"])
    doc["rule_files"], doc["alerting"] = rules, {"alertmanagers": []}
    job = next(j for j in doc["scrape_configs"] if j["job_name"] == "sglang-server")
    assert job["convert_classic_histograms_to_nhcb"] is True and job["scrape_protocols"] == ["PrometheusText0.0.4"]
    kept = {**job, "job_name": "sglang-server-classic-kept", "always_scrape_classic_histograms": True,
            "static_configs": [s for s in job["static_configs"] if s["labels"]["deployment"] == "nhcb"]}
    job["static_configs"] = [s for s in job["static_configs"] if s["labels"]["deployment"] == "only"]
    def openmetrics(name: str, **extra: str) -> dict[str, Any]:
        return {**job, "job_name": name, "scrape_protocols": ["OpenMetricsText1.0.0"], **extra, "static_configs": [
            {"targets": [f"127.0.0.1:{om_port}"], "labels": {"deployment": name, "role": "server"}}]}
    doc["scrape_configs"] += [kept, openmetrics("om-utf8"),
                              openmetrics("om-underscores", metric_name_escaping_scheme="underscores")]
    return yaml.safe_dump(doc, sort_keys=False)


def raw_samples(port: int, expr: str, at: float) -> dict[tuple[str, tuple[tuple[str, str], ...], float], float]:
    """{(name, labels, timestamp): value} of every sample `expr` (a range selector) selects at `at`: a few seconds
    back, so no group is half-way through an evaluation."""
    out = {}
    for series in query(port, expr, time=f"{at:.3f}"):
        metric = dict(series["metric"])
        name = metric.pop("__name__", "")
        for ts, value in series["values"]:
            out[(name, tuple(sorted(metric.items())), float(ts))] = float(value)
    return out


def wait_for(check, timeout: float = 60.0):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out; last answer {last!r}")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    build = PROMETHEUS_3.require()
    tmp = tmp_path_factory.mktemp("nhcb")
    with SteadyServer() as server:
        cfg = config(server.port)
        nhcb_files = generate(cfg, Options(time_scale=60, config_name="nhcb-proof", histograms="nhcb"))
        classic_files = generate(cfg, Options(time_scale=60, config_name="nhcb-proof"))
        write(nhcb_files, tmp / "nhcb")
        (tmp / "side-by-side.rules.yml").write_text(side_by_side(nhcb_files, classic_files))
        rules = [str(tmp / "side-by-side.rules.yml"), str(tmp / "nhcb/alerts/rules/only.rules.yml")]
        (tmp / "prometheus.yml").write_text(scrape_config(nhcb_files, rules, server.port))
        port = free_port()
        argv = [build.server, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}"]
        with running(argv, tmp / "prometheus.log", ready_url=f"http://127.0.0.1:{port}/-/ready"):
            # The 1h windows (60 s at 1/60) hold a full minute of evaluations: every window compared below
            # has many samples, and Prometheus 3's left-open windows extrapolate alike on both sides.
            wait_for(lambda: query(port, 'slo_monitor:sli_error:ratio_rate1h{deployment="only",sli="ttft"}'))
            time.sleep(20)
            yield port, nhcb_files, tmp


def test_nhcb_rules_record_the_classic_rules_numbers_within_1e9_from_the_same_scrapes(live):
    port, _, _ = live
    sel = '{deployment="nhcb"}[30s]'
    at = time.time() - 3
    nhcb = raw_samples(port, '{__name__=~"slo_monitor:.+",deployment="nhcb"}[30s]', at)
    classic = raw_samples(port, '{__name__=~"slo_monitor_classic:.+",deployment="nhcb"}[30s]', at)
    renamed = {(n.replace("slo_monitor_classic:", "slo_monitor:"), labels, ts): v
               for (n, labels, ts), v in classic.items()}
    assert set(nhcb) == set(renamed), (set(nhcb) ^ set(renamed))
    worst_abs = worst_rel = 0.0
    for key, value in nhcb.items():
        other = renamed[key]
        if math.isnan(value) or math.isnan(other):
            assert math.isnan(value) and math.isnan(other), key
            continue
        diff = abs(value - other)
        worst_abs, worst_rel = max(worst_abs, diff), max(worst_rel, diff / max(abs(other), 1e-300))
        assert diff <= TOLERANCE * max(1.0, abs(other)), (key, value, other)
    # Every SLI's events, ratio and burn rate in every window took part, over many evaluations.
    names = {(n, dict(labels).get("sli")) for n, labels, _ in nhcb}
    for sli in TARGETS:
        for w in ("5m", "30m", "1h", "2h", "6h", "1d", "3d"):
            for rec in (f"slo_monitor:sli_good:rate{w}", f"slo_monitor:sli_error:ratio_rate{w}",
                        f"slo_monitor:burn_rate:ratio_rate{w}"):
                assert (rec, sli) in names
    assert len({ts for _, _, ts in nhcb}) >= 20
    burn = query(port, 'slo_monitor:burn_rate:ratio_rate1h{deployment="nhcb"}')
    print(f"\nNHCB vs classic: {len(nhcb)} samples, worst abs diff {worst_abs:.3g}, worst rel diff {worst_rel:.3g}; "
          f"1h burn rates {sorted((r['metric']['sli'], round(float(r['value'][1]), 6)) for r in burn)}")
    # The load's error ratios: TTFT 0.3, TPOT 0.005, E2E 0.04 (edges, exact) and ITL interpolated.
    errors = {r["metric"]["sli"]: float(r["value"][1])
              for r in query(port, f"last_over_time(slo_monitor:sli_error:ratio_rate5m{sel})")}
    assert abs(errors["ttft"] - 0.3) < 1e-9 and abs(errors["tpot"] - 0.005) < 1e-9
    assert abs(errors["e2e"] - 0.04) < 1e-9
    assert abs(errors["itl"] - 0.12) < 1e-9  # 16 in (0.04, 0.06]: half of them good by interpolation


def test_nhcb_alerts_fire_exactly_as_the_classic_ones_on_the_same_scrapes(live):
    port, _, _ = live
    alerts = raw_samples(port, 'ALERTS{deployment="nhcb"}[30s]', time.time() - 3)
    nhcb = {k: v for k, v in alerts.items() if not dict(k[1])["alertname"].startswith("Classic")}
    classic = {(n, tuple(sorted({**dict(labels), "alertname": dict(labels)["alertname"].removeprefix("Classic")}.items())),
                ts): v for (n, labels, ts), v in alerts.items() if dict(labels)["alertname"].startswith("Classic")}
    assert nhcb == classic
    firing = {(d["alertname"], d["sli"], d["long_window"]) for d in (dict(k[1]) for k in nhcb)
              if d.get("alertstate") == "firing" and "long_window" in d}
    assert firing == {("SLOErrorBudgetBurnFast", "ttft", "1h"), ("SLOErrorBudgetBurnFast", "ttft", "6h"),
                      ("SLOErrorBudgetBurnSlow", "ttft", "1d"), ("SLOErrorBudgetBurnSlow", "ttft", "3d"),
                      ("SLOErrorBudgetBurnFast", "itl", "6h"),
                      ("SLOErrorBudgetBurnSlow", "itl", "1d"), ("SLOErrorBudgetBurnSlow", "itl", "3d"),
                      ("SLOErrorBudgetBurnSlow", "e2e", "1d"), ("SLOErrorBudgetBurnSlow", "e2e", "3d")}


def test_the_generated_nhcb_job_stores_no_classic_series_and_its_rules_still_read_it(live):
    port, _, _ = live
    assert not query(port, 'count({__name__=~"sglang:.+_(bucket|sum|count)",deployment="only"})')
    families = {r["metric"]["__name__"] for r in query(port, '{__name__=~"sglang:.+",deployment="only"}')}
    assert set(SLI_FAMILIES.values()) <= families
    # A steady mix: the NHCB rules on the other scrape phase read the same ratios.
    for sli, expected in (("ttft", 0.3), ("tpot", 0.005), ("e2e", 0.04), ("itl", 0.12)):
        got = query(port, f'slo_monitor:sli_error:ratio_rate5m{{deployment="only",sli="{sli}"}}')
        assert got and abs(float(got[0]["value"][1]) - expected) < 1e-9, (sli, got)
    rules = [r for g in api(port, "rules")["data"]["groups"] for r in g["rules"]]
    assert rules and not [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]


def test_an_openmetrics_scrape_with_underscore_escaping_is_not_converted_so_the_nhcb_job_asks_for_text(live):
    port, _, _ = live
    # Asked for OpenMetrics without `escaping=allow-utf-8` (Prometheus 2.x, or 3.x told to escape names),
    # prometheus_client >= 0.23 writes `# TYPE sglang:x histogram` over `sglang_x_bucket` samples: Prometheus 3.16
    # does not take them for a histogram and stores the classic series (renamed `sglang:` by the job's
    # relabeling). With 3.16's default `allow-utf-8` the names agree and it converts.
    latency = set(SLI_FAMILIES.values())
    stored = {r["metric"]["__name__"] for r in query(port, '{__name__=~"sglang.+",deployment="om-underscores"}')}
    assert stored and not stored & latency and {f + "_bucket" for f in latency} <= stored, stored
    stored = {r["metric"]["__name__"] for r in query(port, '{__name__=~"sglang.+",deployment="om-utf8"}')}
    assert latency <= stored and not any(name.endswith("_bucket") for name in stored), stored


def test_nhcb_dashboards_latency_queries_return_data_without_classic_series(live):
    port, files, _ = live
    grafana = {"$deployment": "only", "$__rate_interval": "10s", "$__interval": "1s", "$__range": "1m"}
    latency = set(SLI_FAMILIES.values())
    checked = 0
    for name in sorted(HISTOGRAM_DASHBOARDS):
        for expr in panel_queries(json.loads(files[f"dashboards/{name}"])):
            if not metric_names(expr) & latency:
                continue
            for var, value in grafana.items():
                expr = expr.replace(var, value)
            result = query(port, expr)
            assert result, (name, expr)
            assert all("histogram" in r or math.isfinite(float(r["value"][1])) for r in result), (name, expr, result)
            checked += 1
    assert checked >= 10
    # The classic dashboards' queries have nothing to read there.
    assert not query(port, 'histogram_quantile(0.99, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket'
                           '{deployment="only"}[10s])))')


def test_prometheus_3_promtool_checks_the_nhcb_output_and_runs_its_native_histogram_rule_tests(small_config,
                                                                                              tmp_path: Path):
    build = PROMETHEUS_3.require()
    write(generate(small_config, Options(histograms="nhcb", config_name="small")), tmp_path)
    alerts = tmp_path / "alerts"
    res = run_tool(build.tool, "check", "rules", *sorted(str(p) for p in (alerts / "rules").glob("*.rules.yml")))
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_tool(build.tool, "check", "config", "prometheus.yml", cwd=alerts)
    assert res.returncode == 0, res.stdout + res.stderr
    tests = sorted(str(p.relative_to(alerts)) for p in (alerts / "tests").glob("*.test.yml"))
    assert "tests/kimi-pd.test.yml" in tests
    assert "{{schema:-53 " in (alerts / "tests/kimi-pd.test.yml").read_text()
    procs = [subprocess.Popen([build.tool, "test", "rules", t], cwd=alerts, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for t in tests]
    for proc in procs:
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out


@pytest.fixture(scope="module")
def nhcb_small(small_config) -> dict[str, str]:  # noqa: ANN001
    return generate(small_config, Options(histograms="nhcb", config_name="small"))


def test_nhcb_rules_dashboards_and_manifests_read_no_classic_histogram_series(nhcb_small):
    classic = re.compile(r"[A-Za-z_:]+_(bucket|sum|count)\b")
    for rel, text in nhcb_small.items():
        if rel == "alerts/prometheus.yml":
            continue  # its relabeling still restores `le` for a job that also keeps the classic series
        exprs = ([r["expr"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]] if rel.startswith("alerts/rules/")
                 else panel_queries(json.loads(text)) if rel.endswith(".json") and "provisioning" not in rel else [])
        for expr in exprs:
            found = [m.group() for m in classic.finditer(expr) if not m.group().startswith("histogram_")]
            assert not found, (rel, expr)
    rules = nhcb_small["alerts/rules/kimi-pd.rules.yml"]
    assert "histogram_fraction(-Inf, 2, sum by (deployment) (rate(sglang:time_to_first_token_seconds{" in rules
    assert "_bucket" not in nhcb_small["deploy/kubernetes/prometheusrule.yaml"]


def test_nhcb_scrape_config_converts_the_sglang_jobs_over_the_text_format_and_nothing_else(nhcb_small):
    jobs = {j["job_name"]: j for j in yaml.safe_load(nhcb_small["alerts/prometheus.yml"])["scrape_configs"]}
    for name, job in jobs.items():
        converted = name.startswith("sglang-")
        assert job.get("convert_classic_histograms_to_nhcb", False) is converted, name
        assert (job.get("scrape_protocols") == ["PrometheusText0.0.4"]) is converted, name
        assert "always_scrape_classic_histograms" not in job
    assert {"sglang-decode", "sglang-router", "npu-exporter", "slo-monitor"} <= set(jobs)
    spec = yaml.safe_load(nhcb_small["deploy/kubernetes/podmonitor-sglang.yaml"])["spec"]
    assert spec["convertClassicHistogramsToNHCB"] is True and spec["scrapeProtocols"] == ["PrometheusText0.0.4"]


def test_nhcb_approximate_targets_keep_the_annotation_and_are_interpolated_by_histogram_fraction(nhcb_small):
    rules = [r for g in yaml.safe_load(nhcb_small["alerts/rules/llama-unified.rules.yml"])["groups"] for r in g["rules"]]
    good = next(r for r in rules if r.get("record") == "slo_monitor:sli_good:rate5m" and r["labels"]["sli"] == "itl")
    assert good["expr"].startswith("histogram_fraction(-Inf, 0.05, ")
    page = next(r for r in rules if r.get("alert") == "SLOErrorBudgetBurnFast" and r["labels"]["sli"] == "itl")
    assert "between 0.04 and 0.06 by histogram_fraction" in page["annotations"]["approximation"]


def test_generate_cli_refuses_nhcb_for_the_interop_formats(tmp_path: Path):
    res = subprocess.run([sys.executable, "-m", "monitor", "generate", "--histograms", "nhcb", "--format", "sloth",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--format prometheus only" in res.stderr
    assert not list(tmp_path.iterdir())
