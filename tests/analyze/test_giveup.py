"""Aborts piled at one age are clients giving up (monitor/analyze/giveup.py), and the verdict names them; random
hang-ups, failures and slowdowns are not."""

from __future__ import annotations

import pytest

from monitor.analyze.diagnose import CLIENT_GIVE_UP, DECODE_SLOWDOWN, HEALTHY
from monitor.analyze.giveup import give_up
from monitor.analyze.report import analyze
from monitor.slo.histogram import Hist
from tests.analyze.test_baseline import N
from tests.analyze.test_diagnose import _engine, _with

EDGES = (2.0, 4.0, 6.0, 8.0, 10.0, 20.0, float("inf"))
NORMAL = (0.0, 10.0, 60.0, 25.0, 5.0, 0.0, 0.0)  # per step: E2E of 100 requests, most 4-8 s


def _e2e(per_step: list[tuple[float, ...]]) -> tuple[Hist, ...]:
    """Cumulative histograms from per-step, per-bucket observations (each aged at its bucket's upper edge)."""
    return _e2e_sums([(counts, sum(c * min(e, 25.0) for c, e in zip(counts, EDGES))) for counts in per_step])


def _e2e_sums(per_step: list[tuple[tuple[float, ...], float]]) -> tuple[Hist, ...]:
    """Cumulative histograms from per-step (per-bucket observations, sum of their ages)."""
    out, acc, total_sum = [], [0.0] * len(EDGES), 0.0
    for counts, ages in per_step:
        acc = [a + c for a, c in zip(acc, counts)]
        total_sum += ages
        cum, run = [], 0.0
        for a in acc:
            run += a
            cum.append(run)
        out.append(Hist(EDGES, tuple(cum), total_sum, cum[-1]))
    return tuple(out)


# From step 80 clients give up at 2 s: 40 of each step's 100 requests are aborted at 4 s of age, nothing is older.
TIMEOUT = (0.0, 10.0 + 50.0, 40.0, 0.0, 0.0, 0.0, 0.0)
SLOWER = (0.0, 0.0, 10.0, 60.0, 25.0, 5.0, 0.0)  # every request a bucket later: a slowdown


def test_aborts_piled_at_one_age_with_nothing_older_are_a_timeout():
    hs = _e2e([NORMAL] * 80 + [TIMEOUT] * (N - 80))
    found = give_up(hs, range(1, 70), range(80, N), aborted=40.0 * (N - 80))
    assert found is not None and (found.lo, found.hi) == (2.0, 4.0)
    assert found.excess == pytest.approx(40.0 * (N - 80), rel=0.3)


def test_a_timeout_inside_the_usual_answers_bucket_is_a_timeout_with_the_pile_it_can_make():
    # Clients give up where most answers end anyway (4-6 s): 80 of each step's 100 requests are aborted there,
    # but only the 30 that would have ended later add to that bucket; nothing is older.
    inside = (0.0, 10.0, 90.0, 0.0, 0.0, 0.0, 0.0)
    hs = _e2e([NORMAL] * 80 + [inside] * (N - 80))
    found = give_up(hs, range(1, 70), range(80, N), aborted=80.0 * (N - 80))
    assert found is not None and (found.lo, found.hi) == (4.0, 6.0)


def test_a_pile_that_straddles_a_bucket_edge_is_a_timeout_too():
    # Clients whose timeouts differ a little (3.5-4.5 s): 50 of each step's 100 requests are cut, 20 landing in
    # 2-4 s and 30 in 4-6 s, where 20 of the bucket's own were among those cut. No one bucket holds the pile.
    straddle = (0.0, 30.0, 70.0, 0.0, 0.0, 0.0, 0.0)
    hs = _e2e([NORMAL] * 80 + [straddle] * (N - 80))
    found = give_up(hs, range(1, 70), range(80, N), aborted=50.0 * (N - 80))
    assert found is not None and (found.lo, found.hi) == (2.0, 6.0)


@pytest.mark.parametrize(("later", "aborted", "why"), [
    (SLOWER, 40.0, "a slowdown moves every request, far more than it aborts"),
    (TIMEOUT, 5.0, "a few aborts are clients hanging up on their own"),
    (NORMAL, 400.0, "aborts that leave the ages as they were are no timeout"),
])
def test_what_is_not_a_timeout(later, aborted, why):
    hs = _e2e([NORMAL] * 80 + [later] * (N - 80))
    assert give_up(hs, range(1, 70), range(80, N), aborted=aborted) is None, why


