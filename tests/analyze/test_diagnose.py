"""The verdict reasons from demand and capacity: synthetic deployments with one mechanism each (the incident
lab, test_incident_lab.py, runs the emulator's)."""

from __future__ import annotations

import random

import pytest

from monitor.analyze.diagnose import (
    ACCELERATOR_OVERHEAT,
    ACCELERATOR_UNHEALTHY,
    DECODE_SLOWDOWN,
    GATEWAY_ERRORS,
    HEALTHY,
    KV_CAPACITY,
    OVERLOAD,
    PREFILL_SLOWDOWN,
    STEADY_BREACH,
    UNEXPLAINED,
)
from monitor.analyze.model import Dataset, SliSpec
from monitor.analyze.report import analyze
from monitor.analyze.signals import derive
from monitor.slo.histogram import Hist
from tests.analyze.test_baseline import STEP, N, _dataset


def _engine(slow_at: int | None, busy_at: int | None, **extra: list[float | None]) -> Dataset:
    """A mixed server: arrivals 2/s, 10 s per request (20 running, 40 tokens/s each); a slowdown halves the
    speed (Little's law: 40 running), an overload doubles arrivals (40 running, more finished and tokens)."""
    fin, run, thr = [], [], []
    rnd = random.Random(7)
    for i in range(N):
        arrivals = 4.0 if busy_at is not None and i >= busy_at else 2.0
        speed = 20.0 if slow_at is not None and i >= slow_at else 40.0
        running = arrivals * (400 / speed)  # 400 tokens per request
        jitter = 1 + 0.03 * rnd.uniform(-1, 1)
        fin.append(arrivals * jitter)
        run.append(running * jitter)
        thr.append(running * speed * jitter)
    return _dataset(fin, load__server__num_running_reqs=run, load__server__gen_throughput=thr,
                    **{"load__server__num_queue_reqs": [0.0] * N, **extra})


@pytest.mark.parametrize(("slow_at", "busy_at", "want", "cause"), [
    (None, None, HEALTHY, None),
    (80, None, DECODE_SLOWDOWN, "decode_speed"),
    (None, 80, OVERLOAD, "arrivals"),
])
def test_the_verdict_tells_a_slower_engine_from_more_demand(slow_at, busy_at, want, cause):
    rep = analyze(_engine(slow_at, busy_at), 600, 1190, 60)
    v = rep.verdict
    assert v.mechanism == want, v.headline
    assert (v.cause.signal.key if v.cause else None) == cause
    if want != HEALTHY:
        assert v.cause.changed_at == pytest.approx(800, abs=30)
        cause_text, after = v.headline.split(" -> ", 1)
        assert "running requests" in after and "rose as a consequence" in after and "running" not in cause_text



@pytest.mark.parametrize(("key", "unit", "want"), [
    ("router_errors", "1/s", GATEWAY_ERRORS), ("accel.unhealthy", "chips", ACCELERATOR_UNHEALTHY)])
def test_events_are_named_from_when_they_began(key, unit, want):
    events = [0.0] * 85 + [2.0] * 20 + [0.0] * (N - 105)
    ds = _engine(None, None, **{key.replace(".", "__"): events})
    rep = analyze(ds, 600, 1190, 60)
    assert rep.verdict.mechanism == want and rep.verdict.cause.changed_at == 850, rep.verdict.headline


def test_a_breach_without_a_demand_or_capacity_change_is_unexplained_with_low_confidence():
    ds = _engine(None, None)
    good = bad = 0.0
    hists = []
    for i in range(N):  # half the events slow from step 90: nothing else moved
        bad += 50 if i >= 90 else 0
        good += 50 if i >= 90 else 100
        hists.append(Hist((0.05, 0.1, float("inf")), (good, good + bad, good + bad), 0.04 * good + 0.08 * bad,
                          good + bad))
    ds = Dataset(ds.deployment, ds.source, ds.times, STEP, {"tpot": tuple(hists)}, ds.series,
                 {"tpot": SliSpec("tpot", 0.05, 0.99)})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == UNEXPLAINED and v.confidence == "low" and v.cause is None
    assert "TPOT breached" in v.headline


