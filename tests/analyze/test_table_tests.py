"""The causal table's tests of timing and size (diagnose.TESTS) and what keeps a verdict from "high", on
hand-built shifts: each rule's reason, checked without a lab run."""

from __future__ import annotations

from monitor.analyze import diagnose as d
from monitor.analyze.signals import Signal

STEP = 10.0
T0 = 1_700_000_000.0


def _sig(key: str, side: str = d.CAPACITY, unit: str = "s", worse: int = 1) -> Signal:
    return Signal(key, key, side, unit, (None,) * 60, worse)


def _shift(key: str, baseline: float, incident: float, at: float | None, *, side: str = d.CAPACITY,
           events: float = 0.0, seconds: float = 0.0, unit: str = "s") -> d.Shift:
    return d.Shift(_sig(key, side, unit), baseline, incident, None if at is None else T0 + at, at is not None,
                   events, seconds)


def _ctx(*shifts: d.Shift) -> d.Context:
    sh = {s.signal.key: s for s in shifts}
    return d.Context(sh, {k: s.signal for k, s in sh.items()}, range(0, 20), range(20, 60), 2, STEP, 3 * STEP)


def _cand(mech: str, s: d.Shift) -> d.Candidate:
    return d.Candidate(mech, s, [c.mechanism for c in d.CAUSES].index(mech))


def test_a_restart_explains_a_slower_prefill_only_as_far_as_the_cache_it_lost_could():
    down = _shift("targets_down", 0, 1, 100, side=d.EVENT, unit="targets", seconds=20)
    prefill = _shift("prefill_time", 1.0, 2.0, 130)
    lead, other = _cand(d.SERVER_DOWN, down), _cand(d.PREFILL_SLOWDOWN, prefill)
    never_hit = _ctx(down, prefill, _shift("cache_hit", 0.0, 0.0, None, side=d.DEMAND, unit="ratio"))
    assert not d.TESTS["cold"](never_hit, lead, other), "an empty cache cannot slow a deployment whose cache never hit"
    hit = _ctx(down, prefill, _shift("cache_hit", 0.6, 0.6, None, side=d.DEMAND, unit="ratio"))
    assert d.TESTS["cold"](hit, lead, other), "losing 60 % hits prefills up to 2.5x more"
    late = _shift("prefill_time", 1.0, 2.0, 300)
    assert not d.TESTS["cold"](hit, lead, _cand(d.PREFILL_SLOWDOWN, late)), "long after the restart: not its cache"


def test_failures_explain_only_the_aborts_that_begin_with_them():
    failed = _shift("transfer_failed", 0, 2.0, 100, side=d.EVENT, unit="req/s", events=400)
    together = _shift("gave_up", 0, 1.0, 110, side=d.EVENT, unit="req/s", events=300)
    later = _shift("gave_up", 0, 1.0, 200, side=d.EVENT, unit="req/s", events=100)
    lead = _cand(d.KV_TRANSFER_FAILURE, failed)
    assert d.TESTS["count"](_ctx(failed, together), lead, _cand(d.CLIENT_GIVE_UP, together))
    assert not d.TESTS["count"](_ctx(failed, later), lead, _cand(d.CLIENT_GIVE_UP, later)), \
        "a failure aborts its request at once: aborts piling up 100 s later are a timeout of their own"
    more = _shift("gave_up", 0, 1.0, 110, side=d.EVENT, unit="req/s", events=500)
    assert not d.TESTS["count"](_ctx(failed, more), lead, _cand(d.CLIENT_GIVE_UP, more))


def test_more_prefill_work_explains_a_slower_prefill_only_while_it_lasts():
    burst = _shift("arrivals", 1.0, 2.0, 100, side=d.DEMAND, unit="req/s", seconds=40)
    during = _shift("prefill_time", 1.0, 1.8, 110, seconds=40)
    stays = _shift("prefill_time", 1.0, 1.8, 110, seconds=300)
    lead = _cand(d.OVERLOAD, burst)
    assert d.TESTS["work"](_ctx(burst, during), lead, _cand(d.PREFILL_SLOWDOWN, during))
    assert not d.TESTS["work"](_ctx(burst, stays), lead, _cand(d.PREFILL_SLOWDOWN, stays)), \
        "a slowdown that stays after a 40 s burst of arrivals is not the burst's"
    big = _shift("prefill_time", 1.0, 2.5, 110, seconds=40)
    assert not d.TESTS["work"](_ctx(burst, big), lead, _cand(d.PREFILL_SLOWDOWN, big)), "2.5x slower for 2x the work"


def test_a_cause_named_alone_over_an_explained_mechanism_or_beside_one_in_the_blur_is_not_high():
    heat = _cand(d.ACCELERATOR_OVERHEAT, _shift("temperature", 50, 80, 100))
    decode = _cand(d.DECODE_SLOWDOWN, _shift("itl_mean", 0.05, 0.1, 120))
    assert d._ambiguous([heat], {d.DECODE_SLOWDOWN: d.ACCELERATOR_OVERHEAT}, 30.0)
    assert not d._ambiguous([heat], {}, 30.0)
    assert d._ambiguous([heat, decode], {}, 30.0), "20 s apart within a 30 s blur: which led is not known"
    far = _cand(d.DECODE_SLOWDOWN, _shift("itl_mean", 0.05, 0.1, 200))
    assert not d._ambiguous([heat, far], {}, 30.0), "both named, 100 s apart: the order is the data's"


def test_only_waiting_consequences_are_a_busy_servers_own_swing():
    def moved(*keys: str) -> list[d.Shift]:
        return [_shift(k, 1.0, 2.0, 100, side=d.CONSEQUENCE) for k in keys]
    assert d._waiting_only(moved("queued", "running", "token_usage"))
    assert d._waiting_only(moved("queued", "aborted")), "a client that leaves a long wait is the queue's too"
    assert not d._waiting_only(moved("aborted")), "aborts with no queue are something happening"
    assert not d._waiting_only(moved("queued", "finished")), "more served is more demand"
    assert not d._waiting_only([])


def test_a_faint_decode_slowdown_is_the_loads_only_where_the_batch_grew_more_than_the_slowdown_grows_it():
    running = _shift("running", 10.0, 13.0, 100, side=d.CONSEQUENCE, unit="requests")
    swing = _ctx(running, _shift("itl_mean", 0.05, 0.06, 110))
    assert d._swing_batch(swing, swing.sh["itl_mean"]), "13 running for 10, ITL 1.2x: the batch's own cost"
    held = _ctx(_shift("running", 10.0, 12.0, 100, side=d.CONSEQUENCE, unit="requests"),
                _shift("itl_mean", 0.05, 0.06, 110))
    assert not d._swing_batch(held, held.sh["itl_mean"]), \
        "1.2x more running for a 1.2x slower step is Little's law of the slowdown itself, not the load"
