"""A server relaunched with other `--bucket-*` edges: a new accumulation for its series, never a merge of
layouts (issue 24 item 1). The windows after the change are exact on the new edges; windows reaching back
before it carry the old part interpolated, with bounds; the advice follows what the server exports now."""

from __future__ import annotations

import json
import math

import pytest

from monitor.record.codec import book_from, book_to, snapshot_from, snapshot_to
from monitor.slo.accumulate import HistAccumulator
from monitor.slo.engine import DeploymentEngine
from monitor.slo.histogram import Hist, delta, project
from tests.slo.helpers import exposition
from tests.slo.test_engine import feed, make

INF = math.inf
DEFAULT_PLUS_50MS = sorted({0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.05,
                            0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0})


def relaunched(eng, srv, *, edges, start=120, until=600, per_minute=100, good_share=0.9, good=0.045, bad=0.055):
    """Scrapes of a server relaunched at `start` with `edges`: `good_share` of its requests at `good`."""
    for k, t in enumerate(range(start, until + 1, 60)):
        n = per_minute * (k + 1)
        ok = round(n * good_share)
        feed(eng, srv, t, exposition(tpot=[good] * ok + [bad] * (n - ok), edges_tpot=edges))


def before_the_relaunch(eng, srv, obs=0.03):
    feed(eng, srv, 0, exposition(tpot=[obs] * 50))
    feed(eng, srv, 60, exposition(tpot=[obs] * 100))


def test_following_the_recommended_flag_gives_the_exact_sli_after_the_relaunch():
    # Target 50 ms is not a default edge; the sidecar recommends adding it; the server is relaunched so.
    eng, (srv,) = make(tpot=0.05)
    before_the_relaunch(eng, srv)
    assert eng.state(60).slis["tpot"].fix_flag is not None
    relaunched(eng, srv, edges=DEFAULT_PLUS_50MS)
    s = eng.state(600).slis["tpot"]
    assert s.exact and s.fix_flag is None and 0.05 in s.edges
    w = s.windows["5m"]  # from 300 s: wholly after the relaunch
    assert w.events == 500 and w.good_ratio == w.good_ratio_lower == w.good_ratio_upper == 0.9
    assert math.isclose(w.burn_rate, 10.0)
    assert eng.resets[srv.id] == 1


def test_a_window_reaching_back_before_the_relaunch_counts_both_parts():
    eng, (srv,) = make(tpot=0.05)
    before_the_relaunch(eng, srv)  # 50 requests in the window's old part, all at 30 ms: good on any layout
    relaunched(eng, srv, edges=DEFAULT_PLUS_50MS)
    w = eng.state(600).slis["tpot"].windows["30m"]
    assert w.events == 50 + 900
    assert math.isclose(w.good_ratio, (50 + 810) / 950)


def test_the_old_part_of_a_spanning_window_is_interpolated_within_bounds():
    eng, (srv,) = make(tpot=0.05)
    before_the_relaunch(eng, srv, obs=0.045)  # between the old edges 0.04 and 0.06: unknown side of 50 ms
    relaunched(eng, srv, edges=DEFAULT_PLUS_50MS)
    w = eng.state(600).slis["tpot"].windows["30m"]
    truth_low, truth_high = 810 / 950, (810 + 50) / 950
    assert math.isclose(w.good_ratio_lower, truth_low) and math.isclose(w.good_ratio_upper, truth_high)
    assert truth_low < w.good_ratio < truth_high


def test_a_custom_list_sharing_no_finite_edge_with_the_default_keeps_the_sli():
    eng, (srv,) = make(tpot=0.1)
    before_the_relaunch(eng, srv, obs=0.05)
    relaunched(eng, srv, edges=[0.075, 0.15, 0.3], good_share=1.0, good=0.05)
    s = eng.state(600).slis["tpot"]
    assert s.edges == (0.075, 0.15, 0.3, INF)
    w = s.windows["5m"]
    assert w.events == 500 and w.good_ratio == 1.0 and w.burn_rate == 0.0
    assert s.fix_flag is not None and " 0.1 " in s.fix_flag + " "  # advice on the layout exported now