def _saturated(arrived: bool, failures_at: int | None = None) -> Dataset:
    """A server already at its limit (20 running, 2 finished/s): arrivals double from step 80, it cannot
    finish more, the queue grows. `arrived`: SGLang's HTTP request counter was read."""
    rnd = random.Random(11)
    fin, run, thr, queue, arr, failed = [], [], [], [], [], []
    waiting = 0.0
    for i in range(N):
        arrivals = 4.0 if i >= 80 else 2.0
        waiting += (arrivals - 2.0) * STEP
        jitter = 1 + 0.03 * rnd.uniform(-1, 1)
        fin.append(2.0 * jitter)
        run.append(20.0 * jitter)
        thr.append(800.0 * jitter)
        queue.append(waiting)
        arr.append(arrivals * jitter)
        failed.append(1.0 if failures_at is not None and i >= failures_at else 0.0)
    extra = {"rate__arrived_total": arr} if arrived else {}
    if failures_at is not None:
        extra["rate__transfer_failed_total"] = failed
    return _dataset(fin, load__server__num_running_reqs=run, load__server__gen_throughput=thr,
                    load__server__num_queue_reqs=queue, **extra)


def test_a_measured_arrival_rise_is_overload_even_when_the_server_could_not_serve_more():
    v = analyze(_saturated(arrived=True), 600, 1190, 60).verdict
    assert v.mechanism == OVERLOAD and v.cause.signal.key == "arrivals" and not v.cause.signal.inferred, v.headline
    assert "arrival rate rose" in v.headline
    # Without the counter the same history gives only the inferred estimate, which a slower engine also moves:
    # no more work served, so it is not taken for demand (and the verdict says the estimate is inferred).
    inferred = analyze(_saturated(arrived=False), 600, 1190, 60).verdict
    assert inferred.shifts["arrivals"].signal.inferred and inferred.mechanism != OVERLOAD, inferred.headline


def test_an_event_during_a_measured_surge_is_named_as_contributing():
    v = analyze(_saturated(arrived=True, failures_at=100), 600, 1190, 60).verdict
    assert v.mechanism == OVERLOAD, v.headline
    assert "with PD KV transfer failure contributing" in v.headline.replace("failures", "failure"), v.headline


def test_without_a_trusted_baseline_the_verdict_does_not_claim_capacity_was_within_it():
    ds = _engine(None, None)
    # A requested baseline of two steps is too short to trust: nothing was compared.
    rep = analyze(ds, 600, 1190, 60, baseline=(100, 120))
    v = rep.verdict
    assert v.mechanism in (HEALTHY, UNEXPLAINED) and v.confidence != "high", v.headline
    assert "within its baseline" not in v.headline and "no trusted baseline" in v.headline, v.headline


def _hist_series(bad_share: list[float], mean_good: float, mean_bad: float, per_step: float = 100.0,
                 edges: tuple[float, ...] = (0.05, 0.1)) -> tuple[Hist, ...]:
    """A cumulative histogram: per step `per_step` events, `bad_share` of them over the first edge."""
    good = bad = total_sum = 0.0
    out = []
    for share in bad_share:
        good += per_step * (1 - share)
        bad += per_step * share
        total_sum += per_step * ((1 - share) * mean_good + share * mean_bad)
        out.append(Hist((*edges, float("inf")), (good, good + bad, good + bad), total_sum, good + bad))
    return tuple(out)


def _with(ds: Dataset, hists: dict[str, tuple[Hist, ...]], slis: dict[str, SliSpec]) -> Dataset:
    return Dataset(ds.deployment, ds.source, ds.times, STEP, hists, ds.series, slis)


def test_a_breach_as_bad_as_in_the_baseline_is_the_steady_state_not_an_incident():
    # 5 % of TPOT over its target all along (the objective allows 1 %): nothing changed, the target does not
    # hold at this load.
    ds = _with(_engine(None, None), {"tpot": _hist_series([0.05] * N, 0.04, 0.08)},
               {"tpot": SliSpec("tpot", 0.05, 0.99)})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == STEADY_BREACH and v.confidence == "low", v.headline
    assert "TPOT breached" in v.headline and "not an incident" in v.headline
    assert "TPOT bad 5.0 % (baseline 5.0 %, budget 1.0 %)" in v.headline, v.headline


def test_a_breach_on_a_server_already_queueing_is_no_headroom_and_without_the_queue_unexplained():
    shares = [0.05] * 90 + [0.4] * (N - 90)
    slis = {"tpot": SliSpec("tpot", 0.05, 0.99)}
    queued = _with(_engine(None, None, load__server__num_queue_reqs=[2.0] * N),
                   {"tpot": _hist_series(shares, 0.04, 0.08)}, slis)
    v = analyze(queued, 600, 1190, 60).verdict
    assert v.mechanism == STEADY_BREACH and "already queueing" in v.headline, v.headline
    idle = _with(_engine(None, None), {"tpot": _hist_series(shares, 0.04, 0.08)}, slis)
    assert analyze(idle, 600, 1190, 60).verdict.mechanism == UNEXPLAINED


