"""Series expiry: what stops appearing is retired after the longest window, memory stays flat under churn."""

from __future__ import annotations

import json
import math

from monitor.conventions.policy import SERIES_EXPIRY_SECONDS
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.record.codec import book_from, book_to
from tests.slo.helpers import histogram_lines
from tests.slo.test_engine import make

W = engine_wanted()
T0 = 1_800_000_000.0
TPOT = "sglang:request_time_per_output_token_seconds"
EDGES = [0.02, 0.04, 0.08]


def churned(generation: int, n: int, requests: float, bad: int = 0) -> str:
    """n request counters and n TPOT histograms whose label values change with each generation."""
    lines = []
    for i in range(n):
        labels = f'engine_type="unified",model_name="m",lora="g{generation}-{i}"'
        lines.append(f"sglang:num_requests_total{{{labels}}} {requests}")
        lines += histogram_lines(TPOT, EDGES, [0.03] * int(requests) + [0.5] * bad, labels)
    return "\n".join(lines) + "\n"


def test_series_absent_longer_than_the_longest_window_are_retired_and_totals_do_not_move():
    eng, (srv,) = make()
    eng.observe(srv, parse(churned(0, 3, 10), W), T0)
    eng.snapshot(T0)
    eng.observe(srv, parse(churned(0, 3, 20), W), T0 + 60)
    eng.snapshot(T0 + 60)
    total_before = eng.store.latest().counters["requests_total"]
    hist_before = eng.store.latest().hists["tpot"].total
    # Generation 0 disappears; generation 1 appears and grows. Snapshots every 5 min for 7 h.
    t, value = T0 + 60, 0.0
    while t < T0 + 60 + SERIES_EXPIRY_SECONDS + 3600:
        t += 300
        value += 1
        eng.observe(srv, parse(churned(1, 3, value), W), t)
        eng.snapshot(t)
        if t < T0 + 60 + SERIES_EXPIRY_SECONDS:
            assert len(eng.book.scalars) == 6  # both generations held while gen 0 may still matter
    assert len(eng.book.scalars) == 3 and len(eng.book.hists) == 3  # gen 0 retired
    assert eng.book.retired_scalars["sglang:num_requests_total"] == total_before
    assert eng.book.retired_hists[TPOT].total == hist_before
    latest = eng.store.latest()
    assert latest.counters["requests_total"] == total_before + 3 * value  # nothing lost, nothing doubled
    assert latest.hists["tpot"].total == hist_before + 3 * value
    # Every window keeps its rate: 3 requests per 300 s, before and after the retirement.
    assert math.isclose(eng.state(t).rates["requests_total"], 3 / 300)
    assert eng.state(t).slis["tpot"].windows["1h"].events == 3 * 12


def test_memory_stays_flat_under_label_churn():
    """Every 30 min the label values change: accumulators and the recorded book stop growing after 6 h."""
    eng, (srv,) = make()
    counts, sizes = {}, {}
    t = T0
    for step in range(24 * 12):  # 24 h, a scrape every 5 min
        t = T0 + step * 300
        generation = step // 6
        eng.observe(srv, parse(churned(generation, 20, 1 + step % 6), W), t)
        eng.snapshot(t)
        if step % 12 == 0:
            hour = step // 12
            counts[hour] = len(eng.book.scalars) + len(eng.book.hists)
            sizes[hour] = len(json.dumps(book_to(eng.book)))
    live = 2 * 20  # one generation: 20 counters, 20 histograms
    # Held: the live generation plus those absent for less than the 6 h horizon (and one sweep).
    assert counts[23] <= live * (SERIES_EXPIRY_SECONDS / 1800 + 2)
    assert counts[23] == counts[12] and counts[18] == counts[12]
    assert sizes[23] <= sizes[12] * 1.01 and sizes[18] <= sizes[12] * 1.01
    assert counts[23] < counts[1] * 14  # without expiry: 48 generations held by now


def test_a_target_gone_longer_than_the_horizon_is_a_first_scrape_when_it_returns():
    """Its series start at 0 again: the history it built while the sidecar was not looking is not
    one window's events (as on any target's first scrape)."""
    eng, (srv,) = make()
    eng.observe(srv, parse(churned(0, 1, 100), W), T0)
    eng.snapshot(T0)
    t = T0
    while t < T0 + SERIES_EXPIRY_SECONDS + 600:
        t += 300
        eng.target_down(srv)
        eng.snapshot(t)
    assert not eng.book.scalars
    eng.observe(srv, parse(churned(0, 1, 5000), W), t + 300)  # back, having served 4900 meanwhile
    eng.snapshot(t + 300)
    eng.observe(srv, parse(churned(0, 1, 5010), W), t + 600)
    eng.snapshot(t + 600)
    assert math.isclose(eng.state(t + 600).rates["requests_total"], 10 / 300)  # not 4910 in one window


