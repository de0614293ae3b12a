"""analyze --recording over rows the sidecar has thinned (one a minute past the full-resolution hour)."""

from __future__ import annotations

import dataclasses

from monitor.analyze.recording import load_recording
from monitor.config import parse_config
from monitor.record.store import Recording
from monitor.sidecar import _reading, recording_thinning
from monitor.slo.accumulate import SeriesBook
from monitor.slo.histogram import Hist
from monitor.slo.windows import Snapshot
from monitor.telemetry.nvml import read_nvml
from tests.telemetry.fake_nvml import FakeNvml


def test_thinned_older_rows_are_read_as_data_not_as_gaps(tmp_path):
    path = tmp_path / "rec.sqlite"
    rec = Recording(path)
    start = 1_000_000.0
    for i in range(2 * 240):  # 2 h of 15 s ticks, one request a second
        n = 15.0 * i
        snap = Snapshot(start + 15 * i, {"tpot": Hist((0.04, float("inf")), (n, n), 0.03 * n, n)}, {"requests_total": n})
        rec.write_tick([("d", snap, {"load": {}}, SeriesBook())], retain_seconds=86400, thin=recording_thinning("1h"))
    rec.close()
    dep = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": []}]}).deployments[0]
    data = load_recording(str(path), "d", start, start + 2 * 3600, deployment_config=dep, progress=lambda _: None)
    assert data.step == 15  # finer than the thinned rows: a grid point between two of them must still read one
    assert all(h is not None for h in data.hists["tpot"]), [t for t, h in zip(data.times, data.hists["tpot"]) if h is None][:5]


def test_each_recorded_stage_reads_as_its_mean_seconds_per_request_under_the_role_that_observes_it(tmp_path):
    # A PD pair: prefill compute 0.5 s a request, then 2 s from the 20th tick; the decode server's wait 0.1 s.
    # The recording keeps each stage's _sum and _count as counters; the analysis reads their increase per step.
    path = tmp_path / "rec.sqlite"
    rec = Recording(path)
    start, fwd, fwd_n, wait = 1_000_000.0, 0.0, 0.0, 0.0
    for i in range(40):
        per = 0.5 if i < 20 else 2.0
        fwd, fwd_n, wait = fwd + 10 * per, fwd_n + 10, wait + 10 * 0.1
        counters = {"requests_total": 10.0 * i, "stage_prefill_forward_seconds_total": fwd,
                    "stage_prefill_forward_requests_total": fwd_n, "stage_decode_waiting_seconds_total": wait,
                    "stage_decode_waiting_requests_total": fwd_n}
        state = {"load": {"prefill": {"num_running_reqs": 4.0}, "decode": {"num_running_reqs": 8.0}}}
        rec.write_tick([("d", Snapshot(start + 5 * i, {}, counters), state, SeriesBook())], retain_seconds=86400)
    rec.close()
    dep = parse_config({"deployments": [{"name": "d", "mode": "pd-disaggregated", "ttft_target_seconds": 1.0,
                                         "targets": []}]}).deployments[0]
    data = load_recording(str(path), "d", start, start + 200, deployment_config=dep, progress=lambda _: None)
    forward = data.series["stage.prefill.prefill_forward"].values
    assert [round(v, 6) for v in forward[2:19]] == [0.5] * 17 and [round(v, 6) for v in forward[22:39]] == [2.0] * 17
    assert {round(v, 6) for v in data.series["stage.decode.decode_waiting"].values if v is not None} == {0.1}
    assert "stage.prefill.prefill_bootstrap" not in data.series  # not recorded: no series, not zeros


def test_the_chips_own_slowdown_temperature_and_thermal_throttling_are_read_from_the_recorded_readings(tmp_path):
    # Two NVML GPUs (slowdown at 90 and 87 degC); the second throttles for heat from the 20th tick on.
    gpus = read_nvml("h", module=FakeNvml(gpus=2))
    path = tmp_path / "rec.sqlite"
    rec = Recording(path)
    start = 1_000_000.0
    for i in range(40):
        chips = [dataclasses.replace(gpus[0], temperature_slowdown_celsius=90.0),
                 dataclasses.replace(gpus[1], temperature_slowdown_celsius=87.0, thermal_throttling=i >= 20)]
        state = {"load": {}, "accelerators": [_reading(r) for r in chips]}
        rec.write_tick([("d", Snapshot(start + 5 * i, {}, {"requests_total": 10.0 * i}), state, SeriesBook())],
                       retain_seconds=86400)
    rec.close()
    dep = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": []}]}).deployments[0]
    data = load_recording(str(path), "d", start, start + 200, deployment_config=dep, progress=lambda _: None)
    assert {v for v in data.series["accel.temperature_slowdown_min"].values if v is not None} == {87.0}
    throttling = data.series["accel.thermal_throttling"].values
    assert set(throttling[1:19]) == {0.0} and set(throttling[21:39]) == {1.0}, throttling