def test_itl_is_read_from_its_histogram_without_a_target_and_names_a_decode_slowdown():
    # Per-request decode speed from the gauges is flat (too noisy to trust at a light load); the measured ITL
    # doubles from 800 s. ITL has no target here: it is still recorded, and read.
    itl = _hist_series([0.0] * 80 + [1.0] * (N - 80), 0.03, 0.06)
    ds = _with(_engine(None, None), {"itl": itl}, {})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == DECODE_SLOWDOWN and v.cause.signal.key == "itl_mean", v.headline
    assert v.cause.changed_at == pytest.approx(800, abs=30)


def test_time_spent_queued_is_never_reported_as_prefill_time():
    # TTFT rises by 2 s from 800 s and the recorded queue_time by the same 2 s: the wait grew, not the prefill.
    ttft = _hist_series([0.0] * 80 + [1.0] * (N - 80), 0.5, 2.5, edges=(1.0, 2.0))
    queue = _hist_series([0.0] * 80 + [1.0] * (N - 80), 0.0, 2.0, edges=(1.0, 2.0))
    ds = _with(_engine(None, None), {"ttft": ttft, "queue_time": queue}, {"ttft": SliSpec("ttft", 1.0, 0.99)})
    v = analyze(ds, 600, 1190, 60).verdict
    assert not v.shifts["prefill_time"].moved and v.mechanism != PREFILL_SLOWDOWN, v.headline
    assert v.shifts["prefill_time"].baseline == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize(("power_rise", "warming", "want", "power_late"), [
    (1.0, 8.0, ACCELERATOR_OVERHEAT, 0),
    # A die's rise above its inlet is proportional to its power and no inlet is colder than 0 degC: 40 % more
    # power explains up to 55 x 0.4 = 22 degC of warming.
    (1.4, 8.0, None, 0),
    # Dated two steps after the warming: within what a 5-point centred mean can tell apart (a noisy hottest-chip
    # reading crossed its midpoint early on a 0.5 s Prometheus step, and a load rise was named overheating).
    (1.4, 8.0, None, 2),
    (1.4, 8.0, ACCELERATOR_OVERHEAT, 4),  # power that follows well after is the throttled chip's, not load's
    (1.12, 26.0, ACCELERATOR_OVERHEAT, 0),  # a throttled chip's Little's-law power rise does not explain +26 degC
])
def test_a_chip_that_warms_while_drawing_more_power_is_load_not_overheating(power_rise, warming, want, power_late):
    temp = [55.0] * 80 + [55.0 + warming] * (N - 80)
    power = [300.0] * (80 + power_late) + [300.0 * power_rise] * (N - 80 - power_late)
    v = analyze(_engine(None, None, accel__temperature_max=temp, accel__power_mean=power), 600, 1190, 60).verdict
    if want:
        assert v.mechanism == want and v.cause.signal.key == "temperature", v.headline
    else:
        assert not v.shifts["temperature"].moved and v.mechanism != ACCELERATOR_OVERHEAT, v.headline


@pytest.mark.parametrize(("limit", "want"), [(None, None), (85.0, None), (60.0, ACCELERATOR_OVERHEAT)])
def test_a_warming_past_the_chips_own_slowdown_temperature_counts_whatever_its_size(limit, want):
    # +5.5 degC with power flat: under the rise a warming must make, so it counts only where it crosses the
    # chip's own slowdown temperature (NVML / DCGM report it; without one the alert's 85 degC stands in).
    extra = {"accel__temperature_max": [56.0] * 80 + [61.5] * (N - 80), "accel__power_mean": [300.0] * N}
    if limit is not None:
        extra["accel__temperature_slowdown_min"] = [limit] * N
    v = analyze(_engine(None, None, **extra), 600, 1190, 60).verdict
    assert v.shifts["temperature"].moved == (want is not None), v.headline
    assert (v.mechanism == ACCELERATOR_OVERHEAT) == (want is not None), v.headline


def test_a_chip_that_says_it_throttles_for_heat_is_overheating_though_it_barely_warmed():
    # NVML/DCGM thermal clock event reasons on one chip from 800 s, the decode slower from then: the chip's own
    # word names the mechanism, and the slowdown is its consequence.
    extra = {"accel__temperature_max": [70.0] * 80 + [72.0] * (N - 80), "accel__power_mean": [300.0] * N,
             "accel__thermal_throttling": [0.0] * 80 + [1.0] * (N - 80)}
    v = analyze(_engine(80, None, **extra), 600, 1190, 60).verdict
    assert v.mechanism == ACCELERATOR_OVERHEAT and v.cause.signal.key == "throttling", v.headline
    assert v.cause.changed_at == pytest.approx(800, abs=30)


