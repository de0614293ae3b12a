"""The request-log families of /metrics (monitor/export/requestlog.py), from what the reader read."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from monitor.config import Config
from monitor.export.requestlog import request_log_families
from monitor.requestlog.reader import RequestLogReader, state_path_for
from monitor.status_model import (
    DeploymentStatus,
    SliStatus,
    StatusResponse,
    WindowStatus,
    sidecar_status,
)
from tests.requestlog.conftest import append, config_for, line, name_for, rec


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    return d


def status_with(ratio: float) -> StatusResponse:
    win = WindowStatus(window="5m", seconds=300, covered_seconds=300, events=4, good_ratio=ratio,
                       good_ratio_lower=None, good_ratio_upper=None, burn_rate=0.0, p50_seconds=None,
                       p90_seconds=None, p99_seconds=None, mean_seconds=None)
    sli = SliStatus(sli="ttft", target_seconds=1.0, objective=0.99, target_is_bucket_edge=True, fix_flag=None,
                    error_budget_remaining=None, budget_covered_seconds=0, breaching=False, windows=[win])
    dep = DeploymentStatus(name="dep", model="m", hardware="h", cards=None, mode="pd-mixed", slis=[sli], load={},
                           rates={}, targets=[], warnings=[])
    return StatusResponse(sidecar=sidecar_status(0, 0, 5, 0, 0), deployments=[dep])


class _Families(Collector):
    def __init__(self, fams):
        self.fams = fams

    def collect(self):
        yield from self.fams


def test_families_pass_promtool_and_export_disagreement(log_dir: Path, tmp_path: Path, prometheus_build):
    f = log_dir / name_for("20250102_03")
    lines = [rec(str(i), 100.0 + i, ttft=0.5 if i % 4 else 3.0, e2e=2.0) for i in range(8)]
    lines.append(rec("x", 109.0, finish="abort", ttft=None))
    append(f, "".join(line(r) for r in lines))
    reader = RequestLogReader(config_for(log_dir))
    reader.poll(200.0)
    fams = request_log_families(reader.summaries, reader.counts(), status_with(0.5))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Families(fams))
    text = generate_latest(reg).decode()
    samples = {s.name + json.dumps(s.labels, sort_keys=True): s.value for fam in fams for s in fam.samples}
    # TTFT over the histogram's population (aborts excluded): 6 of 8 met.
    key = 'slo_monitor_request_log_sli_good_ratio{"deployment": "dep", "sli": "ttft", "window": "5m"}'
    assert samples[key] == pytest.approx(0.75)
    assert samples[key.replace("request_log_sli_good", "sli_source_disagreement")] == pytest.approx(0.25)
    assert samples['slo_monitor_goodput_ratio{"deployment": "dep", "window": "5m"}'] == pytest.approx(6 / 9)
    assert samples['slo_monitor_requests_missed{"deployment": "dep", "missed": "failed", "window": "5m"}'] == 1
    assert samples['slo_monitor_request_log_lines_total{"deployment": "dep", "target": "log"}'] == 9
    assert samples['slo_monitor_request_log_finished_requests_total{"deployment": "dep", "target": "log"}'] == 9
    assert samples['slo_monitor_goodput_requests_total{"deployment": "dep", "target": "log"}'] == 6
    res = subprocess.run([prometheus_build.tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_no_request_log_targets_means_no_families(tmp_path: Path):
    cfg = Config.model_validate({"deployments": [{"name": "d", "targets": [{"role": "server", "url": "http://x:1/m"}]}]})
    reader = RequestLogReader(cfg, state_path_for(str(tmp_path / "rec.sqlite")))
    assert not reader and reader.poll(0.0) == 0 and request_log_families(reader.summaries, reader.counts()) == []
