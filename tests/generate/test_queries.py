"""Every PromQL expression in every rule and dashboard parses and names only metrics that exist."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from monitor import conventions as c
from monitor.conventions import canonical_name
from monitor.escaping import yaml_text
from monitor.generate.dashboards.common import panel_queries
from monitor.promql import metric_names
from tests.generate.conftest import FIXTURES, PROMTOOL, need, run_tool

GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
BUILTIN = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped"}


def known_metrics(files: dict[str, str]) -> set[str]:
    names = set(BUILTIN)
    # The SGLang and router expositions (not the router's 500 body, nor the accelerator exporters).
    for path in [*FIXTURES.glob("sglang_0.5.23_*.txt"), *FIXTURES.glob("sglang_router_*metrics.txt")]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#"):
                names.add(canonical_name(re.split(r"[{\s]", line, maxsplit=1)[0]))
    families = [*c.SLI_FAMILIES.values(), c.KV_TRANSFER_LATENCY, *c.ROUTER_FAMILIES]
    names |= {f + s for f in families for s in ("", "_bucket", "_sum", "_count")}
    names |= {*c.COUNTERS.values(), *c.GAUGES.values()}
    # Everything the sidecar exports (counters are exposed with `_total`).
    names |= {v + s for k, v in vars(c).items() if k.startswith("M_") and isinstance(v, str) for s in ("", "_total")}
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


def test_every_query_parses_with_promtool(small_files, tmp_path):
    need(PROMTOOL)
    queries = all_queries(small_files)
    assert len(queries) > 200
    rules = [{"record": f"validate:query:q{i}", "expr": grafana_to_promql(q)} for i, (_, q) in enumerate(queries)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml_text({"groups": [{"name": "validate", "rules": rules}]}), encoding="utf-8")
    res = run_tool(PROMTOOL, "check", "rules", "--lint=none", str(path))
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
    assert "sglang:num_running_requests" not in known_metrics(small_files)