def test_a_power_bump_before_the_rise_does_not_stand_for_the_power_drawn_while_warm():
    # A noisy wall-clock power series bumps +13 % for a while before the load rises: power "moved" there, at the
    # bump's level. What explains the warming is the power drawn while warm (+40 %), not that first level.
    temp = [55.0] * 80 + [63.0] * (N - 80)
    power = [300.0] * 70 + [339.0] * 5 + [300.0] * 5 + [420.0] * (N - 80)
    v = analyze(_engine(None, None, accel__temperature_max=temp, accel__power_mean=power), 600, 1190, 60).verdict
    assert not v.shifts["temperature"].moved and v.mechanism != ACCELERATOR_OVERHEAT, v.headline


@pytest.mark.parametrize(("before", "after", "lost"), [
    (0.91, 0.97, True),  # 9 % free -> 3 %: two thirds of the chip's headroom taken
    (0.95, 0.98, True),  # a 3-point rise on a chip with 5 % free
    (0.60, 0.64, False),  # a 4-point drift with 40 % free: noise of another process, not the pool
    (0.60, 0.75, False),  # 40 % free -> 25 %: less than half of the headroom
])
def test_hbm_taken_by_something_else_counts_by_the_share_of_the_chips_own_headroom(before, after, lost):
    hbm = [before] * 80 + [after] * (N - 80)
    v = analyze(_engine(None, None, accel__memory_ratio_max=hbm), 600, 1190, 60).verdict
    assert v.shifts["hbm"].moved == lost, v.headline
    assert (v.mechanism == KV_CAPACITY and v.cause.signal.key == "hbm") == lost, v.headline


def test_pd_prefill_time_is_ttft_less_the_other_stages_not_littles_law_on_a_few_requests():
    # A PD pair at a light load: the prefill server runs about one request, flat, so Little's law on it
    # sees nothing; TTFT (measured per request) doubles from 800 s with the prefill queue wait flat.
    flat = [1.0] * N
    ds = _dataset([2.0] * N, load__prefill__num_running_reqs=flat, load__decode__num_running_reqs=[20.0] * N,
                  load__decode__gen_throughput=[800.0] * N, load__decode__num_queue_reqs=[0.0] * N,
                  load__prefill__num_queue_reqs=[0.0] * N)
    ttft = _hist_series([0.0] * 80 + [1.0] * (N - 80), 0.9, 1.8, edges=(1.0, 2.0))
    queue = _hist_series([0.0] * N, 0.01, 0.01, edges=(1.0, 2.0))
    ds = _with(ds, {"ttft": ttft, "queue_time": queue}, {"ttft": SliSpec("ttft", 1.0, 0.99)})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == PREFILL_SLOWDOWN and v.cause.signal.key == "prefill_time", v.headline
    assert v.cause.baseline == pytest.approx(0.89, rel=0.05) and v.cause.incident == pytest.approx(1.79, rel=0.05)


def test_pd_prefill_time_while_requests_pile_up_for_bootstrap_is_littles_law_on_the_prefill_server():
    # The decode server's KV slots are all held from 800 s: 30 requests wait for bootstrap (TTFT is mostly that
    # wait), and the prefill server holds twice the requests for the same 2 req/s served: each prefills 2x as
    # long. TTFT minus a Little's-law guess at a growing queue would be noise; Little's law on the prefill
    # server's own running requests is the prefill time.
    piled = [0.0] * 80 + [30.0] * (N - 80)
    ds = _dataset([2.0] * N, load__prefill__num_running_reqs=[2.0] * 80 + [4.0] * (N - 80),
                  load__prefill__num_prefill_bootstrap_queue_reqs=piled, load__decode__num_running_reqs=[20.0] * N,
                  load__decode__gen_throughput=[800.0] * N, load__decode__num_queue_reqs=[0.0] * N,
                  load__prefill__num_queue_reqs=[0.0] * N)
    ttft = _hist_series([0.0] * 80 + [1.0] * (N - 80), 1.0, 16.0, edges=(2.0, 4.0))
    ds = _with(ds, {"ttft": ttft}, {"ttft": SliSpec("ttft", 2.0, 0.99)})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == PREFILL_SLOWDOWN and v.cause.signal.key == "prefill_time", v.headline
    assert v.cause.incident == pytest.approx(2.0, rel=0.05), v.headline


