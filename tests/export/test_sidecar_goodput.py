"""Sidecar + emulator with request logs: goodput exported, histogram and per-request SLIs agree."""

from __future__ import annotations

from monitor.config import parse_config
from monitor.emulate.request_log import read_records
from monitor.sidecar import Sidecar
from tests.export.lockstep import run_lockstep


def test_goodput_and_source_agreement(tmp_path):
    cfg = parse_config({"deployments": [{
        "name": "mixed", "mode": "pd-mixed", "tpot_target_seconds": 0.04, "ttft_target_seconds": 2.0,
        "input_tokens": 512, "output_tokens": 64,
        "targets": [{"role": "server", "url": "http://127.0.0.1:1/metrics"}],
    }]})
    logs = tmp_path / "logs"

    text, status = run_lockstep(cfg, logs, seed=3, rates={"mixed": 8.0}, steps=30, recording=tmp_path / "rec.sqlite")
    records = [r for r in read_records(logs)]
    assert len(records) > 500
    assert 'slo_monitor_goodput_ratio{deployment="mixed",window="5m"}' in text
    rl = [t for t in status.deployments[0].targets if t.role == "request-log"]
    assert rl and all(t.up for t in rl)
    dis = [line for line in text.splitlines()
           if line.startswith('slo_monitor_sli_source_disagreement_ratio{deployment="mixed",sli="tpot",window="5m"}')]
    assert dis and abs(float(dis[0].rsplit(" ", 1)[1])) < 0.02  # two sources, one truth
    # /api/v1/status carries the goodput windows; the counters behind the goodput SLO rules add up to them.
    gp = {w.window: w for w in status.deployments[0].goodput}
    assert set(gp) == {"5m", "30m", "1h", "6h"} and gp["5m"].objective is None
    assert gp["1h"].requests == len(records) and 0 < gp["1h"].good <= gp["1h"].requests
    assert gp["1h"].ratio == gp["1h"].good / gp["1h"].requests

    def total(metric: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(metric + "{"))

    assert total("slo_monitor_request_log_finished_requests_total") == len(records)
    assert total("slo_monitor_goodput_requests_total") == gp["1h"].good


def test_a_missing_request_log_directory_is_logged_once_and_again_when_it_appears(tmp_path, caplog):
    import logging

    logs = tmp_path / "metrics"
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.05, "targets": [
        {"role": "request-log", "path": str(logs), "name": "decode-log"}]}]})
    sc = Sidecar(cfg)
    with caplog.at_level(logging.INFO, logger="monitor.observations"):
        sc.poll_request_logs(1000.0)
        sc.poll_request_logs(1005.0)
        logs.mkdir()
        sc.poll_request_logs(1010.0)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and said[0].startswith("d decode-log: down: request-log directory") and str(logs) in said[0]
    assert said[1] == "d decode-log: up again"