def test_the_recorded_book_keeps_retired_totals_and_last_seen_and_reads_older_books():
    eng, (srv,) = make()
    eng.observe(srv, parse(churned(0, 2, 10), W), T0)
    eng.observe(srv, parse(churned(0, 2, 15), W), T0 + 30)  # counted from the first scrape: 5 each
    eng.book.expire(T0 + 31)
    eng.observe(srv, parse(churned(1, 2, 3), W), T0 + 60)
    back = book_from(json.loads(json.dumps(book_to(eng.book))))
    assert back.retired_scalars == eng.book.retired_scalars == {"sglang:num_requests_total": 10.0}
    assert back.retired_hists[TPOT] == eng.book.retired_hists[TPOT]
    assert {k: a.seen for k, a in back.scalars.items()} == {k: a.seen for k, a in eng.book.scalars.items()}
    old = {"hists": [], "scalars": [[["t", "sglang:num_requests_total", []], 5.0, 0.0, 0]]}  # before expiry
    assert book_from(old).scalars[("t", "sglang:num_requests_total", ())].seen == 0.0


STAGES = "sglang:per_stage_req_latency_seconds"


def staged(generation: int, forward: tuple[float, float], waiting: tuple[float, float]) -> str:
    """A mixed server's prefill_forward and prefill_waiting stages (seconds, requests): one family, two stages."""
    lines = []
    for stage, (secs, n) in (("prefill_forward", forward), ("prefill_waiting", waiting)):
        labels = f'engine_type="unified",model_name="m",lora="g{generation}",stage="{stage}"'
        lines += [f"{STAGES}_sum{{{labels}}} {secs}", f"{STAGES}_count{{{labels}}} {n}"]
    return "\n".join(lines) + "\n"


def test_stage_counters_count_their_own_stage_and_retire_and_restore_apart_from_the_family():
    # The recorded stages share SGLang's family (per_stage_req_latency_seconds_sum / _count) and differ by
    # `stage`: each counter counts its own stage only, its expired series retire into its own total (not the
    # family's, which would add prefill_waiting to prefill_forward), and a restored book feeds each counter.
    eng, (srv,) = make()
    eng.observe(srv, parse(staged(0, (1.0, 2), (50.0, 2)), W), T0)
    eng.snapshot(T0)
    eng.observe(srv, parse(staged(0, (4.0, 6), (90.0, 6)), W), T0 + 60)
    eng.snapshot(T0 + 60)
    got = eng.store.latest().counters
    assert (got["stage_prefill_forward_seconds_total"], got["stage_prefill_forward_requests_total"]) == (3.0, 4.0)
    assert "stage_prefill_bootstrap_seconds_total" not in got  # a PD prefill server's stage, not a mixed one's
    t = T0 + 60 + SERIES_EXPIRY_SECONDS + 600
    # Generation 0 gone for longer than the horizon; generation 1 is new on a known target: counted from 0.
    eng.observe(srv, parse(staged(1, (2.0, 1), (70.0, 1)), W), t)
    eng.snapshot(t)
    assert eng.book.retired_scalars == {"stage_prefill_forward_seconds_total": 3.0,
                                        "stage_prefill_forward_requests_total": 4.0}
    latest = eng.store.latest().counters
    assert (latest["stage_prefill_forward_seconds_total"], latest["stage_prefill_forward_requests_total"]) == (5.0, 5.0)
    again, (srv2,) = make()
    again.restore(eng.store.snapshots(), book_from(json.loads(json.dumps(book_to(eng.book)))))
    again.observe(srv2, parse(staged(1, (5.0, 3), (70.0, 1)), W), t + 60)
    again.snapshot(t + 60)
    latest = again.store.latest().counters
    assert (latest["stage_prefill_forward_seconds_total"], latest["stage_prefill_forward_requests_total"]) == (8.0, 7.0)



def _churn_run(monkeypatch, retire: bool) -> tuple[list[int], object, int]:
    import monitor.slo.engine as engine_module

    if not retire:
        monkeypatch.setattr(engine_module, "CHURN_MIN_SERIES", 10**9)
    eng, (srv,) = make()
    sizes = []
    for step in range(80):  # 400 s, a scrape every 5 s
        t = T0 + step * 5
        eng.observe(srv, parse(churned(step, 150, 1 + step % 7), W), t)  # 300 new series each scrape
        eng.snapshot(t)
        sizes.append(len(eng.book.scalars) + len(eng.book.hists))
    monkeypatch.undo()
    return sizes, eng.state(t), sum(eng.churned.values())


def test_fast_label_churn_is_retired_at_the_next_sweep_not_held_for_6_hours_and_windows_do_not_move(monkeypatch):
    """Issue #34 item 6: 300 new series a scrape for 400 s. Before, every one was held for the 6 h expiry (the
    book, RSS and the recording grew by 3,600 series a minute). Now the absent ones are retired at the next sweep
    once they outnumber the present ones 4 times over: the book stays within one sweep's churn, the windows count
    exactly what they count when all are held, and the retirements are counted."""
    from monitor.slo.engine import CHURN_FACTOR, CHURN_MIN_SERIES, EXPIRY_SWEEP_SECONDS

    sizes, state, churned_n = _churn_run(monkeypatch, retire=True)
    held, held_state, _ = _churn_run(monkeypatch, retire=False)
    live = 2 * 150
    bound = max(CHURN_FACTOR * live, CHURN_MIN_SERIES) + live * (EXPIRY_SWEEP_SECONDS / 5 + 1)
    assert max(sizes) <= bound < held[-1] / 3, (max(sizes), bound, held[-1])
    assert churned_n > 0
    for sli in ("tpot",):
        for w, h in zip(state.slis[sli].windows.values(), held_state.slis[sli].windows.values()):
            assert (w.events, w.good_ratio) == (h.events, h.good_ratio), (w, h)