def test_a_counter_rate_over_a_restart_is_unknown_so_a_surge_before_it_leads():
    # Measured arrivals double from 800 s; the server restarts at 860 s, and its counters' step there reads 0
    # (what it counted since the last scrape died with it). That step is not a drop in demand: the surge is
    # dated at 800 s, leads, and the restart is named as contributing.
    arr = [2.0] * 80 + [4.0] * (N - 80)
    arr[86] = 0.0
    restarts = [0.0] * N
    restarts[86] = 1.0
    ds = _engine(None, 80, rate__arrived_total=arr, restarts=restarts)
    assert derive(ds, {})["arrivals"].values[85:88] == (4.0, None, 4.0)
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == OVERLOAD and v.cause.changed_at == pytest.approx(800, abs=20), v.headline
    assert "with server restart contributing" in v.headline, v.headline


def test_no_incident_is_said_with_low_confidence_when_a_signal_moved_past_its_noise_under_its_threshold():
    # Prefill time 1.3x from 800 s (the threshold to name a slowdown is 1.5x), every SLI within its objective.
    ttft = _hist_series([0.0] * N, 1.0, 1.0, edges=(2.0, 4.0))
    total = 0.0
    faint = []
    for i in range(N):  # 100 requests a step, all under the target; their mean 1.0 s, then 1.3 s
        total += 100 * (1.3 if i >= 80 else 1.0)
        faint.append(Hist((2.0, 4.0, float("inf")), (100.0 * (i + 1),) * 3, total, 100.0 * (i + 1)))
    ds = _with(_engine(None, None), {"ttft": tuple(faint)}, {"ttft": SliSpec("ttft", 2.0, 0.99)})
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == HEALTHY and v.confidence == "low", v.headline
    assert "prefill time per request rose 1.3x" in v.headline and "a weak incident may hide here" in v.headline
    quiet = analyze(_with(_engine(None, None), {"ttft": ttft}, {"ttft": SliSpec("ttft", 2.0, 0.99)}), 600, 1190, 60)
    # Nothing left its noise: "no incident", but never with high confidence (an incident weaker than the noise
    # reads the same; the randomized lab's weak slowdowns and timeouts did, #32).
    assert quiet.verdict.mechanism == HEALTHY and quiet.verdict.confidence == "medium", quiet.verdict.headline


def test_a_breach_made_only_of_a_queue_swing_is_the_steady_state_and_a_faint_arrival_rise_is_its_burst():
    # The queue swings up from 900 s and TPOT breaches (0.5 % bad before, 30 % after); nothing else moves.
    shares = [0.005] * 90 + [0.3] * (N - 90)
    slis = {"tpot": SliSpec("tpot", 0.05, 0.99)}
    queue = [0.0] * 90 + [6.0] * (N - 90)
    v = analyze(_with(_engine(None, None, load__server__num_queue_reqs=queue),
                      {"tpot": _hist_series(shares, 0.04, 0.08)}, slis), 600, 1190, 60).verdict
    assert v.mechanism == STEADY_BREACH and "bursts" in v.headline, v.headline
    # The same with measured arrivals up 1.4x (under the 1.5x that names an overload, past their noise: at 2 req/s
    # a 50 s mean swings +-10 %): the arrivals' own burst, named in the reading.
    arr = [2.0] * 85 + [2.8] * (N - 85)
    v = analyze(_with(_engine(None, None, load__server__num_queue_reqs=queue, rate__arrived_total=arr),
                      {"tpot": _hist_series(shares, 0.04, 0.08)}, slis), 600, 1190, 60).verdict
    assert v.mechanism == STEADY_BREACH and "arrival rate rose 1.4x" in v.headline, v.headline
    assert "the bursts themselves" in v.headline and v.confidence == "low", v.headline
    # A chip warming faintly beside it (+4 degC, under the 6 that names overheating, with no power to explain it)
    # names no cause either: still the load's spread, at low confidence, and the warming is named as a trace.
    temp = [55.0] * 85 + [59.0] * (N - 85)
    v = analyze(_with(_engine(None, None, load__server__num_queue_reqs=queue, rate__arrived_total=arr,
                              accel__temperature_max=temp),
                      {"tpot": _hist_series(shares, 0.04, 0.08)}, slis), 600, 1190, 60).verdict
    assert v.mechanism == STEADY_BREACH and v.confidence == "low", v.headline
    assert "accelerator temperature (hottest chip) rose" in v.headline and "a weak incident may hide" in v.headline


