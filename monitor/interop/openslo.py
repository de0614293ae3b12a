"""OpenSLO v1 interop: our deployments as `kind: SLO` documents, and OpenSLO files read back as a Config.

One file per deployment (`openslo/<deployment>.yaml`), one document per SLI (the availability SLO's
indicator counts `bad` requests over `total`, from the gateway's counters). The indicator is a
`ratioMetric` over SGLang's histogram counters (`counter: true`: the OpenSLO tool takes the
rates): good = `_bucket{le="<target>"}` with the exact `le` string prometheus_client writes,
total = `_count`. What OpenSLO has no field for (targets, model, hardware, mode, buckets, the exact
target of an interpolated SLI) rides in `slo-monitor.io/*` annotations so a round trip loses
nothing; a foreign OpenSLO file without them still yields deployments (no targets, defaults).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from monitor.config import Config, ConfigError, Deployment, format_validation_error
from monitor.conventions.names import AVAILABILITY_SLI, GOODPUT_REQUESTS_TOTAL
from monitor.conventions.slis import GOODPUT_SLI, SLI_FAMILIES
from monitor.conventions.units import format_le, parse_duration
from monitor.escaping import excerpt, shorten, yaml_text
from monitor.promql import (
    Expr,
    aggregate,
    binop,
    call,
    chain,
    format_number,
    matched_select,
    matched_selector,
    selector,
)
from monitor.slo_plan import (
    AvailabilityPlan,
    GoodputPlan,
    availability_plan,
    engine_matchers,
    goodput_plan,
    resolve_sli,
)

API_VERSION = "openslo/v1"
ANN = "slo-monitor.io/"
A_TARGET = ANN + "target-seconds"
A_DEPLOYMENT = ANN + "deployment"  # JSON: the deployment's non-SLO fields (model, targets, ...)
# Deployment fields carried in the A_DEPLOYMENT annotation (everything but the SLO numbers).
CARRIED = ("model", "hardware", "cards", "mode", "dataset", "input_tokens", "output_tokens", "prefix_cache_hit",
           "image_inputs", "quantization", "approximate", "buckets", "baseline", "targets", "launch",
           "warnings", "labels")
_LE_RE = re.compile(r'\ble\s*=\s*"([^"]*)"')
_DNS = re.compile(r"[^a-z0-9-]+")


def object_name(*parts: str) -> str:
    """An RFC 1123 label (OpenSLO `metadata.name`): lowercase alphanumerics and '-', <= 63 chars."""
    name = _DNS.sub("-", "-".join(parts).lower()).strip("-")
    return name[:63].rstrip("-") or "slo"


def _carried(dep: Deployment) -> dict[str, Any]:
    data = dep.model_dump(mode="json", exclude_defaults=True, include=set(CARRIED))
    if "targets" in data:
        # Never write a bearer token into a file meant to be shared.
        data["targets"] = [t.model_dump(mode="json", exclude_none=True, exclude={"bearer_token"})
                           for t in dep.targets]
    return data


def slo_document(dep: Deployment, sli: str) -> dict[str, Any]:
    plan = resolve_sli(dep, sli, approximate=True)
    eq = {"deployment": dep.name}
    regex, neq, nregex = engine_matchers(dep, plan.record.roles)
    # An interpolated target has no bucket of its own: count the edge below it (conservative).
    good_le = plan.le if not plan.approximate or plan.lower > 0 else format_le(plan.upper)
    good = selector(plan.family + "_bucket", {**eq, "le": good_le}, regex, neq, nregex)
    total = selector(plan.family + "_count", eq, regex, neq, nregex)
    pct = format_number(round(dep.objective * 100, 6))
    annotations = {A_TARGET: format_number(plan.target), A_DEPLOYMENT: json.dumps(_carried(dep), sort_keys=True)}
    if plan.approximate:
        annotations[ANN + "approximation"] = plan.approximation_note()
    return {
        "apiVersion": API_VERSION,
        "kind": "SLO",
        "metadata": {
            "name": object_name(dep.name, sli),
            "displayName": f"{dep.name} {plan.title}",
            "labels": {"deployment": dep.name, "sli": sli},
            "annotations": annotations,
        },
        "spec": {
            "description": f"{pct}% of requests of {dep.name} ({dep.model} on {dep.hardware}) with "
                           f"{plan.long_name} <= {format_number(plan.target)}s over {dep.period}",
            "service": dep.name,
            "indicator": {
                "metadata": {"name": object_name(dep.name, sli, "sli")},
                "spec": {"ratioMetric": {
                    "counter": True,
                    "good": {"metricSource": {"type": "Prometheus", "spec": {"query": good}}},
                    "total": {"metricSource": {"type": "Prometheus", "spec": {"query": total}}},
                }},
            },
            "timeWindow": [{"duration": dep.period, "isRolling": True}],
            "budgetingMethod": "Occurrences",
            "objectives": [{"displayName": f"{plan.title} <= {format_number(plan.target)}s",
                            "target": dep.objective}],
        },
    }


def _counter_document(dep: Deployment, plan: GoodputPlan | AvailabilityPlan, description: str,
                      queries: dict[str, str], objective: str) -> dict[str, Any]:
    """An SLO over counters (`queries`: good or bad, and total) with no latency target of its own."""
    return {
        "apiVersion": API_VERSION,
        "kind": "SLO",
        "metadata": {
            "name": object_name(dep.name, plan.sli),
            "displayName": f"{dep.name} {plan.title}",
            "labels": {"deployment": dep.name, "sli": plan.sli},
            "annotations": {A_DEPLOYMENT: json.dumps(_carried(dep), sort_keys=True)},
        },
        "spec": {
            "description": description,
            "service": dep.name,
            "indicator": {
                "metadata": {"name": object_name(dep.name, plan.sli, "sli")},
                "spec": {"ratioMetric": {"counter": True, **{
                    key: {"metricSource": {"type": "Prometheus", "spec": {"query": q}}} for key, q in queries.items()}}},
            },
            "timeWindow": [{"duration": dep.period, "isRolling": True}],
            "budgetingMethod": "Occurrences",
            "objectives": [{"displayName": objective, "target": plan.objective}],
        },
    }


def goodput_document(dep: Deployment, plan: GoodputPlan) -> dict[str, Any]:
    """The goodput SLO over the sidecar's two request-log counters (good = met every target)."""
    eq = {"deployment": dep.name}
    return _counter_document(
        dep, plan, f"{dep.name}: {plan.describe()} over {dep.period}, counted per request from SGLang's request log "
        "by slo-monitor", {"good": selector(plan.good_metric, eq), "total": selector(plan.total_metric, eq)},
        "requests meeting every target")


