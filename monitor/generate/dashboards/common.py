"""Shared grafanalib helpers: datasource variable, panel factories that name their metrics, grid layout."""

from __future__ import annotations

import json
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    Dashboard,
    GridPos,
    Heatmap,
    RowPanel,
    Stat,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

from monitor.config import Config
from monitor.conventions.slis import ENGINE_ROLES, REQUEST_ROLES, SLI, SLI_BY_KEY, SLI_RECORDS
from monitor.feeds import feed
from monitor.promql import Expr, Matcher, bucket_rates, histogram_mean, histogram_quantile, names_of

DS = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
RATE = "$__rate_interval"
# Matchers of the selected deployment: every engine server (load gauges, PD failures), and the servers
# that answer requests (request and token counters); each latency SLI's own from its feed (`sli_matchers`).
# The dashboards serve every deployment, so the feeds are the config-free ones (`monitor.feeds`).
# Matchers are (label, op, value) data; `monitor.promql` writes them into selectors.
Matchers = tuple[Matcher, ...]
D: Matchers = (("deployment", "=", "$deployment"),)


def feed_matchers(roles: tuple[str, ...]) -> Matchers:
    """The selected deployment's matchers for series SGLang records on `roles`."""
    return (*D, *feed(None, roles).matchers)


def sli_matchers(sli: str) -> Matchers:
    return feed_matchers(SLI_BY_KEY[sli].roles)


def targeted(config: Config) -> list[SLI]:
    """The records some deployment of the config targets, in record order: the panels that set an SLI against
    its target (overview, incident) show these only, so an SLI no deployment targets adds none."""
    keys = {s for dep in config.deployments for s in dep.slis}
    return [sli for sli in SLI_RECORDS if sli.key in keys]


ENGINE = feed_matchers(ENGINE_ROLES)
REQUESTS = feed_matchers(REQUEST_ROLES)


def quantile(q: float, family: str, matchers: Matchers, by: tuple[str, ...] = (), nhcb: bool = False) -> Expr:
    """histogram_quantile of a latency family over the dashboard's rate interval, summed (by `by`): the classic
    `_bucket` series summed by le, or (--histograms nhcb) the native histogram with custom buckets itself;
    both interpolate linearly inside a bucket."""
    return histogram_quantile(q, family, matchers, RATE, by, nhcb)


def mean(family: str, matchers: Matchers, nhcb: bool = False) -> Expr:
    return histogram_mean(family, matchers, RATE, nhcb)


def distribution(family: str, matchers: Matchers, nhcb: bool = False) -> Expr:
    """Per-bucket rates for a heatmap: classic buckets by le, or the native histogram (Grafana draws its buckets)."""
    return bucket_rates(family, matchers, RATE, nhcb)


def label_values(selected: str, label: str) -> str:
    """A Grafana query variable's values: `label` of the series `selected` selects."""
    return f"label_values({selected}, {label})"


def query_result(expr: str) -> str:
    """A Grafana query variable holding the result of an instant query (its text, cut by the variable's regex)."""
    return f"query_result({expr})"


def datasource_var() -> Template:
    return Template(name="datasource", label="Data source", type="datasource", query="prometheus", default="Prometheus")


def query_var(name: str, label: str, query: str, multi: bool = False, hide: int = 0, regex: str = "") -> Template:
    return Template(name=name, label=label, query=query, dataSource=DS, multi=multi, includeAll=multi,
                    refresh=2, sort=1, hide=hide, regex=regex)


def target(expr: str, legend: str = "", ref: str = "A", fmt: str = "time_series", instant: bool = False) -> Target:
    return Target(expr=expr, legendFormat=legend, refId=ref, format=fmt, instant=instant, datasource=DS)


def _targets(queries: list[tuple[Expr, str]]) -> list[Target]:
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(queries)]


def describe(text: str, queries: list[tuple[Expr, str]]) -> str:
    names = sorted(names_of(*(q for q, _ in queries)))
    return f"{text} Metrics: {', '.join(names)}."


def timeseries(title: str, text: str, queries: list[tuple[Expr, str]], unit: str = "short",
               thresholds: list[dict[str, Any]] | None = None, **kw: Any) -> TimeSeries:
    extra: dict[str, Any] = {}
    if thresholds:
        kw.setdefault("thresholdsStyleMode", "line")
        extra = {"fieldConfig": {"defaults": {"thresholds": {"mode": "absolute", "steps": thresholds}}}}
    return TimeSeries(title=title, description=describe(text, queries), dataSource=DS, targets=_targets(queries),
                      unit=unit, legendDisplayMode="table", legendPlacement="bottom", tooltipMode="multi",
                      extraJson=extra, **kw)


def stat(title: str, text: str, queries: list[tuple[Expr, str]], unit: str = "short",
         thresholds: list[dict[str, Any]] | None = None, mappings: list[dict[str, Any]] | None = None) -> Stat:
    return Stat(title=title, description=describe(text, queries), dataSource=DS, targets=_targets(queries),
                format=unit, reduceCalc="lastNotNull", graphMode="area", colorMode="background",
                thresholds=thresholds or [{"color": "green", "value": None}], mappings=mappings or [])


def heatmap(title: str, text: str, expr: Expr, legend: str = "{{le}}") -> Heatmap:
    return Heatmap(title=title, description=describe(text, [(expr, "")]), dataSource=DS, dataFormat="tsbuckets",
                   targets=[target(expr, legend, fmt="heatmap")], hideZeroBuckets=True,
                   yBucketBound="upper")


def layout(rows: list[tuple[str, list[tuple[Any, int, int]]]]) -> list[Any]:
    """Rows of (panel, width, height) packed left to right on Grafana's 24-column grid."""
    panels: list[Any] = []
    y = 0
    for title, items in rows:
        panels.append(RowPanel(title=title, gridPos=GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        x, row_h = 0, 0
        for panel, w, h in items:
            if x + w > 24:
                x, y, row_h = 0, y + row_h, 0
            panel.gridPos = GridPos(h=h, w=w, x=x, y=y)
            x, row_h = x + w, max(row_h, h)
        y += row_h
    return panels + [p for _, items in rows for p, _, _ in items]


def dashboard(title: str, uid: str, description: str, variables: list[Template], rows: list, time_from: str = "now-6h",
              annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    dash = Dashboard(title=title, uid=uid, description=description, tags=["sglang", "slo", "slo-monitor"],
                     timezone="utc", time=Time(time_from, "now"), refresh="30s", schemaVersion=SCHEMA_VERSION,
                     templating=Templating(list=[datasource_var(), *variables]), panels=layout(rows),
                     editable=False, graphTooltip=1).auto_panel_ids()
    data = dash.to_json_data()
    if annotations:
        data["annotations"] = {"list": annotations}
    # Round-trip through the encoder so the result is plain JSON data (deterministic, comparable).
    return json.loads(json.dumps(data, cls=DashboardEncoder, sort_keys=True))


def panel_queries(data: dict[str, Any]) -> list[str]:
    """Every PromQL expression in a dashboard's panels and annotations (for validation)."""
    out = []
    for panel in data.get("panels", []):
        out += [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        for sub in panel.get("panels", []):
            out += [t["expr"] for t in sub.get("targets", []) if t.get("expr")]
    out += [a["expr"] for a in data.get("annotations", {}).get("list", []) if a.get("expr")]
    return out