def test_a_faint_warming_the_chips_power_explains_is_load_not_a_trace_of_overheating():
    """#32 item 2: a chip +4 degC (under the 6 that names overheating) while its power rose 20 %: a die's rise
    above its inlet is proportional to its power (55 degC at 300 W: up to 11 degC for 60 W more), so the warming
    is the load's and goes unsaid; without the power rise it is a trace (a weak overheat may hide there), named in
    the steady reading (a trace names no cause, so it does not make the breach unexplained)."""
    queue = [0.0] * 90 + [6.0] * (N - 90)
    shares = [0.005] * 90 + [0.3] * (N - 90)
    slis = {"tpot": SliSpec("tpot", 0.05, 0.99)}
    temp = [55.0] * 85 + [59.0] * (N - 85)
    for power, trace in (([300.0] * 85 + [360.0] * (N - 85), False), ([300.0] * N, True)):
        v = analyze(_with(_engine(None, None, load__server__num_queue_reqs=queue, accel__temperature_max=temp,
                                  accel__power_mean=power),
                          {"tpot": _hist_series(shares, 0.04, 0.08)}, slis), 600, 1190, 60).verdict
        assert v.mechanism == STEADY_BREACH, v.headline
        assert ("accelerator temperature (hottest chip) rose" in v.headline) == trace, v.headline


def test_no_incident_is_not_said_with_confidence_when_a_consequence_moved_without_a_cause():
    # Token usage that follows the running requests is theirs (Little's law); usage that doubles while they stay
    # is KV no running request holds: a pool that lost tokens, named (test below), not a consequence.
    usage = [0.2] * 80 + [0.4] * (N - 80)
    v = analyze(_engine(None, None, load__server__token_usage=usage), 600, 1190, 60).verdict
    assert v.mechanism == KV_CAPACITY and v.cause.signal.key == "kv_unheld", v.headline
    queued = [1.0] * 80 + [3.0] * (N - 80)
    v = analyze(_engine(None, None, load__server__num_queue_reqs=queued), 600, 1190, 60).verdict
    assert v.mechanism == HEALTHY and v.confidence == "low", v.headline
    assert "queued requests rose 3.0x" in v.headline and "with no cause found" in v.headline, v.headline


def test_a_slowdown_too_large_for_a_grown_batch_is_named_under_an_overload_even_when_simultaneous():
    # Measured arrivals and the decode slowdown both from 800 s: a halved per-request speed (3 thresholds'
    # worth) is more than a grown batch makes, so it is named as contributing; the surge alone names nothing.
    arr = [2.0] * 80 + [4.0] * (N - 80)
    both = analyze(_engine(80, 80, rate__arrived_total=arr), 600, 1190, 60).verdict
    assert both.mechanism == OVERLOAD and "with engine-side decode slowdown contributing" in both.headline, \
        both.headline
    alone = analyze(_engine(None, 80, rate__arrived_total=arr), 600, 1190, 60).verdict
    assert alone.mechanism == OVERLOAD and "contributing" not in alone.headline, alone.headline


def test_kv_a_pd_decode_server_preallocated_for_awaited_transfers_is_not_a_smaller_cache():
    # From 800 s the prefill is slower: the decode server holds 30 requests' preallocated KV waiting for their
    # transfer instead of 2, its token usage rises with them (per running request 3.3x), the running requests
    # do not change. KV per request holding KV is flat: no KV capacity lost.
    base = dict(load__prefill__num_running_reqs=[2.0] * N, load__decode__num_running_reqs=[10.0] * N,
                load__decode__gen_throughput=[400.0] * N, load__decode__num_queue_reqs=[0.0] * N,
                load__prefill__num_queue_reqs=[0.0] * N)
    transfer = [2.0] * 80 + [30.0] * (N - 80)
    usage = [0.12] * 80 + [0.40] * (N - 80)  # 1 % of the pool per request holding KV, before and after
    ds = _dataset([1.0] * N, load__decode__num_decode_transfer_queue_reqs=transfer, load__decode__token_usage=usage,
                  **base)
    v = analyze(ds, 600, 1190, 60).verdict
    assert not v.shifts["kv_per_running"].moved and v.mechanism != KV_CAPACITY, v.headline


def test_prompt_length_counts_abandoned_requests_as_sglang_counts_their_prompts():
    # Half the requests are abandoned from 800 s. SGLang 0.5.23 counts each one's prompt tokens and the request
    # itself at its (aborted) finish: 2 req/s of 1,000-token prompts all along, whatever the aborts.
    aborted = [0.0] * 80 + [1.0] * (N - 80)
    ds = _engine(None, None, rate__prompt_tokens_total=[2000.0] * N, rate__aborted_requests_total=aborted)
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.shifts["prompt_len"].incident == pytest.approx(1000, rel=0.05), v.headline
    assert not v.shifts["prompt_len"].moved and v.mechanism != OVERLOAD, v.headline