def _counter_sum(selectors: list[Expr]) -> str:
    """One cumulative count from several counters (a counter the gateway has not created yet counts 0)."""
    if len(selectors) == 1:
        return str(selectors[0])
    return str(chain("+", [binop(aggregate("sum", s), "or", call("vector", 0)) for s in selectors]))


def availability_document(dep: Deployment, plan: AvailabilityPlan) -> dict[str, Any]:
    """The availability SLO over the gateway's counters (failed requests as `bad`), per its version."""
    router = {"deployment": dep.name, "role": "router"}
    spec = plan.series
    return _counter_document(
        dep, plan, f"{dep.name}: {plan.describe()} over {dep.period}",
        {"bad": _counter_sum([matched_select(m.family, router, m.matchers) for m in spec.bad]),
         "total": matched_selector(spec.total.family, router, spec.total.matchers)},
        "requests without a server-side failure")


def render_openslo(config: Config) -> dict[str, str]:
    """Relative path -> YAML text; deployments without SLI targets get no file."""
    files: dict[str, str] = {}
    for dep in config.deployments:
        docs = [slo_document(dep, sli) for sli in dep.slis]
        goodput = goodput_plan(dep)
        if goodput is not None:
            docs.append(goodput_document(dep, goodput))
        availability = availability_plan(dep)
        if availability is not None:
            docs.append(availability_document(dep, availability))
        if docs:
            files[f"openslo/{dep.name}.yaml"] = "---\n".join(yaml_text(d) for d in docs)
    return files


# --- reading --------------------------------------------------------------------------------------
def _err(source: str, i: int, doc: Any, msg: str) -> ConfigError:
    name = doc.get("metadata", {}).get("name") if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) else None
    shown = f" ({excerpt(name, 60)})" if name else ""
    return ConfigError(f"{source}: document {i + 1}{shown}: {shorten(msg)}")


def _sli_of(query: str) -> str | None:
    for sli, family in SLI_FAMILIES.items():
        base = family.split(":", 1)[1]
        if re.search(r"sglang[:_]" + re.escape(base) + r"_bucket\b", query):
            return sli
    return None


def _query(ratio: dict[str, Any], key: str) -> str:
    node = ratio.get(key) or {}
    src = node.get("metricSource", node) if isinstance(node, dict) else {}
    spec = src.get("spec", {}) if isinstance(src, dict) else {}
    q = spec.get("query") if isinstance(spec, dict) else None
    if not isinstance(q, str):
        raise ValueError(f"indicator.spec.ratioMetric.{key}.metricSource.spec.query is missing")
    return q


def _objective(spec: dict[str, Any]) -> float:
    objs = spec.get("objectives")
    if not isinstance(objs, list) or not objs or not isinstance(objs[0], dict):
        raise ValueError("spec.objectives must list at least one objective")
    o = objs[0]
    if "target" in o:
        return float(o["target"])
    if "targetPercent" in o:
        return float(o["targetPercent"]) / 100.0
    raise ValueError("spec.objectives[0] needs `target` (0..1) or `targetPercent`")


