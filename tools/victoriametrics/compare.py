"""The same SLO numbers from VictoriaMetrics (vmalert), Prometheus 3 and the sidecar, side by side (issue #35 item 3).

Both engines hold the same samples (the vmagents remote-write every scrape to both), so what differs is the engine:
- `recorded`: each recording rule's stored series, VictoriaMetrics' (vmalert's evaluations, aligned to the interval,
  shifted back by -rule.evalDelay, reading the previous rules' results back from storage) against Prometheus 3's;
- `expression`: each rule's expression evaluated by both query engines at the same instants (MetricsQL's `rate()`
  without extrapolation against PromQL's), which isolates the query language from vmalert's timing;
- `firing`: when each alert first fired on each engine (their ALERTS series) and when Alertmanager paged;
- `sidecar`: the sidecar's own burn rate per window against the recorded one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.victoriametrics.fleet import Fleet

STEP = 2.0  # seconds: the fleet's evaluation interval


@dataclass
class Diff:
    name: str
    points: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0  # |a - b| / max(|a|, |b|), where either is non-zero
    at: float | None = None  # when the largest relative difference was seen
    values: tuple[float, float] | None = None
    rels: list[float] = field(default_factory=list)

    @property
    def median_rel(self) -> float:
        return sorted(self.rels)[len(self.rels) // 2] if self.rels else 0.0

    def add(self, t: float, a: float, b: float) -> None:
        if not (math.isfinite(a) and math.isfinite(b)):
            return
        self.points += 1
        d = abs(a - b)
        self.max_abs = max(self.max_abs, d)
        scale = max(abs(a), abs(b))
        rel = d / scale if scale > 1e-12 else 0.0
        self.rels.append(rel)
        if rel > self.max_rel or self.at is None:
            self.max_rel, self.at, self.values = max(rel, self.max_rel), t, (a, b)


@dataclass
class Comparison:
    deployment: str
    start: float
    end: float
    recorded: list[Diff] = field(default_factory=list)
    expression: list[Diff] = field(default_factory=list)
    sidecar: list[Diff] = field(default_factory=list)
    firing: dict[str, dict[str, float | None]] = field(default_factory=dict)  # alert -> engine -> first firing
    # alert -> engine -> first instant its condition, every recording it reads inlined, held: the query language
    # alone, without vmalert's (or Prometheus's) evaluation timing and the chain of recordings between.
    condition: dict[str, dict[str, float | None]] = field(default_factory=dict)


_REFERENCE = re.compile(r"(slo_monitor:[a-z0-9_:]+)\{([^}]*)\}")


def inline(expr: str, records: list[dict[str, Any]], depth: int = 8) -> str:
    """`expr` with every recorded series it reads replaced by the recording's own expression, recursively: the
    alert's whole condition as one query. A reference picks the recording of that name whose `labels` agree with
    the selector's equality matchers."""
    def one(m: re.Match[str]) -> str:
        name, matchers = m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        for r in records:
            labels = r.get("labels") or {}
            if r["record"] == name and all(matchers.get(k, v) == v for k, v in labels.items()):
                return f"({r['expr']})"
        return m.group(0)

    for _ in range(depth):
        new = _REFERENCE.sub(one, expr)
        if new == expr:
            return expr
        expr = new
    raise ValueError(f"recordings nested deeper than {depth}: {expr[:200]}")


def _alert_key(name: str, labels: dict[str, str]) -> str:
    return " ".join(x for x in (name, labels.get("sli", ""), labels.get("long_window", ""),
                                labels.get("short_window", ""), labels.get("role", "")) if x)