def test_a_baseline_taken_inside_the_range_is_never_a_reason_for_high_confidence():
    """#32 item 6: data that starts inside the default baseline leaves the range's own start as the baseline;
    with nothing breached it spans the whole range, so nothing can move: "no incident" at medium, never high."""
    from monitor.analyze.baseline import IN_RANGE

    ds = _engine(None, None)
    start = ds.times[0]
    rep = analyze(ds, start + 20, ds.times[-1], 60)  # the baseline before --from would be almost all before the data
    assert rep.baseline.source == IN_RANGE, rep.baseline
    assert rep.verdict.mechanism == HEALTHY and rep.verdict.confidence == "medium", rep.verdict.first_line


@pytest.mark.parametrize(("slow_at", "busy_at"), [(None, None), (80, None), (None, 80)])
def test_the_first_line_is_at_most_25_words_and_says_mechanism_confidence_when_and_how_much(slow_at, busy_at):
    v = analyze(_engine(slow_at, busy_at), 600, 1190, 60).verdict
    words = v.first_line.split()
    assert len(words) <= 25 and v.first_line.startswith(v.title[:1].upper() + v.title[1:]), v.first_line
    assert f"({v.confidence} confidence)" in v.first_line
    if v.cause is not None:
        assert " at " in v.first_line and ("%" in v.first_line or "x" in v.first_line), v.first_line


@pytest.mark.parametrize(("retracted", "want_kv"), [(1, False), (30, True)])
def test_a_retraction_under_a_surge_is_no_lost_kv_capacity_but_many_are(retracted, want_kv):
    """#32 item 2: SGLang retracts in healthy long decodes too. A baseline that saw none bounds their rate by the
    rule of three over its span, not by 0: arrivals x2 with one retraction reads overload (before: "KV cache
    capacity lost", high confidence); thirty retractions in the incident still read lost KV capacity."""
    rate = [0.0] * N
    for i in range(82, 82 + retracted):
        rate[i % N] = 1.0 / STEP  # one retraction in each of these steps (a rate per second)
    v = analyze(_engine(None, 80, rate__retracted_total=rate), 600, 1190, 60).verdict
    assert (v.mechanism == KV_CAPACITY) == want_kv, v.first_line
    if not want_kv:
        assert v.mechanism == OVERLOAD, v.first_line


def test_a_chip_at_40_degc_that_warms_to_60_as_its_power_doubles_is_load():
    """#32 item 2: a fixed 25 degC inlet (the emulator's) read this as overheating with high confidence."""
    temp = [40.0] * 80 + [60.0] * (N - 80)
    power = [200.0] * 80 + [400.0] * (N - 80)
    v = analyze(_engine(None, None, accel__temperature_max=temp, accel__power_mean=power), 600, 1190, 60).verdict
    assert not v.shifts["temperature"].moved and v.mechanism != ACCELERATOR_OVERHEAT, v.first_line



@pytest.mark.parametrize(("before", "after", "kind"), [(0.0, 0.05, "nothing in demand, capacity or their consequences"),
                                                       (0.03, 0.10, "did not hold in the baseline either")])
def test_a_tail_that_breaches_while_the_sli_level_holds_and_nothing_moved_is_the_steady_state(before, after, kind):
    """#32 item 5 (the randomized lab's healthy runs at 70-90 % of capacity): TPOT's tail breaches (0 -> 5 % bad,
    or 3 -> 10 % where the baseline already spent more than its budget) while its mean holds within 1.07x and no
    demand, capacity or consequence signal moved: the spread of this load's own latencies, not an incident.
    The same share with the mean 1.5x higher stays unexplained (test above)."""
    shares = [before] * 90 + [after] * (N - 90)
    slis = {"tpot": SliSpec("tpot", 0.05, 0.99)}
    v = analyze(_with(_engine(None, None), {"tpot": _hist_series(shares, 0.04, 0.08)}, slis), 600, 1190, 60).verdict
    assert v.mechanism == STEADY_BREACH and v.confidence == "low", v.headline
    assert kind in v.headline, v.headline


@pytest.mark.parametrize(("rise", "want"), [(1.6, False), (2.5, True)])
def test_a_burst_of_arrivals_within_a_poisson_rates_own_swing_is_no_surge(rise, want):
    """Measured arrivals at 0.4 req/s with a baseline jitter of 3 %: over the 50 s the levels are smoothed on, a
    Poisson rate that low swings +-22 % (1 sigma) on its own, so a 1.6x burst for a minute is within 3 sigma and
    no surge, whatever the baseline's few points showed; a 2.5x rise is one."""
    arr = [0.4 * (1 + 0.03 * ((i * 7) % 5 - 2) / 2) for i in range(N)]
    for i in range(80, 86 if not want else N):
        arr[i] *= rise
    v = analyze(_engine(None, None, rate__arrived_total=arr), 600, 1190, 60).verdict
    assert v.shifts["arrivals"].moved == want, v.shifts["arrivals"]
    assert (v.mechanism == OVERLOAD) == want, v.headline


