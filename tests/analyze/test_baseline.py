"""The baseline is checked before anything is compared with it: synthetic datasets with one defect each."""

from __future__ import annotations

import argparse
import random

import pytest

from monitor.analyze.baseline import choose_baseline
from monitor.analyze.correlate import change
from monitor.analyze.model import Dataset, Series, grid
from monitor.commands.analyze import build_report

STEP = 10.0
N = 120  # 0 .. 1190 s; the range analysed is 600 .. 1190


def _series(key: str, values: list[float | None], unit: str = "") -> Series:
    return Series(key, key, "x", unit, tuple(values))


def _dataset(finished: list[float | None], **extra: list[float | None]) -> Dataset:
    times = grid(0, (N - 1) * STEP, STEP)
    series = {"rate.requests_total": _series("rate.requests_total", finished)}
    series.update({k.replace("__", "."): _series(k.replace("__", "."), v) for k, v in extra.items()})
    return Dataset("d", "test", times, STEP, {}, series, {})


def _noisy(level: float, seed: int, n: int = N) -> list[float | None]:
    rnd = random.Random(seed)
    return [level * (1 + 0.05 * rnd.uniform(-1, 1)) for _ in range(n)]


def test_a_baseline_before_the_deployment_started_is_clipped_past_its_warm_up_and_said():
    finished = [None] * 20 + _noisy(2.0, 1, N - 20)  # no data before 200 s
    ds = _dataset(finished)
    b = choose_baseline(ds, 600, 1190, 60)
    assert b.trusted and b.source == "before the range"
    assert min(ds.times[i] for i in b.indices) >= 200 + 60  # data from 200 s, 60 s of warm-up left out
    assert any("started inside the baseline" in n for n in b.notes) and any("warm-up" in n for n in b.notes)


def test_scrape_gaps_and_counters_born_inside_the_baseline_are_said():
    finished = _noisy(2.0, 2)
    finished[30:36] = [None] * 6  # a minute without scrapes
    born = [None] * 40 + _noisy(1.0, 3, N - 40)
    b = choose_baseline(_dataset(finished, rate__retracted_total=born), 600, 1190, 60)
    assert not any(30 <= i < 36 for i in b.indices)
    assert any("scrape gaps: 60 s" in n for n in b.notes)
    assert any("rate.retracted_total: counter first seen" in n and "born there" in n for n in b.notes)


def test_too_little_before_the_range_falls_back_to_its_healthy_start_then_to_untrusted():
    finished = [None] * 55 + _noisy(2.0, 4, N - 55)  # data from 550 s: 50 s before --from at 600
    ds = _dataset(finished)
    b = choose_baseline(ds, 600, 1190, 60, breaches=[(900, None, True)])
    assert b.trusted and b.source == "start of the range" and b.end == 840  # one window before the breach
    assert "unusable" in b.notes[0]
    b = choose_baseline(ds, 600, 1190, 60, breaches=[(650, None, True)])
    assert not b.trusted and "--baseline" in b.notes[-1]


def test_a_given_baseline_is_used_as_given():
    ds = _dataset(_noisy(2.0, 5))
    b = choose_baseline(ds, 600, 1190, 60, requested=(100, 300))
    assert b.source == "given" and b.trusted and (b.start, b.end) == (100, 300)
    assert all(100 < ds.times[i] <= 300 for i in b.indices)
    assert not choose_baseline(ds, 600, 1190, 60, requested=(100, 120)).trusted


def test_no_z_against_a_baseline_that_never_varied():
    flat = tuple([0.0] * 20 + [5.0] * 10)
    z, ratio, _, incident, changed_at = change(flat, tuple(range(30)), range(0, 20), range(20, 30))
    assert z is None and incident == 5.0 and changed_at == 20


