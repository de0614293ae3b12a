"""Every query of every generated dashboard, and of the OpenSLO and Sloth specs, parses with a real PromQL
parser: promtool's (`promtool check rules` over the queries written as recording rules), on Prometheus 2.42
and 3.x. The committed dashboards/*.json are read as they are; the --histograms nhcb dashboards (native
histogram functions, which 2.42 does not know) are built here and checked by Prometheus 3 only. A missing
promtool fails these tests (tests/components.py), and a planted broken query must fail them too.

Grafana's variables are replaced by values PromQL accepts where Grafana puts them: the interval variables by
durations, any other variable (a label value inside a string literal) by a plain word. A query variable is
Grafana's `label_values(<selector>, <label>)` or `query_result(<query>)`: the PromQL inside is checked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from monitor.config import load_config
from monitor.escaping import yaml_text
from monitor.generate.dashboards import HISTOGRAM_DASHBOARDS, dashboards
from monitor.generate.dashboards.common import panel_queries
from monitor.interop.openslo import render_openslo
from monitor.interop.sloth import render_sloth
from tests.components import Build
from tests.generate.conftest import SMALL, run_tool

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "dashboards").glob("*.json"))
EXAMPLE = ROOT / "examples" / "kimi-k2.6-ascend.yaml"
DURATIONS = {"__rate_interval": "1m", "__interval": "30s", "__range": "6h", "__range_s": "21600"}
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_LABEL_VALUES = re.compile(r"label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)", re.DOTALL)
_QUERY_RESULT = re.compile(r"query_result\((.*)\)", re.DOTALL)


def substitute(query: str) -> str:
    """`query` with each Grafana variable replaced by a legal value: a duration for the interval variables,
    a word for the others (they stand inside label-matcher strings)."""
    return _VARIABLE.sub(lambda m: DURATIONS.get(m.group(1) or m.group(2), "value"), query)


def variable_query(query: str) -> str | None:
    """The PromQL inside a Grafana query variable (None for `label_values(label)`, which has none)."""
    for pattern in (_LABEL_VALUES, _QUERY_RESULT):
        m = pattern.fullmatch(query.strip())
        if m:
            return m.group(1)
    return None


def dashboard_queries(name: str, data: dict) -> list[tuple[str, str]]:
    """(where, query) of every panel target, annotation and query variable of a dashboard."""
    out = [(f"{name} panel query", q) for q in panel_queries(data)]
    for var in data.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        inner = variable_query(query)
        assert inner is not None or re.fullmatch(r"label_values\(\w+\)", query), (name, var["name"], query)
        if inner is not None:
            out.append((f"{name} variable ${var['name']}", inner))
    return out


def parse_with_promtool(build: Build, queries: list[tuple[str, str]], tmp_path: Path):
    """Run `promtool check rules` over `queries` as recording rules q0, q1, ... (Grafana variables substituted)."""
    rules = [{"record": f"check:query:q{i}", "expr": substitute(q)} for i, (_, q) in enumerate(queries)]
    path = tmp_path / f"queries-{build.name}.rules.yml"
    path.write_text(yaml_text({"groups": [{"name": "dashboard-queries", "rules": rules}]}), encoding="utf-8")
    return run_tool(build.tool, "check", "rules", "--lint=none", str(path))


def _failures(res, queries: list[tuple[str, str]]) -> str:
    out = res.stdout + res.stderr
    named = {int(i) for i in re.findall(r'"check:query:q(\d+)"', out)}
    return out + "".join(f"\nq{i} ({queries[i][0]}): {queries[i][1]}" for i in sorted(named))


def committed_dashboard_queries() -> list[tuple[str, str]]:
    assert COMMITTED, "no dashboards/*.json: run `slo-monitor generate`"
    return [wq for path in COMMITTED for wq in dashboard_queries(path.name, json.loads(path.read_text("utf-8")))]


def test_every_committed_dashboard_query_parses(prometheus_build: Build, tmp_path: Path):
    queries = committed_dashboard_queries()
    assert len(queries) > 100 and {p.name for p in COMMITTED} >= {"slo-overview.json", "sglang-deployment.json",
                                                                  "accelerators.json", "slo-incident.json"}
    assert any(w.endswith("variable $node") for w, _ in queries)  # the query variables are in too
    res = parse_with_promtool(prometheus_build, queries, tmp_path)
    assert res.returncode == 0, _failures(res, queries)
    assert f"SUCCESS: {len(queries)} rules found" in res.stdout, res.stdout


def test_every_nhcb_dashboard_query_parses_with_prometheus_3(prometheus_build: Build, tmp_path: Path):
    """The native-histogram dashboards use histogram_avg and friends: Prometheus 3's parser reads them; 2.42's is
    asked only to refuse them for what they are (an unknown function), not for a syntax error."""
    config = load_config(EXAMPLE)
    built = dashboards(config, nhcb=True)
    queries = [wq for name in sorted(HISTOGRAM_DASHBOARDS) for wq in dashboard_queries(name, json.loads(built[name]))]
    assert any("histogram_avg(" in q for _, q in queries)
    res = parse_with_promtool(prometheus_build, queries, tmp_path)
    if prometheus_build.major >= 3:
        assert res.returncode == 0, _failures(res, queries)
    else:
        assert res.returncode != 0 and 'unknown function with name "histogram_avg"' in res.stdout + res.stderr


def test_every_openslo_and_sloth_query_parses(prometheus_build: Build, tmp_path: Path):
    config = load_config(SMALL)
    queries = []
    for rel, text in {**render_openslo(config), **render_sloth(config)}.items():
        queries += [(rel, q) for doc in yaml.safe_load_all(text) for q in _queries_in(doc)]
    assert any("sloth/" in w for w, _ in queries) and any("openslo/" in w for w, _ in queries)
    # Sloth's window placeholder becomes the window Sloth writes there.
    queries = [(w, q.replace("{{.window}}", "5m")) for w, q in queries]
    res = parse_with_promtool(prometheus_build, queries, tmp_path)
    assert res.returncode == 0, _failures(res, queries)


def _queries_in(node) -> list[str]:  # noqa: ANN001
    """Every `query`, `error_query` and `total_query` string of a spec document."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k in ("query", "error_query", "total_query") and isinstance(v, str)] + [
            q for v in node.values() for q in _queries_in(v)]
    if isinstance(node, list):
        return [q for v in node for q in _queries_in(v)]
    return []