@pytest.mark.parametrize(("bursty", "want"), [(False, True), (True, False)])
def test_a_baseline_burstier_than_poisson_widens_what_a_surge_must_pass(bursty, want):
    """Measured arrivals at 2 req/s, then 1.8x for 80 s. Poisson arrivals that steady swing +-9 % over 50 s, so
    that is a surge. A deployment whose clients come in bursts (its baseline's 10 s counts alternate 10 and 30: a
    variance 5x their mean) swings as much on its own, and its own dispersion widens the band: no surge."""
    arr = [(1.0 if i % 2 else 3.0) if bursty else 2.0 for i in range(N)]
    for i in range(80, 88):
        arr[i] = 3.6
    v = analyze(_engine(None, None, rate__arrived_total=arr), 600, 1190, 60).verdict
    assert v.shifts["arrivals"].moved == want, v.shifts["arrivals"]


def test_kv_no_running_request_holds_names_a_pool_that_lost_tokens_while_the_chips_hbm_stays_flat():
    # From 800 s 40 % of the pool is held by no request (a leak, pinned cache): token usage rises by that share,
    # the running requests and their own KV do not change, and HBM on the chip does not move (preallocated).
    rnd = random.Random(11)
    running = [20.0 * (1 + 0.03 * rnd.uniform(-1, 1)) for _ in range(N)]
    usage = [r * 0.015 + (0.4 if i >= 80 else 0.0) for i, r in enumerate(running)]
    ds = _dataset([2.0] * N, load__server__num_running_reqs=running, load__server__token_usage=usage,
                  load__server__gen_throughput=[800.0] * N, load__server__num_queue_reqs=[0.0] * N,
                  accel__memory_ratio_max=[0.9] * N)
    v = analyze(ds, 600, 1190, 60).verdict
    assert v.mechanism == KV_CAPACITY and v.cause.signal.key == "kv_unheld", v.headline
    assert v.shifts["kv_unheld"].incident == pytest.approx(0.4, abs=0.02) and not v.shifts["hbm"].moved
    # The same usage following the running requests (Little's law) is no pool lost.
    ds = _dataset([2.0] * N, load__server__num_running_reqs=[r * (2 if i >= 80 else 1) for i, r in
                                                               enumerate(running)],
                  load__server__token_usage=[r * 0.015 * (2 if i >= 80 else 1) for i, r in enumerate(running)],
                  load__server__gen_throughput=[800.0] * N, load__server__num_queue_reqs=[0.0] * N)
    v = analyze(ds, 600, 1190, 60).verdict
    assert not v.shifts["kv_unheld"].moved and v.mechanism != KV_CAPACITY, v.headline


def test_kv_outside_the_batch_counts_only_past_what_requests_in_prefill_hold_by_littles_law():
    from monitor.analyze.diagnose import Context, Shift, _unheld
    from monitor.analyze.signals import Signal

    def shift(key: str, base: float, inc: float) -> Shift:
        return Shift(Signal(key, key, "capacity", "s", ()), base, inc, 300.0, True)

    def counts(rise: float, arrivals: tuple[float, float], prefill: tuple[float, float]) -> bool:
        sh = {"arrivals": shift("arrivals", *arrivals), "prefill_time": shift("prefill_time", *prefill),
              "kv_per_running": shift("kv_per_running", 0.05, 0.07)}
        return _unheld(Context(sh, {}, (), range(0), 1, 10.0, 20.0), shift("kv_unheld", 0.0, rise))

    # Prefill 2.7 s longer at 2 req/s: 5.4 more requests in prefill, 5 % of the pool each, 0.27 (+ 0.15 threshold).
    assert not counts(0.4, (2.0, 2.0), (0.9, 3.6)) and counts(0.5, (2.0, 2.0), (0.9, 3.6))
    # Arrivals x2 at the same prefill time: 1.8 more in prefill, 0.09.
    assert not counts(0.2, (2.0, 4.0), (0.9, 0.9)) and counts(0.4, (2.0, 4.0), (0.9, 0.9))
    # Nothing in prefill changed: a sixth of the pool held by no request counts.
    assert counts(0.17, (2.0, 2.0), (0.9, 0.9)) and not counts(0.12, (2.0, 2.0), (0.9, 0.9))
