"""Smoke tests: each benchmark runs end to end with tiny sizes and renders its table (no timing asserts)."""

from __future__ import annotations

from bench import big, detection, emulator, fleet, growth, leading, metrics_page, parse_cpu, table
from bench.expositions import Exposition, fixture_text, replicate
from tests.components import PROMETHEUS_3, PROMETHEUS_242


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


def test_parse_benchmark_live_part_scrapes_with_both_prometheus_builds_and_sidecar_and_compares_gzip():
    PROMETHEUS_242.require()
    PROMETHEUS_3.require()
    expo = Exposition("fixture", fixture_text(), "test")
    results = parse_cpu.run_inprocess([expo], repeats=1)
    gz = parse_cpu.run_live(results, rounds=1, seconds=2.5, warmup=1.5, gzip_for="fixture")
    live = results[0].live
    assert {"prometheus_cpu", "prometheus3_cpu", "sidecar_cpu", "ratio", "ratio3"} <= set(live)
    assert all(v > 0 for key in ("prometheus_cpu", "prometheus3_cpu", "sidecar_cpu") for v in live[key])
    # Same bytes: both builds stored every sample of the text.
    assert live["prometheus_samples"] == live["prometheus3_samples"] == [float(expo.samples)]
    assert gz["side"] and gz["side-gz"] and gz["server_gzip"][0] > 0
    text = parse_cpu.render(results, gz)
    assert "Prometheus 2.42 CPU/scrape" in text and "Prometheus 3 CPU/scrape" in text and "sidecar / 3" in text
    assert "gzip on loopback" in text
    goals = [g[0] for g in parse_cpu.goal_lines(results)]
    assert goals == ["1. CPU per scrape vs Prometheus 2.42, fixture", "1. CPU per scrape vs Prometheus 3, fixture"]


def test_fleet_benchmark_runs_tiny():
    res = fleet.run(sizes=(4,), interval=0.5, warm=1, cycles=2, sim_hours=0.02, dp_ranks=2)
    assert res[0]["failures"] == 0 and res[0]["healthz"] and res[0]["cycle_seconds"]
    assert "CPU share" in fleet.render(res) and len(fleet.goal_lines(res)) == 4


def test_the_served_variants_differ_in_their_pids_only():
    from bench.serve import _PID, variant

    text = replicate(fixture_text(), 2).encode()
    moved = variant(_PID.split(text), 100_000)
    assert moved != text and _PID.sub(b"", moved) == _PID.sub(b"", text)


def test_leading_benchmark_runs_a_short_healthy_stretch_then_a_regression_and_renders():
    name = "kimi-k2.6-w4a8-16p-in64k-out1k-100ms"
    res = leading.run(healthy_hours=0.05, seeds=1, shares=(0.6,), rows=[name], limit=600.0, jobs=1)
    (r,) = res["runs"]
    assert r["watched"] == 180.0 and r["steps"] == 37 and r["warnings"] == [] and r["tpot_burn"] == 0.0
    assert 60.0 <= r["after"]["warning"] < r["after"]["page"] and r["after"]["rule"] is not None  # warned first
    assert "lead over page s" in leading.render(res)
    goals = leading.goal_lines(res)
    assert goals[0][1] == "0 / 0" and goals[0][3] == "MISSED"  # no false warning, but far from 24 h
    assert goals[1][0].startswith(leading.GOAL_PREFIXES) and goals[1][3] == "met"


def test_every_recipe_row_with_a_tpot_target_has_a_capacity_that_binds_somewhere():
    rows = leading.recipe_rows()
    assert len(rows) == 11 and all(d.tpot_target_seconds for d in rows)
    for d in rows:
        rate, bound = leading.capacity(d.name)
        assert rate > 0 and bound in ("decode slots", "prefill slots", "TPOT SLO")
        assert leading._binding(leading._mean_field(d, rate * 0.9))[0] < 1.0
        assert leading._binding(leading._mean_field(d, rate * 1.1))[0] > 1.0
    # one decode rank of 16 slots measured at a batch of 1: its TPOT SLO binds long before its slots fill
    assert leading.capacity("kimi-k2.6-w4a8-1p1d-16p-in64k-out1k5-100ms")[1] == "TPOT SLO"


def test_the_rule_evaluation_reads_the_last_minute_and_holds_for_a_minute_as_prometheus():
    rule = leading.RuleEval(0.1)
    slow = {"server": {"num_running_reqs": 10.0, "gen_throughput": 50.0}}  # 0.2 s a token
    fine = {"server": {"num_running_reqs": 10.0, "gen_throughput": 200.0}}
    assert rule.evaluate(0.0, 0.0, 0.0, fine) == (0.05, False)
    assert rule.evaluate(5.0, 5.0, 100.0, fine) == (0.05, False)  # ITL 50 ms over (0, 5]
    seen = [rule.evaluate(t, 5.0, 100.0, slow) for t in range(10, 75, 5)]
    assert [firing for _, firing in seen] == [False] * 12 + [True] and seen[0][0] == 0.2
    assert rule.itl(70.0) is None  # no token in the last minute (the samples at 10..70 s hold the same counts)
    assert rule.evaluate(75.0, 5.0, 100.0, fine) == (0.05, False) and rule.active_at is None


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


