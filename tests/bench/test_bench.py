"""Smoke tests: each benchmark runs end to end with tiny sizes and renders its table (no timing asserts)."""

from __future__ import annotations

import shutil

import pytest

from bench import detection, emulator, fleet, parse_cpu, table
from bench.expositions import Exposition, fixture_text, replicate


def test_replicate_repeats_scheduler_series_per_rank_with_distinct_labels():
    base = fixture_text()
    scaled = replicate(base, 2, 2)
    sched = [line for line in base.split("\n") if 'tp_rank="0"' in line and not line.startswith("#")]
    lines = [line for line in scaled.split("\n") if line and not line.startswith("#")]
    assert len(lines) == len([x for x in base.split("\n") if x and not x.startswith("#")]) + 3 * len(sched)
    assert len(set(lines)) == len(lines)  # no duplicate series
    assert any('dp_rank="1"' in x and 'tp_rank="1"' in x for x in lines)


def test_parse_benchmark_runs_in_process_and_renders():
    expo = Exposition("fixture", fixture_text(), "test")
    results = parse_cpu.run_inprocess([expo], repeats=1)
    text = parse_cpu.render(results)
    assert "prometheus_client" in text and "fixture" in text


@pytest.mark.skipif(not shutil.which(parse_cpu.PROMETHEUS), reason="Prometheus not installed")
def test_parse_benchmark_live_part_scrapes_with_prometheus_and_sidecar():
    results = parse_cpu.run_inprocess([Exposition("fixture", fixture_text(), "test")], repeats=1)
    parse_cpu.run_live(results, seconds=1.0, warmup=0.5)
    assert {"prometheus_cpu", "sidecar_cpu", "prometheus_scrapes"} <= set(results[0].live)
    assert "Prometheus CPU/scrape" in parse_cpu.render(results)


def test_fleet_benchmark_runs_tiny():
    r = fleet.run(targets=4, deployments=2, interval=0.5, cycles=2, sim_hours=0.02)
    assert r["failures"] == 0
    assert "CPU share" in fleet.render(r)


def test_detection_benchmark_detects_a_tpot_regression():
    res = detection.run(trials=1, warm=20.0, limit=90.0)
    assert res[0]["latency"] is not None
    assert "latency" in detection.render(res, factor=2.0, warm=20.0)


def test_emulator_benchmark_streams_real_requests_and_renders():
    res = emulator.run(seconds=1.5, token_clients=(4,), request_clients=(8,))
    assert [r["kind"] for r in res] == ["tokens", "requests"]
    assert res[0]["tok_s"] > 0 and res[1]["req_s"] > 0 and all(r["failed"] == 0 for r in res)
    assert "tokens/s" in emulator.render(res)


def test_table_statistics():
    assert table.median([3, 1, 2]) == 2
    assert table.iqr([1, 2, 3, 4, 5]) == (2, 4)
    assert table.ratio(1, 0) == "–"