def test_the_relaunch_is_said_on_the_target_until_the_longest_window_has_passed_it():
    eng, (srv,) = make(tpot=0.05)
    before_the_relaunch(eng, srv)
    relaunched(eng, srv, edges=DEFAULT_PLUS_50MS, until=180)
    notes = [w for w in eng.warnings[srv.id] if "bucket layout changed" in w]
    assert len(notes) == 1 and "0.05" in notes[0]
    for t in (120 + 6 * 3600, 120 + 6 * 3600 + 60):  # a scrape is dated by the snapshot before it here
        feed(eng, srv, t, exposition(tpot=[0.045] * 300, edges_tpot=DEFAULT_PLUS_50MS))
    assert not [w for w in eng.warnings[srv.id] if "bucket layout changed" in w]


def test_the_sli_stays_right_through_a_restart_from_the_recording():
    eng, (srv,) = make(tpot=0.05)
    before_the_relaunch(eng, srv)
    relaunched(eng, srv, edges=DEFAULT_PLUS_50MS, until=300)
    snaps = [snapshot_from(json.loads(json.dumps(snapshot_to(s)))) for s in eng.store.snapshots()]
    book = book_from(json.loads(json.dumps(book_to(eng.book))))
    again = DeploymentEngine(eng.deployment)
    again.restore(snaps, book)
    # The relaunched server keeps counting: 100 more requests a minute, 90 % good.
    for k, t in enumerate(range(360, 901, 60), start=4):
        n = 100 * (k + 1)
        feed(again, srv, t, exposition(tpot=[0.045] * (n * 9 // 10) + [0.055] * (n // 10),
                                      edges_tpot=DEFAULT_PLUS_50MS))
    s = again.state(900).slis["tpot"]
    assert s.exact and s.windows["5m"].good_ratio == 0.9 and s.windows["5m"].events == 500


def test_an_offset_recorded_on_the_old_edges_is_read_on_the_new_ones():
    # A recording written before the fix: the reset offset still on the old layout, the raw value on the new.
    old = Hist((0.04, 0.06, INF), (10.0, 20.0, 20.0), 0.9, 20.0)
    new = Hist((0.04, 0.05, 0.06, INF), (9.0, 9.0, 10.0, 10.0), 0.45, 10.0)
    acc = HistAccumulator(last_raw=new, offset=old)
    adjusted = acc.adjusted()
    assert adjusted.edges == new.edges and adjusted.cumulative == (19.0, 24.0, 30.0, 30.0)


def test_project_interpolates_like_the_good_ratio_and_is_exact_on_shared_edges():
    h = Hist((0.04, 0.06, INF), (10.0, 20.0, 24.0), 1.0, 24.0)
    p = project(h, (0.04, 0.05, 0.06, 0.1, INF))
    assert p.cumulative == pytest.approx((10.0, 15.0, 20.0, 20.0, 24.0))  # beyond the last finite edge: conservative
    assert project(h, (0.04, 0.05, INF), "floor").cumulative == (10.0, 10.0, 24.0)
    assert project(h, (0.04, 0.05, INF), "ceil").cumulative == (10.0, 20.0, 24.0)
    assert project(h, (0.02, INF)).cumulative == (5.0, 24.0)  # from (0, 0) to the first edge


def test_delta_across_layouts_is_taken_on_the_newer_edges():
    # Start on the old edges; now = the relaunched server's raw counts + its old total projected (the offset).
    start = Hist((0.04, 0.06, INF), (10.0, 20.0, 20.0), 0.9, 20.0)
    final_old = Hist((0.04, 0.06, INF), (12.0, 24.0, 24.0), 1.1, 24.0)
    raw_new = Hist((0.04, 0.05, 0.06, INF), (5.0, 8.0, 9.0, 10.0), 0.5, 10.0)
    acc = HistAccumulator()
    acc.update(final_old)
    acc.update(raw_new)
    now = acc.adjusted()
    assert now.cumulative == (17.0, 26.0, 33.0, 34.0)
    d = delta(now, start)
    assert d.edges == raw_new.edges and d.cumulative == pytest.approx((7.0, 11.0, 13.0, 14.0)) and d.count == 14.0