def test_big_target_benchmark_runs_small():
    res = big.run(interval=1.0, cycles=2, scale=0.02)
    assert [r["kind"] for r in res] == list(big.CASES) and all(r["healthz"] for r in res)
    assert res[0]["big_up"] and res[1]["big_up"]  # 2 % of each: under the series limit
    assert "/healthz p50 / p99 / max ms" in big.render(res) and len(big.goal_lines(res)) == 2


def test_growth_benchmark_runs_tiny_and_renders():
    res = growth.run(deployments=3, hours=0.2, rec_deployments=2, rec_minutes=1.0, day_deployments=1,
                     day_hours=7.0)
    assert res["rec_bytes"] > 0 and res["day_rows_kept"] < res["full_rows_per_day"] and len(res["rss"]) == 1
    text = growth.render(res)
    assert "kB per deployment per minute" in text and "MB per deployment" in text


def test_metrics_page_benchmark_runs_tiny_with_and_without_the_cache():
    res = metrics_page.run(deployments=3, cycles=2, concurrency=(4,), rounds=1)
    s = metrics_page.summary(res)
    assert s["cached 4"]["renders"] == 1 and s["uncached 4"]["probes"] >= 1 and s["cached 4"]["probes"] >= 1
    assert s["cached 4"]["bytes"] < s["uncached 4"]["bytes"]  # gzip on the wire
    assert "ratio uncached / cached" in metrics_page.render(res) and len(metrics_page.goal_lines(res)) == 2


def test_writing_one_benchmark_replaces_its_section_and_goal_lines_and_keeps_the_rest():
    from bench.__main__ import goal_prefixes, merge_results

    old = "\n".join([
        "# Benchmark results", "", "## Goals", "", table.markdown(["goal", "measured", "target", "verdict"], [
            ["1. CPU per scrape, a", "1x", "<= 1x", "met"],
            ["3. lead of the TPOT warning over the 5m burn >= 14.4, x2 regression, row", "65 s", "> 0 s", "met"],
            ["3. false TPOT warnings over a healthy 1.0 h, row", "0", "0", "met"],
            ["7. renders", "1", "1", "met"]]), "", "## 3. Detection", "", "three", "", "## 4. Old leading", "",
        "old four", "", "## 5. Emulator", "", "five", "", "## How to read this", "", "notes"])
    goals = [("3. false TPOT warnings (sidecar / rule) over 99 h", "0 / 0", "0", "met"),
             ("3. lead of the TPOT warning over the page, x2, row", "90 s", "> 0 s", "met")]
    new = merge_results(old, ["## 4. New leading\n\nnew four"], goals, goal_prefixes(["leading"], goals))
    assert "old four" not in new and "## 4. New leading\n\nnew four\n\n## 5. Emulator" in new
    assert "## 3. Detection\n\nthree\n\n## 4." in new and new.endswith("## How to read this\n\nnotes")
    rows = [line.split("|")[1].strip() for line in new.splitlines() if line.startswith("| ") and "goal " not in line]
    assert rows == ["1. CPU per scrape, a", goals[0][0], goals[1][0], "7. renders"]


def test_generate_benchmark_runs_the_real_command_and_renders():
    from bench import generate_fleet

    res = generate_fleet.run(sizes=(3,), rounds=1)
    run = res[3][0]
    assert run["objects"] == 1 and 0 < run["largest_object"] < generate_fleet.GOAL_OBJECT_BYTES and run["files"] > 10
    assert "deployments" in generate_fleet.render(res)
    assert generate_fleet.goal_lines(res) == []  # goal lines are for the 500-deployment fleet only


def test_victoriametrics_benchmark_runs_both_engines_on_the_same_targets_and_renders():
    from bench import victoriametrics

    res = victoriametrics.run({2: ("2s", "2s")}, warmup=4.0, window=8.0)
    row = res["rows"][0]
    assert row["targets"] >= 2 and row["groups"]["vmalert"] == row["groups"]["prometheus"] > 2
    expected = row["targets"] * (victoriametrics.SERVED_SAMPLES + victoriametrics.AUTO_SAMPLES) / 2
    for engine in ("vm_scraped", "prom_scraped"):  # every target's every sample, at the scrape interval
        assert 0.5 * expected < row[engine] < 1.5 * expected, (engine, row[engine], expected)
    assert row["vm_eval"] > 0 and row["prom_eval"] > 0 and not any(row["failures"].values())
    assert all(mb > 5 for mb in row["rss"].values())
    assert "| 2 " in victoriametrics.render(res)
