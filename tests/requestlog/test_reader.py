from __future__ import annotations

from pathlib import Path

from monitor.config import Config
from monitor.conventions.policy import SIDECAR_WINDOWS
from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.request_log import read_records
from monitor.requestlog.reader import RequestLogReader
from tests.requestlog.conftest import append, config_for, hour_start, line, name_for, rec


def truth(records: list[dict], now: float, ttft: float, tpot: float) -> dict[str, tuple[int, int]]:
    """(good, total) per window, computed straight from the raw JSON (bench_serving's rule)."""
    out = {}
    for w, secs in SIDECAR_WINDOWS.items():
        good = total = 0
        for r in records:
            if not now - secs < r["request_finished_ts"] <= now:
                continue
            total += 1
            if r["finish_reason"]["type"] not in ("stop", "length"):
                continue
            n = r["completion_tokens"]
            t = 0.0 if n <= 1 else (r["e2e_latency"] - r["first_token_latency"]) / (n - 1)
            good += r["first_token_latency"] <= ttft and t <= tpot
        out[w] = (good, total)
    return out


def emulated(tmp_path: Path, ttft: float, tpot: float) -> tuple[EmulatedDeployment, Config, float]:
    base = config_for(tmp_path, ttft_target_seconds=ttft, tpot_target_seconds=tpot)
    dep = base.deployments[0].model_copy(update={"targets": []})
    dep = dep.model_validate({**dep.model_dump(), "targets": [{"role": "server", "url": "http://127.0.0.1:1/m"}]})
    wall = hour_start("20250102_03") + 3600 - 150  # the run crosses the hour: two files
    emu = EmulatedDeployment(dep, seed=7, wall_start=wall, request_log_dir=tmp_path / "emu")
    log_dir = tmp_path / "emu" / emu.servers[0].spec.name
    cfg = config_for(log_dir, ttft_target_seconds=ttft, tpot_target_seconds=tpot)
    return emu, cfg, wall


def test_goodput_equals_ground_truth_across_hour_rollover(tmp_path: Path):
    emu, cfg, wall = emulated(tmp_path, ttft=0.8, tpot=0.03)
    reader = RequestLogReader(cfg)
    for _ in range(8):  # polls interleaved with writes, across the hour boundary
        emu.advance(50)
        reader.poll(wall + emu.now)
    now = wall + emu.now
    records = read_records(tmp_path / "emu")
    assert len({Path(p).name for p in (tmp_path / "emu").rglob("*.log")}) == 2
    expected = truth(records, now, 0.8, 0.03)
    got = reader.summaries["dep"]
    for w, (good, total) in expected.items():
        assert (got[w].good, got[w].requests) == (good, total), w
    assert 0 < got["30m"].good < got["30m"].requests == len(records)
    assert reader.counts()[0].lines == len(records) and reader.counts()[0].errors == 0


def test_restart_with_saved_offsets_does_not_recount(tmp_path: Path):
    emu, cfg, wall = emulated(tmp_path, ttft=0.8, tpot=0.03)
    state = tmp_path / "offsets.json"
    first = RequestLogReader(cfg, state)
    emu.advance(120)
    first.poll(wall + emu.now)
    before = first.counts()[0].lines
    emu.advance(120)  # written while the sidecar is down
    second = RequestLogReader(cfg, state)
    second.poll(wall + emu.now)
    records = read_records(tmp_path / "emu")
    assert 0 < before < len(records)
    assert second.counts()[0].lines == len(records)  # old lines not counted twice
    expected = truth(records, wall + emu.now, 0.8, 0.03)
    assert {w: (s.good, s.requests) for w, s in second.summaries["dep"].items()} == expected
    # The goodput counters (what the SLO rules take rates of) carry on across the restart, exactly.
    good_all = truth(records, wall + emu.now + 1, 0.8, 0.03)["6h"][0]
    assert (second.counts()[0].finished, second.counts()[0].good) == (len(records), good_all)
    assert first.counts()[0].finished == before and first.counts()[0].good < before


def test_goodput_counters_equal_ground_truth_and_only_grow(tmp_path: Path):
    emu, cfg, wall = emulated(tmp_path, ttft=0.8, tpot=0.03)
    reader = RequestLogReader(cfg)
    seen = []
    for _ in range(6):
        emu.advance(60)
        reader.poll(wall + emu.now)
        c = reader.counts()[0]
        seen.append((c.finished, c.good))
    records = read_records(tmp_path / "emu")
    good, total = truth(records, wall + emu.now + 1, 0.8, 0.03)["6h"]
    assert seen[-1] == (total, good) and 0 < good < total
    assert seen == sorted(seen) and all(g <= f for f, g in seen)


def test_malformed_lines_are_counted_named_and_skipped(log_dir: Path, caplog):
    f = log_dir / name_for("20250102_03")
    append(f, line(rec("1", 100.0)) + "{broken\n" + line(rec("2", 101.0, ttft=5.0)))
    reader = RequestLogReader(config_for(log_dir))
    reader.poll(200.0)
    t = reader.targets[0]
    assert (t.lines, t.errors) == (3, 1)
    assert t.last_error.startswith(f"{log_dir}/{f.name}:2: not JSON")
    assert f"{f.name}:2" in caplog.text
    w = reader.summaries["dep"]["5m"]
    assert (w.requests, w.good, w.missed["ttft"]) == (2, 1, 1)
