"""`slo-monitor run`: what it refuses before starting and what it says when it starts."""

from __future__ import annotations

import sys
from pathlib import Path

from monitor.cli import main
from tests.conftest import free_port
from tests.procs import running

ROOT = Path(__file__).resolve().parents[2]


def test_a_config_with_no_deployments_is_refused_with_one_line(tmp_path, capsys):
    for text in ("deployments: []\n", "sidecar: {listen_port: 0}\n"):
        cfg = tmp_path / "empty.yaml"
        cfg.write_text(text)
        assert main(["run", "-c", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(cfg) in err and "no deployments" in err


def test_a_shard_holding_no_deployment_is_refused(tmp_path, capsys):
    cfg = tmp_path / "one.yaml"
    cfg.write_text("deployments: [{name: only, tpot_target_seconds: 0.04}]\n")
    assert main(["run", "-c", str(cfg), "--shard", "1/2"]) == 2  # `only` hashes to shard 0 of 2
    err = capsys.readouterr().err
    assert "--shard 1/2" in err and "none of the 1 deployment" in err


def test_run_logs_a_target_off_the_bucket_edges_at_start_with_the_flag_to_relaunch_with(tmp_path):
    port = free_port()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "deployments:\n"
        "  - {name: off-edge, tpot_target_seconds: 0.05, ttft_target_seconds: 1.0, targets: []}\n"
        "  - {name: declared, tpot_target_seconds: 0.05, buckets: {tpot: [0.01, 0.05, 0.1]}, targets: []}\n")
    log = tmp_path / "run.log"
    with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg), "--listen", f"127.0.0.1:{port}"], log,
                 ready_url=f"http://127.0.0.1:{port}/healthz"):
        pass
    lines = [line for line in log.read_text().splitlines() if "bucket edge" in line]
    assert len(lines) == 1, log.read_text()  # ttft 1.0 is an edge; the declared buckets hold 0.05
    assert "WARNING" in lines[0] and "off-edge" in lines[0] and "tpot target 50 ms" in lines[0]
    assert "--bucket-inter-token-latency 0.002 0.004" in lines[0] and " 0.05 " in lines[0]
    assert "buckets:" in lines[0]  # and where to say so in the config
