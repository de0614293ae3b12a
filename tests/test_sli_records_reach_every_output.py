"""A new SLI is one record (`conventions.slis.SLI_RECORDS`): every output follows from it. A throw-away record is
added at runtime (`planted_record`: the project is imported again with one more record in conventions/slis.py
and its family in conventions/names.py, then put back), judged by the request log and on the emulator's own
family. A deployment that sets every record's target gets, for each SLI, its config field, sidecar state,
status-table cell, recording rules and alerts (its mean latency too), promtool cases, a dashboard row, a panel
against its target on the overview and incident dashboards, an OpenSLO document and a Sloth SLO, and a place in
what the goodput runbook and the sidecar's missed family list; a deployment that does not target it gets no rule
and no against-target panel for it (docs/architecture.md, "How to add an SLI"); the request log judges every record with `request_log=True` (its windows, the sidecar's request-log
families); the emulator observes every record's family and writes the request-log lines that judge it. An
output that lists SLIs by hand fails here as soon as a record is added."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml

# The throw-away record: a per-request SLI on a histogram SGLang does not have, of the first-token latency
# (the measure a request-log line and the emulator both give), judged by the request log. No launch flag:
# its edges are the record's; its target (the middle edge, 4 s) is below TTFT's (8 s), so a request can meet
# one and miss the other.
THROWAWAY = "throwaway"
THROWAWAY_FAMILY = "sglang:throwaway_first_token_seconds"
THROWAWAY_EDGES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
DEPLOYMENT = "every-sli"


def _throwaway_record(ns: dict[str, Any]) -> Any:
    """Built inside the planted conventions/slis.py (`ns`: its globals), with its own `SLI` and measures."""
    return ns["SLI"](THROWAWAY, THROWAWAY_FAMILY, THROWAWAY_EDGES, None, "Throwaway", "throw-away first-token "
                     "latency", "requests", ns["FIRST_TOKEN_LATENCY"], request_log=True)


def _ours(name: str) -> bool:
    return name == "monitor" or name.startswith("monitor.")


@contextmanager
def planted_record() -> Iterator[ModuleType]:
    """The project imported afresh with the throw-away record appended to SLI_RECORDS (before `check_records`
    and every view of the records), its family in LATENCY_FAMILIES; the modules imported before are put back
    on exit, so no other test sees the record."""
    saved = {k: v for k, v in sys.modules.items() if _ours(k)}
    for k in saved:
        del sys.modules[k]
    try:
        names = importlib.import_module("monitor.conventions.names")
        names.LATENCY_FAMILIES = names.LATENCY_FAMILIES | {THROWAWAY_FAMILY}  # type: ignore[misc]
        spec = importlib.util.find_spec("monitor.conventions.slis")
        assert spec is not None and spec.origin is not None
        src = Path(spec.origin).read_text(encoding="utf-8")
        anchor = "\ncheck_records(SLI_RECORDS)\n"
        assert src.count(anchor) == 1, "conventions/slis.py no longer checks its records once, at import"
        module = importlib.util.module_from_spec(spec)
        module.__dict__["__throwaway__"] = _throwaway_record
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
        planted = src.replace(anchor, "\nSLI_RECORDS = (*SLI_RECORDS, __throwaway__(globals()))" + anchor)
        exec(compile(planted, spec.origin, "exec"), module.__dict__)
        sys.modules["monitor.conventions"].slis = module  # type: ignore[attr-defined]
        yield module
    finally:
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


def _config(m: SimpleNamespace, request_log: Path) -> Any:
    # Each SLI's target on one of its default edges (exact on both sides).
    return m.parse_config({"deployments": [{
        "name": DEPLOYMENT, "mode": "pd-disaggregated", "goodput_objective": 0.9,
        **{s.target_field: s.buckets[len(s.buckets) // 2] for s in m.slis.SLI_RECORDS},
        "targets": [{"role": "prefill", "url": "http://10.0.0.1:30000/metrics"},
                    {"role": "decode", "url": "http://10.0.0.2:30000/metrics"},
                    {"role": "request-log", "path": str(request_log), "name": "log"}],
    }]})


@pytest.fixture(scope="module")
def m(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """The planted project's modules, its config (every record's target and a request-log target) and files."""
    with planted_record() as slis:
        ns = SimpleNamespace(slis=slis)
        ns.parse_config = importlib.import_module("monitor.config").parse_config
        for attr, module, name in (
            ("render_table", "monitor.commands.status", "render_table"),
            ("generate", "monitor.generate.build", "generate"), ("Options", "monitor.generate.options", "Options"),
            ("render_openslo", "monitor.interop.openslo", "render_openslo"),
            ("render_sloth", "monitor.interop.sloth", "render_sloth"), ("Sidecar", "monitor.sidecar", "Sidecar"),
            ("RequestLogReader", "monitor.requestlog.reader", "RequestLogReader"),
            ("EmulatedDeployment", "monitor.emulate.engine", "EmulatedDeployment"),
            ("render_server", "monitor.emulate.exposition", "render_server"),
            ("file_name", "monitor.emulate.request_log", "file_name"), ("names", "monitor.conventions", "names"),
        ):
            setattr(ns, attr, getattr(importlib.import_module(module), name))
        ns.log_dir = tmp_path_factory.mktemp("request-log")
        ns.config = _config(ns, ns.log_dir)
        ns.keys = [s.key for s in slis.SLI_RECORDS]
        ns.files = ns.generate(ns.config, ns.Options(config_name="reach"))
        yield ns


def test_the_planted_record_is_put_back():
    """Runs before the module fixture plants it for the other tests: the modules imported before come back."""
    import monitor.conventions.slis as before

    with planted_record() as planted:
        assert THROWAWAY in planted.SLI_BY_KEY and sys.modules["monitor.conventions.slis"] is planted
    assert sys.modules["monitor.conventions.slis"] is before and THROWAWAY not in before.SLI_BY_KEY


def test_the_throwaway_record_is_planted_and_every_view_of_the_records_has_it(m):
    rec = m.slis.SLI_BY_KEY[THROWAWAY]
    assert m.keys[-1] == THROWAWAY and rec.kind == m.slis.PER_REQUEST and rec.measure == m.slis.FIRST_TOKEN_LATENCY
    assert THROWAWAY in m.slis.REQUEST_SLIS and m.slis.SLI_FAMILIES[THROWAWAY] == THROWAWAY_FAMILY


def test_the_config_has_every_sli(m):
    assert m.config.deployments[0].slis == m.keys


def test_the_sidecar_state_and_the_status_table_show_every_sli(m):
    status = m.Sidecar(m.config).status()
    assert [s.sli for s in status.deployments[0].slis] == m.keys
    table = m.render_table(status, color=False)
    for sli in m.slis.SLI_RECORDS:
        assert sli.title.split()[0] in table, sli.key


def test_rules_alerts_and_promtool_cases_cover_every_sli(m):
    rules = yaml.safe_load(m.files[f"alerts/rules/{DEPLOYMENT}.rules.yml"])
    recorded = {r["labels"]["sli"] for g in rules["groups"] for r in g["rules"] if "record" in r and "sli" in r.get("labels", {})}
    assert set(m.keys) <= recorded
    tests = yaml.safe_load(m.files[f"alerts/tests/{DEPLOYMENT}.test.yml"])
    named = " ".join(t["name"] for t in tests["tests"])
    assert all(f"{s.title}" in named or s.key in named for s in m.slis.SLI_RECORDS), named[:400]


def test_the_deployment_dashboard_has_a_row_per_sli(m):
    dash = json.loads(m.files["dashboards/sglang-deployment.json"])
    titles = [p["title"] for p in dash["panels"] if p.get("type") == "row"]
    for sli in m.slis.SLI_RECORDS:
        assert f"{sli.title} ({sli.long_name})" in titles


def test_the_overview_and_incident_dashboards_set_every_targeted_sli_against_its_target(m):
    overview = json.loads(m.files["dashboards/slo-overview.json"])
    titles = [p["title"] for p in overview["panels"]]
    incident = json.loads(m.files["dashboards/slo-incident.json"])
    legends = {t.get("legendFormat") for p in incident["panels"] for t in p.get("targets", [])}
    for sli in m.slis.SLI_RECORDS:
        assert f"{sli.title} p99 vs target" in titles, sli.key
        assert f"p99 {sli.key}" in legends, sli.key


def test_a_deployment_that_does_not_target_an_sli_gets_no_rule_for_it(m):
    """An SLI no deployment targets adds no rule (no mean latency either) and no against-target panel: adding a
    record changes only the deployments that target it. The deployment dashboard keeps a row for every record
    (the histogram is there whatever the targets; docs/architecture.md says why)."""
    config = m.parse_config({"deployments": [{
        "name": "ttft-only", "ttft_target_seconds": 8.0, "goodput_objective": 0.9,
        "targets": [{"role": "server", "url": "http://10.0.0.1:30000/metrics"},
                    {"role": "request-log", "path": str(m.log_dir), "name": "log"}]}]})
    files = m.generate(config, m.Options(config_name="untargeted"))
    rules = files["alerts/rules/ttft-only.rules.yml"]
    assert THROWAWAY not in rules and "(ttft, failed)" in rules  # the goodput runbook: what its requests can miss
    assert THROWAWAY_FAMILY not in files["alerts/tests/ttft-only.test.yml"]
    for name in ("slo-overview.json", "slo-incident.json"):
        assert THROWAWAY_FAMILY not in files[f"dashboards/{name}"], name
    dash = json.loads(files["dashboards/sglang-deployment.json"])
    rec = m.slis.SLI_BY_KEY[THROWAWAY]
    assert f"{rec.title} ({rec.long_name})" in [p["title"] for p in dash["panels"] if p.get("type") == "row"]


def test_openslo_and_sloth_export_every_sli(m):
    openslo = [d for text in m.render_openslo(m.config).values() for d in yaml.safe_load_all(text)]
    assert {d["metadata"]["labels"]["sli"] for d in openslo} >= set(m.keys)
    sloth = [yaml.safe_load(text) for text in m.render_sloth(m.config).values()]
    names = {slo["name"] for spec in sloth for slo in spec["slos"]}
    assert all(any(k.replace("_", "-") in n or k in n for n in names) for k in m.keys), names


# --- the request log ---------------------------------------------------------------------------------------
def _line(rid: str, finished: float, ttft: float | None, *, finish: str = "stop") -> str:
    """One SGLang 0.5.23 request-log line (FileRequestMetricsExporter's fields): 11 tokens, 10 ms apart after the
    first (every other target met)."""
    reason: dict[str, Any] = {"type": finish}
    e2e = (ttft or 0.0) + 0.1
    out: dict[str, Any] = {"request_parameters": json.dumps({"rid": rid}), "id": rid, "finish_reason": reason,
                           "prompt_tokens": 100, "completion_tokens": 11, "e2e_latency": e2e, "queue_time": 0.01,
                           "request_received_ts": finished - e2e, "request_finished_ts": finished}
    if ttft is not None:
        out["first_token_latency"] = ttft
    return json.dumps(out) + "\n"


def test_the_request_log_judges_every_request_log_record(m):
    """A line meets TTFT's target (8 s) and misses the throw-away's (4 s): the log says so for each, in its
    windows and in the sidecar's request-log families; a record without `request_log` is not judged."""
    targets = {s: m.config.deployments[0].target_seconds(s) for s in (THROWAWAY, "ttft")}
    assert targets == {THROWAWAY: 4.0, "ttft": 8.0}
    now = time.time()
    lines = [_line("fast", now - 30, 0.5), _line("between", now - 20, 5.0), _line("slow", now - 10, 9.0),
             _line("gone", now - 5, None, finish="abort")]
    (m.log_dir / m.file_name(now)).write_text("".join(lines), encoding="utf-8")
    sidecar = m.Sidecar(m.config, clock=lambda: now)
    sidecar.poll_request_logs(now)
    w = sidecar.request_logs.summaries[DEPLOYMENT]["5m"]
    judged = set(m.slis.REQUEST_SLIS)
    assert THROWAWAY in judged and not {s.key for s in m.slis.SLI_RECORDS if not s.request_log} & judged
    assert (w.requests, w.good) == (4, 1)
    assert w.missed[THROWAWAY] == 2 and w.missed["ttft"] == 1 and w.missed["failed"] == 1
    # The histogram's population: the abort had no first token.
    assert (w.sli_events[THROWAWAY], w.sli_good[THROWAWAY]) == (3, 1)
    assert (w.sli_events["ttft"], w.sli_good["ttft"]) == (3, 2)
    status = sidecar.status()
    samples = [s for fam in sidecar.extra_families(status) for s in fam.samples
               if s.labels.get("deployment") == DEPLOYMENT and s.labels.get("window") == "5m"]
    good = {s.labels["sli"]: s.value for s in samples if s.name == m.names.M_LOG_SLI_GOOD}
    assert good[THROWAWAY] == pytest.approx(1 / 3) and good["ttft"] == pytest.approx(2 / 3)
    missed = {s.labels["missed"]: s.value for s in samples if s.name == m.names.M_MISSED}
    assert missed[THROWAWAY] == 2.0
    # What a request can miss, as the sidecar's family says it and the goodput runbook lists it.
    (family,) = [fam for fam in sidecar.extra_families(status) if fam.name == m.names.M_MISSED]
    assert f", {THROWAWAY})" in family.documentation
    # The goodput SLO's plan takes its targets from the same records.
    rules = m.files[f"alerts/rules/{DEPLOYMENT}.rules.yml"]
    assert "Throwaway <= 4s" in rules and "TTFT <= 8s" in rules
    assert f", {THROWAWAY}, failed)" in rules


# --- the emulator ------------------------------------------------------------------------------------------
def _series(text: str, family: str, suffix: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(f"{family}{suffix}{{"):
            labels, value = line[len(family) + len(suffix):].rsplit(" ", 1)
            out[labels] = float(value)
    return out


def test_the_emulator_observes_every_record_and_logs_what_judges_it(m, tmp_path: Path):
    """The emulated servers expose the throw-away family where its measure is observed (the decode server that
    answers: every first token, the same observations as TTFT's; not the PD prefill server, which has no first
    token), and the emulator's request log, read back, judges it on the requests that histogram observed: some
    meet its 4 s (the histogram's 4 s bucket holds them), the others miss it and meet TTFT's 8 s."""
    logs = tmp_path / "emulated"
    dep = m.EmulatedDeployment(m.config.deployment(DEPLOYMENT), seed=3, wall_start=time.time() - 120,
                               request_log_dir=logs)
    dep.advance(120)
    pages = {s.spec.role: m.render_server(dep, s, None)[0].decode() for s in dep.servers}
    for sli in m.slis.SLI_RECORDS:
        counts = _series(pages["decode"], sli.family, "_count")
        assert counts and sum(counts.values()) > 0, sli.key
    ttft = m.slis.SLI_FAMILIES["ttft"]
    assert _series(pages["decode"], THROWAWAY_FAMILY, "_count") == _series(pages["decode"], ttft, "_count")
    assert _series(pages["decode"], THROWAWAY_FAMILY, "_sum") == _series(pages["decode"], ttft, "_sum")
    edges = {labels.split('le="')[1].split('"')[0] for labels in _series(pages["decode"], THROWAWAY_FAMILY, "_bucket")}
    assert edges == {*(str(e) for e in THROWAWAY_EDGES), "+Inf"}
    assert f"# TYPE {THROWAWAY_FAMILY} histogram" in pages["decode"]
    assert THROWAWAY_FAMILY not in pages["prefill"]
    decode = next(s for s in dep.servers if s.spec.role == "decode")
    reader = m.RequestLogReader(_config(m, logs / decode.spec.name))
    reader.poll(dep.wall_start + dep.now)
    w = reader.summaries[DEPLOYMENT]["5m"]
    assert w.requests > 0 and w.sli_events[THROWAWAY] == w.sli_events["ttft"] > 0
    assert 0 < w.sli_good[THROWAWAY] < w.sli_good["ttft"] and w.missed[THROWAWAY] > 0
    met = sum(v for labels, v in _series(pages["decode"], THROWAWAY_FAMILY, "_bucket").items() if 'le="4.0"' in labels)
    assert w.sli_good[THROWAWAY] <= met  # the log's finished requests, of the histogram's first tokens
