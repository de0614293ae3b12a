"""What the generated rules read across a server relaunched with other `--bucket-*` edges, on a real
Prometheus, 2.42 and 3.x (issue 24 item 1), beside the sidecar fed the same scrapes.

The config declares the target's edge (TPOT 50 ms, SGLang's defaults plus 0.05), as the sidecar advises; the
server runs on the defaults for 30 minutes, then is relaunched with the advised list. Every request has the
same latency mix throughout: 90 % at 45 ms, 10 % at 55 ms, so the true SLI is 0.9 in every window. Prometheus
stores `le="0.05"` as a new series born at the relaunch, while `_count` counts across it (a counter reset): a
window reaching back before the relaunch divides the new process's good requests by both processes' requests,
so the rules read the SLI low until the window has passed the relaunch (docs/bucket-layouts.md). The sidecar
counts such a window in parts, the old part interpolated with bounds that hold the truth.
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from monitor.config import parse_config
from monitor.conventions import names, policy
from monitor.conventions.slis import DEFAULT_BUCKETS, SLI_FAMILIES
from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.generate.writer import write
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.slo.engine import DeploymentEngine
from tests.components import Build
from tools.incident_lab.prometheus import serving

EPOCH = 1_700_000_000.0
STEP = 15
RELAUNCH = 30 * 60
END = 90 * 60
WITH_50MS = tuple(sorted({*DEFAULT_BUCKETS["tpot"], 0.05}))
CONFIG = {"deployments": [{
    "name": "relaunch", "tpot_target_seconds": 0.05, "objective": 0.99, "buckets": {"tpot": list(WITH_50MS)},
    "targets": [{"role": "server", "url": "http://10.0.0.1:30000/metrics"}]}]}
EXTRA = 'deployment="relaunch",instance="10.0.0.1:30000",job="sglang-server",role="server"'


def _server(edges: tuple[float, ...]) -> Histogram:
    registry = CollectorRegistry()
    hist = Histogram(SLI_FAMILIES["tpot"], "tpot", ["model_name"], registry=registry, buckets=edges)
    hist._registry = registry  # type: ignore[attr-defined]  # kept for generate_latest below
    return hist


def _lines(text: str, ts: float) -> list[str]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#") or "_created" in line.split(" ")[0]:
            continue
        name_labels, value = line.rsplit(" ", 1)
        name, _, rest = name_labels.partition("{")
        out.append(f"{name}{{{rest[:-1]},{EXTRA}}} {value} {ts:.3f}")
    return out


def _query(url: str, expr: str, ts: float) -> float | None:
    q = urllib.parse.urlencode({"query": expr, "time": f"{ts:.3f}"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=30) as resp:
        result = json.load(resp)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _rule_exprs(alerts: Path, window: str) -> tuple[str, str]:
    rules = [r for g in yaml.safe_load((alerts / names.rules_file("relaunch")).read_text())["groups"]
             for r in g["rules"] if r.get("labels", {}).get("sli") == "tpot" and "record" in r]
    by_name = {r["record"]: r["expr"] for r in rules}
    return by_name[names.sli_good(window)], by_name[names.sli_total(window)]


def test_rules_read_a_window_spanning_a_bucket_relaunch_low_where_the_sidecar_bounds_it(tmp_path: Path,
                                                                                      prometheus_build: Build):
    config = parse_config(CONFIG)
    dep = config.deployments[0]
    engine = DeploymentEngine(dep)
    server = _server(DEFAULT_BUCKETS["tpot"])
    capture = tmp_path / "capture.om"
    with capture.open("w") as om:
        for t in range(0, END + 1, STEP):
            if t == RELAUNCH:
                server = _server(WITH_50MS)  # a new process: fresh counters on the new edges
            for i in range(10):
                server.labels("kimi").observe(0.045 if i else 0.055)
            text = generate_latest(server._registry).decode()  # type: ignore[attr-defined]
            engine.observe(dep.targets[0], parse(text, engine_wanted(), count_families=False), EPOCH + t)
            engine.snapshot(EPOCH + t)
            om.write("\n".join(_lines(text, EPOCH + t)) + "\n")
        om.write("# EOF\n")
    write(generate(config, Options(config_name="relaunch")), tmp_path / "out")
    alerts = tmp_path / "out" / "alerts"

    measured = {}
    with serving(capture, tmp_path / "prom", STEP, prometheus=prometheus_build.server,
                 promtool=prometheus_build.tool) as url:
        for when, window in ((END, "5m"), (END, "1h"), (RELAUNCH + 55 * 60, "1h"),
                             (RELAUNCH + 10 * 60, "30m")):
            good, total = _rule_exprs(alerts, window)
            ts = EPOCH + when
            rules = _query(url, f"({good}) / ({total})", ts)
            win = engine.state(ts, {window: policy.SIDECAR_WINDOWS.get(window, 3600)}).slis["tpot"].windows[window]
            measured[(when, window)] = (rules, win)
    for (when, window), (rules, win) in measured.items():
        print(f"{when / 60:g} min, {window}: rules {rules!r}; sidecar {win.good_ratio!r} "
              f"[{win.good_ratio_lower!r}, {win.good_ratio_upper!r}]")

    # A window wholly after the relaunch: both exact, both the truth.
    rules, win = measured[(END, "5m")]
    assert rules is not None and math.isclose(rules, 0.9, rel_tol=1e-9)
    assert win.good_ratio == win.good_ratio_lower == win.good_ratio_upper and math.isclose(win.good_ratio, 0.9)
    rules, win = measured[(END, "1h")]
    assert rules is not None and math.isclose(rules, 0.9, rel_tol=1e-9) and math.isclose(win.good_ratio, 0.9)
    # A 1h window reaching 5 minutes before the relaunch: the sidecar's bounds hold the truth; the rules read
    # only the new process's good requests over both processes' requests (about 55/60 of 0.9: low).
    rules, win = measured[(RELAUNCH + 55 * 60, "1h")]
    assert win.good_ratio_lower <= 0.9 <= win.good_ratio_upper and win.good_ratio_lower < win.good_ratio_upper
    assert rules is not None and rules < 0.9 * 56 / 60, rules
    # Ten minutes after the relaunch the 30m window (the page's short window beside 6h) reads about a third.
    rules, win = measured[(RELAUNCH + 10 * 60, "30m")]
    assert win.good_ratio_lower <= 0.9 <= win.good_ratio_upper
    assert rules is not None and rules < 0.35, rules
