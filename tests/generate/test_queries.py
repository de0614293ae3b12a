"""Every PromQL expression in every rule and dashboard parses and names only metrics that exist: SGLang's
from the real SGLang captures, a gateway's from the real gateways' captures (a name neither smg 1.13 nor
sglang-router 0.3.2 wrote is an error), and a deployment's rules read only its own gateway version's names."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from monitor.conventions import names as N
from monitor.conventions import slis as S
from monitor.conventions.names import canonical_name
from monitor.escaping import yaml_text
from monitor.generate.dashboards.common import panel_queries
from monitor.promql import metric_names
from tests.conftest import GATEWAY_FIXTURES
from tests.generate.conftest import FIXTURES, run_tool

GATEWAY_CAPTURES = {gw: sorted(GATEWAY_FIXTURES.glob(f"{prefix}_*metrics.txt"))
                    for gw, prefix in ((N.GATEWAY_SMG, "smg_1.13.0"), (N.GATEWAY_SGLANG_ROUTER, "sglang_router_0.3.2"))}
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
BUILTIN = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped"}


def names_in(path) -> set[str]:  # noqa: ANN001
    """Sample names of an exposition, and of every family its HELP/TYPE lines describe (a counter the gateway
    registered but has not incremented yet, a histogram's _bucket/_sum/_count)."""
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            out |= {canonical_name(name + s) for s in (("_bucket", "_sum", "_count") if kind == "histogram" else ("",))}
        elif line and not line.startswith("#"):
            out.add(canonical_name(re.split(r"[{\s]", line, maxsplit=1)[0]))
    return out


def gateway_names(gateway: str) -> set[str]:
    return set().union(*(names_in(p) for p in GATEWAY_CAPTURES[gateway]))


def known_metrics(files: dict[str, str]) -> set[str]:
    names = set(BUILTIN)
    # The SGLang and gateway expositions (not the router's 500 body, nor the accelerator exporters).
    for path in [*FIXTURES.glob("sglang_0.5.23_*.txt"), *FIXTURES.glob("sglang_router_*metrics.txt")]:
        names |= names_in(path)
    names |= gateway_names(N.GATEWAY_SMG) | gateway_names(N.GATEWAY_SGLANG_ROUTER)
    families = [*S.SLI_FAMILIES.values(), N.KV_TRANSFER_LATENCY]
    names |= {f + s for f in families for s in ("", "_bucket", "_sum", "_count")}
    names |= {*N.COUNTERS.values(), *N.GAUGES.values()}
    # Everything the sidecar exports (counters are exposed with `_total`).
    names |= {v + s for k, v in vars(N).items() if k.startswith("M_") and isinstance(v, str) for s in ("", "_total")}
    for rel, text in files.items():
        if rel.startswith("alerts/rules/"):
            names |= {r["record"] for g in yaml.safe_load(text)["groups"] for r in g["rules"] if "record" in r}
    return names


def all_queries(files: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for rel, text in sorted(files.items()):
        if rel.startswith("alerts/rules/"):
            out += [(rel, r["expr"]) for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
        elif rel.startswith("dashboards/") and rel.endswith(".json"):
            out += [(rel, q) for q in panel_queries(json.loads(text))]
    return out


def grafana_to_promql(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "x", expr)


def test_every_dashboard_has_a_datasource_variable_and_panels_name_their_metrics(small_files):
    for rel, text in small_files.items():
        if not (rel.startswith("dashboards/") and rel.endswith(".json")):
            continue
        data = json.loads(text)
        assert any(v["type"] == "datasource" for v in data["templating"]["list"]), rel
        for panel in data["panels"]:
            if panel.get("type") == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (rel, panel["title"])
            shown = set().union(*(metric_names(t["expr"]) for t in panel["targets"]))
            assert shown and all(m in panel["description"] for m in shown), (rel, panel["title"])


def test_every_query_parses_with_promtool(small_files, tmp_path, prometheus_build):
    queries = all_queries(small_files)
    assert len(queries) > 200
    rules = [{"record": f"validate:query:q{i}", "expr": grafana_to_promql(q)} for i, (_, q) in enumerate(queries)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml_text({"groups": [{"name": "validate", "rules": rules}]}), encoding="utf-8")
    res = run_tool(prometheus_build.tool, "check", "rules", "--lint=none", str(path))
    assert res.returncode == 0, res.stdout + res.stderr


def test_no_query_names_an_unknown_metric(small_files):
    known = known_metrics(small_files)
    unknown = {(rel, name) for rel, q in all_queries(small_files) for name in metric_names(q)
               if name not in known and not name.startswith("accelerator_")}
    assert not unknown


@pytest.mark.parametrize("expr,expected", [
    ('sum by (le) (rate(sglang:x_bucket{a="b"}[5m]))', {"sglang:x_bucket"}),
    ("a / on (deployment) group_left b offset 5m > bool 0.5", {"a", "b"}),
    ('{__name__=~"sglang:.+"} unless up', {"up"}),
    ('histogram_quantile(0.99, sum by (le) (rate(m_bucket{d="$deployment"}[$__rate_interval])))', {"m_bucket"}),
])
def test_metric_name_extraction(expr, expected):
    assert metric_names(expr) == expected


def test_the_guard_catches_a_misspelt_metric(small_files):
    known = known_metrics(small_files)
    assert "sglang:num_running_requests" not in known
    assert "smg_workers_overloaded" not in known  # in conventions, described in the binary, in no capture


def test_each_deployments_rules_read_only_its_gateway_versions_names(small_config, small_files):
    """kimi-pd runs smg 1.13, llama-unified sglang-router 0.3.2 (tests/generate/fixtures/small.yaml)."""
    seen = {}
    for dep in small_config.deployments:
        doc = yaml.safe_load(small_files[f"alerts/{N.rules_file(dep.name)}"])
        read = {n for g in doc["groups"] for r in g["rules"] for n in metric_names(r["expr"]) if n.startswith("smg_")}
        assert read and read <= gateway_names(dep.gateway), (dep.name, sorted(read - gateway_names(dep.gateway)))
        seen[dep.gateway] = read
    assert set(seen) == {N.GATEWAY_SMG, N.GATEWAY_SGLANG_ROUTER}
    assert seen[N.GATEWAY_SMG] - gateway_names(N.GATEWAY_SGLANG_ROUTER)  # the 1.13 deployment uses 1.13 families


def test_the_gateway_dashboard_row_uses_1_13_families_and_keeps_panels_that_work_on_0_3_2(small_files):
    data = json.loads(small_files["dashboards/sglang-deployment.json"])
    rows = sorted(p["gridPos"]["y"] for p in data["panels"] if p.get("type") == "row")
    top = next(p["gridPos"]["y"] for p in data["panels"] if p.get("type") == "row" and p["title"].startswith("Gateway"))
    bottom = next((y for y in rows if y > top), 10**6)
    panels = [p for p in data["panels"] if p.get("type") != "row" and top < p["gridPos"]["y"] < bottom]
    old = gateway_names(N.GATEWAY_SGLANG_ROUTER)
    on_old = [p["title"] for p in panels if any(m in old for t in p["targets"] for m in metric_names(t["expr"]))]
    only_new = [p["title"] for p in panels if "smg 1.13 only" in p["description"]]
    assert len(panels) == 8 and len(on_old) >= 5 and len(only_new) >= 2, [p["title"] for p in panels]
    shown = {m for p in panels for t in p["targets"] for m in metric_names(t["expr"])}
    assert {"smg_pd_ttft_seconds_bucket", "smg_worker_cb_state", "smg_worker_overload_shed_total",
            "smg_admission_queue_depth", "smg_http_responses_total"} <= shown