def rules_of(gen: Path, deployment: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load((gen / "alerts" / "rules" / f"{deployment}.rules.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def _series(result: list[dict[str, Any]]) -> dict[tuple, dict[float, float]]:
    out: dict[tuple, dict[float, float]] = {}
    for r in result:
        key = tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__"))
        out[key] = {round(float(t), 3): float(v) for t, v in r["values"]}
    return out


def _compare(name: str, a: dict[tuple, dict[float, float]], b: dict[tuple, dict[float, float]]) -> Diff:
    d = Diff(name)
    for key in a.keys() & b.keys():
        for t in a[key].keys() & b[key].keys():
            d.add(t, a[key][t], b[key][t])
    return d


def _range(fleet: Fleet, engine: str, expr: str, start: float, end: float) -> dict[tuple, dict[float, float]]:
    return _series(fleet.query_range(engine, expr, start, end, STEP))


def compare(fleet: Fleet, deployment: str, start: float, end: float) -> Comparison:
    start, end = math.ceil(start), math.floor(end)
    out = Comparison(deployment, start, end)
    rules = rules_of(fleet.gen, deployment)
    records = [r for r in rules if "record" in r]
    names = sorted({r["record"] for r in records})
    for name in names:
        sel = f'{{__name__="{name}",deployment="{deployment}"}}'
        out.recorded.append(_compare(name, _range(fleet, "vm", sel, start, end), _range(fleet, "prom", sel, start, end)))
    for name in names:
        # Each expression once per record name and its labels; the same name with other labels is another row.
        for r in (r for r in records if r["record"] == name):
            label = ",".join(f"{k}={v}" for k, v in sorted((r.get("labels") or {}).items()))
            expr = r["expr"]
            vm, prom = _range(fleet, "vm", expr, start, end), _range(fleet, "prom", expr, start, end)
            out.expression.append(_compare(f"{name}{{{label}}}" if label else name, vm, prom))
    # The sidecar's windows are wall-clock (its 5m is 300 s) while the rules here are compressed: compare its 5m SLI
    # with each engine's SLI from the rules' own expressions over a real 5 minutes (on a fleet younger than that,
    # both cover all of it).
    for sli in ("tpot", "ttft"):
        good = next((r["expr"] for r in records if r["record"] == "slo_monitor:sli_good:rate5m"
                     and (r.get("labels") or {}).get("sli") == sli), None)
        total = next((r["expr"] for r in records if r["record"] == "slo_monitor:sli_total:rate5m"
                      and (r.get("labels") or {}).get("sli") == sli), None)
        if good is None or total is None:
            continue
        real = re.compile(r"\[[0-9]+(ms|s|m)\]")
        ratio = f"({real.sub('[5m]', good)}) / ({real.sub('[5m]', total)})"
        side = _range(fleet, "vm", f'slo_monitor_sli_good_ratio{{deployment="{deployment}",sli="{sli}",window="5m"}}',
                      start, end)
        key = (("deployment", deployment),)
        side = {key: next(iter(side.values()), {})}
        for engine in ("vm", "prom"):
            eng = {key: next(iter(_range(fleet, engine, ratio, start, end).values()), {})}
            name = "VictoriaMetrics" if engine == "vm" else "Prometheus 3"
            out.sidecar.append(_compare(f"{sli} SLI over 5m: the sidecar against {name}", side, eng))
    for engine in ("vm", "prom"):
        res = fleet.query_range(engine, f'ALERTS{{deployment="{deployment}",alertstate="firing"}}', start, end, STEP)
        for r in res:
            first = min(float(t) for t, _ in r["values"])
            out.firing.setdefault(_alert_key(r["metric"]["alertname"], r["metric"]), {"vm": None, "prom": None}
                                  )[engine] = first
    for r in rules:
        if not r.get("alert", "").startswith("SLOErrorBudgetBurn"):
            continue
        cond = inline(r["expr"], records)
        key = _alert_key(r["alert"], r.get("labels") or {})
        for engine in ("vm", "prom"):
            res = fleet.query_range(engine, cond, start, end, STEP)
            times = [float(t) for x in res for t, _ in x["values"]]
            out.condition.setdefault(key, {"vm": None, "prom": None})[engine] = min(times) if times else None
    return out