def _period(spec: dict[str, Any]) -> str | None:
    tw = spec.get("timeWindow")
    if isinstance(tw, list) and tw and isinstance(tw[0], dict) and tw[0].get("duration"):
        d = str(tw[0]["duration"])
        parse_duration(d)
        return d
    return None


def config_from_openslo(docs: Iterable[Any], source: str) -> Config:
    """A Config from OpenSLO v1 documents (`kind: SLO`, indicators inline or by `indicatorRef`)."""
    docs = list(docs)
    indicators: dict[str, dict[str, Any]] = {}
    for i, doc in enumerate(docs):
        version = doc.get("apiVersion") if isinstance(doc, dict) else None
        if not isinstance(version, str) or not version.startswith("openslo"):
            raise _err(source, i, doc, "not an OpenSLO document (expected `apiVersion: openslo/v1`); a "
                                       "slo-monitor config is a single YAML document with `deployments:`")
        if doc.get("kind") == "SLI":
            indicators[str((doc.get("metadata") or {}).get("name"))] = doc
    deps: dict[str, dict[str, Any]] = {}
    objectives: dict[str, set[float]] = {}
    for i, doc in enumerate(docs):
        if doc.get("kind") != "SLO":
            continue  # Service, AlertPolicy, ... carry nothing the sidecar needs
        meta = doc.get("metadata") or {}
        spec = doc.get("spec") or {}
        labels = meta.get("labels") or {}
        ann = meta.get("annotations") or {}
        try:
            indicator = spec.get("indicator")
            if indicator is None and spec.get("indicatorRef"):
                ref = str(spec["indicatorRef"])
                if ref not in indicators:
                    raise ValueError(f"indicatorRef {excerpt(ref)} names no `kind: SLI` document in the file")
                indicator = indicators[ref]
            ratio = ((indicator or {}).get("spec") or {}).get("ratioMetric")
            if not isinstance(ratio, dict):
                raise ValueError("only `indicator.spec.ratioMetric` (good/total over SGLang buckets) is supported")
            _query(ratio, "total")
            # The availability SLO counts failures (`bad`); every other SLO counts good events.
            good = "" if labels.get("sli") == AVAILABILITY_SLI else _query(ratio, "good")
            if labels.get("sli") == AVAILABILITY_SLI:
                sli: str | None = AVAILABILITY_SLI
            elif labels.get("sli") == GOODPUT_SLI or GOODPUT_REQUESTS_TOTAL in good:
                sli = GOODPUT_SLI
            else:
                sli = labels.get("sli") if labels.get("sli") in SLI_FAMILIES else _sli_of(good)
            if sli is None:
                raise ValueError(f"cannot tell the SLI: label `sli` is missing and the good query names no "
                                 f"SGLang latency histogram bucket: {excerpt(good)}")
            if sli in (GOODPUT_SLI, AVAILABILITY_SLI):
                target = 0.0  # goodput and availability have no latency target of their own
            elif A_TARGET in ann:
                target = float(ann[A_TARGET])
            else:
                m = _LE_RE.search(good)
                if not m or m.group(1) in ("", "+Inf"):
                    raise ValueError(f"the good query has no finite `le` threshold: {excerpt(good)}")
                target = float(m.group(1))
            objective = _objective(spec)
            period = _period(spec)
        except (ValueError, TypeError) as err:
            raise _err(source, i, doc, str(err)) from None
        name = str(labels.get("deployment") or spec.get("service") or meta.get("name"))
        dep = deps.get(name)
        if dep is None:
            dep = {"name": name}
            if A_DEPLOYMENT in ann:
                try:
                    dep.update(json.loads(ann[A_DEPLOYMENT]))
                except (ValueError, TypeError) as err:
                    raise _err(source, i, doc, f"annotation {A_DEPLOYMENT} is not JSON: {err}") from None
            deps[name] = dep
        if period:
            dep["period"] = period
        if sli == GOODPUT_SLI:
            dep["goodput_objective"] = objective
            continue
        if sli == AVAILABILITY_SLI:
            dep["availability_objective"] = objective
            continue
        dep[f"{sli}_target_seconds"] = target
        objectives.setdefault(name, set()).add(objective)
    for name, dep in deps.items():
        objs = objectives.get(name)
        if not objs:
            continue
        # One objective per deployment here: keep the strictest, and say so when they differed.
        dep["objective"] = max(objs)
        if len(objs) > 1:
            dep.setdefault("warnings", []).append(
                f"{source}: SLOs of {name} had objectives {sorted(objs)}; using the strictest, {max(objs)}")
    data = {"deployments": list(deps.values())}
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, data)) from None