def test_the_verdict_names_clients_giving_up_and_not_the_aborts_as_their_consequence():
    aborted = [0.1] * 80 + [4.0] * (N - 80)  # 40 of the 100 requests a step (10 s) from 800 s
    ds = _with(_engine(None, None, rate__aborted_requests_total=aborted),
               {"e2e": _e2e([NORMAL] * 80 + [TIMEOUT] * (N - 80))}, {})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == CLIENT_GIVE_UP and v.cause.signal.key == "gave_up", v.headline
    assert "requests aborted at 2–4 s of age" in v.headline and "aborted requests rate" not in v.headline
    # The same aborts with the ages of a slowdown: not a timeout (and the slowdown is what the engine says).
    slow = _with(_engine(80, None, rate__aborted_requests_total=aborted),
                 {"e2e": _e2e([NORMAL] * 80 + [SLOWER] * (N - 80))}, {})
    v = analyze(slow, 600, 1190, 60).verdict
    assert v.mechanism == DECODE_SLOWDOWN and not v.shifts["gave_up"].moved, v.headline


def test_many_aborts_at_no_one_age_keep_no_incident_from_high_confidence():
    # 40 aborts a step from 800 s, the ages as they were (clients giving up at random, or a timeout whose age
    # falls where the requests finish anyway): not a timeout, but not "nothing happened" either.
    aborted = [0.0] * 80 + [4.0] * (N - 80)
    ds = _with(_engine(None, None, rate__aborted_requests_total=aborted), {"e2e": _e2e([NORMAL] * N)}, {})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == HEALTHY and v.confidence == "low", v.headline
    assert "requests aborted (at no one age)" in v.headline and "with no cause found" in v.headline, v.headline


@pytest.mark.parametrize(("aborts", "trace"), [(6, True), (3, False)])
def test_a_few_aborts_are_a_trace_that_keeps_no_incident_from_high_confidence(aborts, trace):
    # Too few aborts to read an age from (under GIVE_UP_MIN) but half of it or more: a trace, like a demand or
    # capacity move under its threshold. Fewer are clients hanging up on their own.
    aborted = [0.0] * 80 + [0.1] * aborts + [0.0] * (N - 80 - aborts)  # one abort a step (10 s)
    ds = _with(_engine(None, None, rate__aborted_requests_total=aborted), {"e2e": _e2e([NORMAL] * N)}, {})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == HEALTHY and ("too few to read an age from" in v.headline) == trace, v.headline
    if trace:
        assert v.confidence == "low", v.headline


@pytest.mark.parametrize(("per_step", "high"), [(0.0, True), (4.0, False)])
def test_many_aborts_at_no_one_age_beside_a_strong_cause_keep_it_from_high_confidence(per_step, high):
    """A halved decode speed is a strong cause; 40 aborts a step from the same time at no one age (the histogram
    cannot say why those clients left: their timeout may be a second incident) keep it at medium. The slowdown
    explains no aborts (`causes.py`: only failures and clients giving up do)."""
    aborted = [0.0] * 80 + [per_step] * (N - 80)
    ds = _with(_engine(80, None, rate__aborted_requests_total=aborted), {"e2e": _e2e([NORMAL] * N)}, {})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == DECODE_SLOWDOWN, v.headline
    assert (v.confidence == "high") == high, v.headline


ALL_4_6 = (0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 0.0)  # every request ends at 4-6 s


@pytest.mark.parametrize(("incident", "ages", "found", "why"), [
    (ALL_4_6, 475.0, (4.0, 6.0), "half the requests cut at 4.8 s: the mean fell from 5.2 to 4.75 s in the same bucket"),
    (ALL_4_6, 520.0, None, "aborts that end requests no earlier than they would have are no timeout"),
    ((0.0, 10.0, 90.0, 0.0, 0.0, 0.0, 0.0), 470.0, None, "some went to an earlier bucket, the rest stayed: no one age"),
])
def test_a_timeout_inside_the_bucket_the_requests_end_in_is_read_from_the_mean_age(incident, ages, found, why):
    """The abort age lies inside the one bucket every request ends in: nothing piles, but the histogram's `_sum`
    says the requests ended earlier, and no bucket's share moved (50 of each step's 100 requests aborted)."""
    hs = _e2e_sums([(ALL_4_6, 520.0)] * 80 + [(incident, ages)] * (N - 80))
    got = give_up(hs, range(1, 70), range(80, N), aborted=50.0 * (N - 80))
    assert (None if got is None else (got.lo, got.hi)) == found, why