@pytest.mark.parametrize("broken", [
    "sum(rate(sglang:num_requests_total[$__rate_interval])",  # a parenthesis short
    'histogram_quantile(0.99, sum by (le) (rate(m_bucket{deployment="$deployment"}[5m)))',  # a bracket crossed
    "histogram_quantil(0.99, m)",  # no such function
    "a / on (deployment) group_lft b",  # a misspelt modifier
    'm{deployment=$deployment}',  # a label value outside a string
])
def test_a_planted_broken_query_fails_the_check_and_is_named(broken: str, prometheus_build: Build, tmp_path: Path):
    queries = [*committed_dashboard_queries(), ("planted", broken)]
    res = parse_with_promtool(prometheus_build, queries, tmp_path)
    assert res.returncode != 0, res.stdout
    assert f"q{len(queries) - 1} (planted)" in _failures(res, queries)


def test_the_substitution_leaves_a_query_promql_would_read():
    q = 'sum(rate(m{deployment=~"$deployment",node="${node}"}[$__rate_interval])) / $__range_s'
    assert substitute(q) == 'sum(rate(m{deployment=~"value",node="value"}[1m])) / 21600'
    assert variable_query("label_values(accelerator_health{deployment=~\"$deployment\"}, node)") == \
        'accelerator_health{deployment=~"$deployment"}'
    assert variable_query('query_result(slo_monitor:target{sli="tpot"})') == 'slo_monitor:target{sli="tpot"}'
    assert variable_query("label_values(deployment)") is None
