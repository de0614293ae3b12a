"""Goodput analysed from the sidecar's own recording: the request-log counts it keeps in each tick."""

from __future__ import annotations

import json

import pytest

from monitor.analyze import markdown
from monitor.analyze.recording import load_recording
from monitor.analyze.report import analyze
from tests.analyze.conftest import EPOCH, INCIDENT_AT, INTERVAL, WINDOW, Run, make_config, record_incident

UNTIL = 720.0
SPIKE = f"llama:ttft_spike:10@{INCIDENT_AT:g}+120"  # TTFT ~9 s against a 2 s target: every request misses it


@pytest.fixture(scope="module")
def spike_run(tmp_path_factory) -> tuple[Run, int]:
    tmp = tmp_path_factory.mktemp("goodput")
    run = record_incident(SPIKE, tmp / "recording.sqlite", UNTIL, request_log_dir=tmp / "logs",
                          goodput_objective=0.95)
    lines = sum(len(f.read_text().splitlines()) for f in (tmp / "logs").rglob("*.log"))
    return run, lines


def _dataset(run: Run, with_config: bool = True):
    dep = run.config.deployment("llama") if with_config else None
    return load_recording(str(run.recording), "llama", EPOCH, EPOCH + UNTIL, deployment_config=dep,
                          progress=lambda _: None)


def test_the_recording_keeps_each_request_log_targets_cumulative_counts(spike_run):
    from monitor.record.store import Recording

    run, lines = spike_run
    rec = Recording(run.recording, readonly=True)
    try:
        last = list(rec.states("llama"))[-1][1]
    finally:
        rec.close()
    (target, counts), = last["goodput"]["targets"].items()
    assert target.endswith("-request-log") and last["goodput"]["objective"] == 0.95
    # Every line SGLang (the emulator) wrote up to the last tick was counted, none twice; only the lines of
    # the step after the last tick (~1.5 requests/s) were not read yet.
    assert lines - 4 * INTERVAL <= counts["finished"] <= lines and 0 < counts["good"] < counts["finished"]
    json.dumps(last)  # the row stays plain JSON


def test_goodput_breach_is_found_in_the_recording_after_the_ttft_breach(spike_run):
    run, _ = spike_run
    ds = _dataset(run)
    assert ds.slis["goodput"].objective == 0.95 and not ds.slis["goodput"].latency
    assert not any("goodput" in n for n in ds.notes)
    totals = [h.total for h in ds.hists["goodput"] if h is not None]
    assert totals == sorted(totals) and totals[-1] > 0
    rep = analyze(ds, EPOCH + INCIDENT_AT - 200, EPOCH + UNTIL, WINDOW)
    ttft, goodput = rep.slis["ttft"].main_episode, rep.slis["goodput"].main_episode
    assert ttft is not None and goodput is not None and goodput.end is not None
    # A request counts for goodput when it finishes (TTFT ~9 s + 64 tokens): later than the TTFT histogram
    # sees its first token, but within the incident.
    assert EPOCH + INCIDENT_AT <= ttft.start <= goodput.start <= EPOCH + INCIDENT_AT + 60
    assert goodput.peak_burn > 14.4  # ~100 % of requests bad against a 5 % budget
    assert "GOODPUT (requests meeting every target, objective 95.00%)" in markdown.render(rep, {})


def test_without_the_config_the_goodput_objective_comes_from_the_recording(spike_run):
    run, _ = spike_run
    ds = _dataset(run, with_config=False)
    assert ds.slis["goodput"].objective == 0.95 and set(ds.slis) >= {"tpot", "ttft", "goodput"}


def test_a_recording_without_request_log_counts_says_so(queue_run):
    dep = make_config().deployment("llama").model_copy(update={"goodput_objective": 0.95})
    ds = load_recording(str(queue_run.recording), "llama", EPOCH, EPOCH + UNTIL, deployment_config=dep,
                        progress=lambda _: None)
    assert "goodput" not in ds.hists and any("no request-log counts" in n for n in ds.notes)