def test_cli_rejects_a_baseline_that_is_not_a_range(tmp_path):
    args = argparse.Namespace(config=None, deployment="d", from_="1000", to="2000", window="1m", step=None,
                              prometheus=None, recording=str(tmp_path / "r.db"), sli=None, timeout=5.0,
                              baseline="900")
    with pytest.raises(ValueError, match="expected T1..T2"):
        build_report(args, now=lambda: 3000.0, progress=lambda _: None)
    args.baseline = "500..1500"
    with pytest.raises(ValueError, match="must end at or before --from"):
        build_report(args, now=lambda: 3000.0, progress=lambda _: None)


def test_without_a_breach_the_fallback_baseline_leaves_the_range_to_compare_with():
    """#32 item 6: data from 100 s, the range 150..1190 s (its default baseline holds 50 s of data, less its
    warm-up) and nothing breached: before, the fallback baseline was the whole range, so a restart or a surge that
    breached nothing could never move. Now it is the usable data before --from and only as much of the range as a
    baseline needs."""
    finished = [None] * 10 + _noisy(2.0, 3, N - 10)
    ds = _dataset(finished)
    b = choose_baseline(ds, 150, 1190, 10)
    assert b.source == "start of the range" and b.trusted
    assert b.end < 300, b
    assert len(b.indices) * STEP >= 60


def test_the_healthy_start_skips_the_warm_up_breaches_and_ends_before_the_first_fault():
    """A deployment whose data begins at 100 s, read from there (`--from now-1h` on a young recording): a breach
    inside the warm-up that ended there is its windows filling, not where the healthy start ends; a fault (a server
    down that breached nothing yet) ends it like a breach."""
    ds = _dataset([None] * 10 + _noisy(2.0, 5, N - 10))
    b = choose_baseline(ds, 100, 1190, 60, [(110, 150, False), (900, None, True)])
    assert b.trusted and b.source == "start of the range" and b.end == 840, b
    assert ds.times[b.indices[0]] >= 160  # the warm-up (one window after the first traffic) left out
    b = choose_baseline(ds, 100, 1190, 60, [(110, 150, False), (900, None, True)], fault=500)
    assert b.trusted and b.end == 440, b


def test_a_deployment_breaching_from_its_first_traffic_on_is_compared_with_its_first_stretch():
    """A breach that began in the warm-up and outlasted it: the target never held at this load, there is no
    healthy start to find, and the first stretch after the warm-up stands in as how it was (trusted, taken inside
    the range, so never a reason for high confidence). One that ended inside the warm-up leaves nothing."""
    ds = _dataset([None] * 10 + _noisy(2.0, 6, N - 10))
    b = choose_baseline(ds, 100, 1190, 60, [(110, 300, True), (200, None, True)])
    assert b.trusted and b.source == "start of the range", b
    assert ds.times[b.indices[0]] >= 160 and len(b.indices) * STEP >= 60
    assert "breached from the deployment's first traffic on" in b.notes[-1]
    b = choose_baseline(ds, 100, 1190, 60, [(110, 150, False), (200, None, True)])
    assert not b.trusted and "--baseline" in b.notes[-1], b
    b = choose_baseline(ds, 100, 1190, 60, [(110, 300, True), (200, None, True)], fault=180)
    assert not b.trusted, b  # the stand-in never holds the first fault


def test_a_pile_of_abandoned_requests_ends_the_healthy_start_and_a_few_cancels_do_not():
    """A client timeout breaches no latency SLI, so no breach ends the healthy start before it: a pile of abandoned
    requests does (GIVE_UP_MIN or more in one window, over three times the rate before it), dated at its first
    step; clients cancelling now and then (one every 50 s) do not."""
    from monitor.analyze.report import first_pile

    times = [i * STEP for i in range(N)]
    background = [0.02] * N
    assert first_pile(times, background, 100, 1190, 60) is None
    pile = [2.0 if 700 <= t < 760 else v for t, v in zip(times, background)]
    assert first_pile(times, pile, 100, 1190, 60) == 700
    assert first_pile(times, [None] * N, 100, 1190, 60) is None
