"""The committed alerts/, dashboards/ and deploy/kubernetes/ are what `slo-monitor generate` produces."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.cli import main
from tests.generate.conftest import run_tool

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kimi-k2.6-ascend.yaml"


@pytest.fixture()
def committed(monkeypatch):
    if not EXAMPLE.exists() or not (ROOT / "alerts" / "prometheus.yml").exists():
        pytest.skip("examples/kimi-k2.6-ascend.yaml or the generated outputs are not in the tree yet")
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("SLO_MONITOR_PAGE_WEBHOOK_URL", raising=False)
    monkeypatch.delenv("SLO_MONITOR_TICKET_WEBHOOK_URL", raising=False)


def test_generate_check_passes_on_the_committed_files(committed, capsys):
    assert main(["generate", "--check"]) == 0, capsys.readouterr().err


def test_committed_rules_and_config_pass_promtool(committed, prometheus_build):
    promtool = prometheus_build.tool
    alerts = ROOT / "alerts"
    # --lint-fatal: a duplicate rule (same name and labels) is an error, not a warning the exit code hides.
    res = run_tool(promtool, "check", "rules", "--lint-fatal",
                   *sorted(str(p) for p in (alerts / "rules").glob("*.rules.yml")))
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_tool(promtool, "check", "config", "prometheus.yml", cwd=alerts)
    assert res.returncode == 0, res.stdout + res.stderr
    first = sorted((alerts / "tests").glob("*.test.yml"))[0]
    res = run_tool(promtool, "test", "rules", str(first.relative_to(alerts)), cwd=alerts)
    assert res.returncode == 0, res.stdout + res.stderr


def test_check_fails_and_names_the_file_when_a_committed_file_drifts(tmp_path, capsys):
    small = Path(__file__).parent / "fixtures" / "small.yaml"
    assert main(["generate", "-c", str(small), "--out", str(tmp_path)]) == 0
    (tmp_path / "alerts" / "prometheus.yml").write_text("# edited by hand\n")
    assert main(["generate", "-c", str(small), "--out", str(tmp_path), "--check"]) == 1
    assert "alerts/prometheus.yml: differs" in capsys.readouterr().err


def test_unfixable_target_is_reported_in_one_line(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("deployments:\n  - name: d\n    tpot_target_seconds: 0.05\n")
    assert main(["generate", "-c", str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "--bucket-inter-token-latency" in err and "not a bucket edge" in err
    assert main(["generate", "-c", str(cfg), "--out", str(tmp_path / "out"), "--approximate"]) == 0
