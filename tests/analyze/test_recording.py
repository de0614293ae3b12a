"""analyze --recording over rows the sidecar has thinned (one a minute past the full-resolution hour)."""

from __future__ import annotations

from monitor.analyze.recording import load_recording
from monitor.config import parse_config
from monitor.record.store import Recording
from monitor.sidecar import recording_thinning
from monitor.slo.accumulate import SeriesBook
from monitor.slo.histogram import Hist
from monitor.slo.windows import Snapshot


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
