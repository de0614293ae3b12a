"""Injected ground truth: every incident kind the emulator can inject, run together in one lockstep run beside
the sidecar's recording and a capture a real Prometheus 2.42 is backfilled from (tools/incident_lab), analysed
from both. The first line must name the injected mechanism and call no consequence the cause; the confusion
table in docs/analysis.md must be the one measured here."""

from __future__ import annotations

import pytest

from monitor.analyze import fmt
from monitor.analyze.markdown import render
from monitor.analyze.signals import CONSEQUENCE
from tools.incident_lab import confusion
from tools.incident_lab.lockstep import run_lab
from tools.incident_lab.prometheus import available, serving
from tools.incident_lab.scenarios import EPOCH, INCIDENT_AT, SCENARIOS, by_name


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not available():
        pytest.fail("prometheus/promtool are not installed")
    work = tmp_path_factory.mktemp("incident-lab")
    run = run_lab(work)
    with serving(run.openmetrics, work, run.interval) as url:
        reports = {(s.name, src): confusion.report(run, s, src, url) for s in run.scenarios
                   for src in confusion.SOURCES}
    return run, reports


@pytest.mark.parametrize("source", confusion.SOURCES)
@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_the_first_line_names_the_injected_mechanism_and_no_consequence_as_the_cause(lab, name, source):
    _, reports = lab
    rep, scenario = reports[(name, source)], by_name(name)
    v = rep.verdict
    assert v.mechanism == scenario.expect, v.headline
    assert confusion.consequence_as_cause(rep) is None, v.headline
    assert v.cause is None or v.cause.signal.side != CONSEQUENCE
    first = render(rep).splitlines()[2]
    assert first == f"**Verdict: {v.first_line}**" and len(v.first_line.split()) <= 25, v.first_line
    if v.cause is not None:  # it names when, and it is not before the injection (give or take the smoothing)
        assert v.cause.changed_at is not None and v.cause.changed_at >= EPOCH + INCIDENT_AT - 20, v.headline
        assert " -> " in v.headline and v.confidence in ("high", "medium")


def test_the_confusion_table_in_the_docs_is_the_measured_one(lab):
    _, reports = lab
    outcomes = [confusion.outcome(rep, by_name(name), src) for (name, src), rep in reports.items()]
    assert all(o.right for o in outcomes)
    assert confusion.doc_table() == confusion.table(outcomes), "docs/analysis.md drifted: run `make confusion`"


def test_a_decode_slowdown_separates_flat_demand_from_the_slower_engine_and_lists_consequences(lab):
    _, reports = lab
    for src in confusion.SOURCES:
        v = reports[("tpot-regression", src)].verdict
        cause, consequences = v.headline.split(" -> ", 1)
        # The cause is the measured per-token decode time (ITL); the gauge ratio moves with it.
        assert "demand flat (arrival rate" in cause and "ITL (mean) rose 2." in cause
        assert "running requests" in consequences and "as a consequence (Little's law" in consequences
        assert v.shifts["decode_speed"].ratio == pytest.approx(0.5, abs=0.1)  # the injected factor 2


def test_overload_names_the_arrivals_and_their_growth(lab):
    _, reports = lab
    for src in confusion.SOURCES:
        v = reports[("queue-buildup", src)].verdict
        cause, consequences = v.headline.split(" -> ", 1)
        assert cause.startswith("Overload") and "arrival rate rose" in cause
        assert "queued requests" in consequences and "queued" not in cause
        assert 2.0 <= v.shifts["arrivals"].ratio <= 4.0  # 3x injected


def test_pd_ttft_is_attributed_to_the_stage_that_grew(lab):
    _, reports = lab
    rep = reports[("pd-prefill-slow", "prometheus")]
    [line] = [e for e in fmt.evidence(rep) if e.startswith("PD TTFT by stage")]
    assert line.endswith("most added: prefill compute (prefill_forward)")
    stages = {k: s for k, s in rep.verdict.shifts.items() if k.startswith("pd.")}
    assert set(stages) == {"pd.bootstrap", "pd.prefill_queue", "pd.prefill", "pd.transfer", "pd.decode_queue"}
    assert stages["pd.prefill"].incident / stages["pd.prefill"].baseline > 3  # 4x injected
    assert stages["pd.transfer"].incident / stages["pd.transfer"].baseline < 1.5


def test_spec_decoding_says_the_accept_length_drop_explains_the_tpot_rise(lab):
    _, reports = lab
    for src in confusion.SOURCES:
        [line] = [e for e in fmt.evidence(reports[("spec-accept-drop", src)]) if e.startswith("Speculative")]
        assert "2.0x fewer" in line and "the drop explains" in line


def test_the_baseline_that_starts_before_the_deployment_is_said_and_no_z_against_a_flat_one(lab):
    _, reports = lab
    rep = reports[("queue-buildup", "prometheus")]
    assert rep.baseline.trusted and rep.baseline.start > EPOCH  # not the empty span before the data
    assert any("started inside the baseline" in n for n in rep.notes)
    assert any("warm-up" in n for n in rep.notes)
    md = render(rep)
    assert "≫100" not in md and "flat baseline" in md  # the queue was 0 all through the baseline
