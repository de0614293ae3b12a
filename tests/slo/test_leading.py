"""The leading TPOT signal: ITL mean over the last minute and running / gen_throughput, before TPOT moves."""

from __future__ import annotations

import asyncio
import math

from monitor.commands.status import render_table
from monitor.config import parse_config
from monitor.conventions.names import M_TPOT_LEADING
from monitor.conventions.slis import SLI_FAMILIES
from monitor.export.prometheus import families_from_status
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.scrape.status import TargetStatus
from monitor.sidecar import Sidecar
from monitor.slo.histogram import Hist
from monitor.slo.leading import (
    HOLD_SECONDS,
    LeadingTPOT,
    carried_since,
    held_since,
    itl_mean,
    leading_tpot,
    throughput_tpot,
    with_hold,
)
from monitor.slo.windows import Snapshot, SnapshotStore
from monitor.status_model import StatusResponse, deployment_status, sidecar_status
from tests.slo.helpers import histogram_lines
from tests.slo.test_engine import make

W = engine_wanted()
EDGES = (0.05, 0.1, math.inf)


def itl(tokens: float, seconds: float) -> dict[str, Hist]:
    return {"itl": Hist(EDGES, (tokens, tokens, tokens), seconds, tokens)}


def test_itl_mean_is_the_token_weighted_mean_over_the_window_only():
    store = SnapshotStore()
    store.append(Snapshot(0.0, itl(1000, 50.0), {}))  # 50 ms a token long ago
    store.append(Snapshot(60.0, itl(2000, 100.0), {}))
    store.append(Snapshot(120.0, itl(2500, 200.0), {}))  # the last minute: 500 tokens in 100 s
    assert itl_mean(store, 120.0, 60.0) == 0.2
    assert itl_mean(store, 120.0, 120.0) == 150.0 / 1500


def test_no_tokens_in_the_window_or_no_sum_is_no_itl_estimate():
    store = SnapshotStore()
    store.append(Snapshot(0.0, itl(1000, 50.0), {}))
    store.append(Snapshot(60.0, itl(1000, 50.0), {}))
    assert itl_mean(store, 60.0, 60.0) is None
    store.append(Snapshot(120.0, itl(1100, math.nan), {}))
    assert itl_mean(store, 120.0, 60.0) is None
    assert itl_mean(SnapshotStore(), 0.0, 60.0) is None


def test_gen_throughput_estimate_reads_the_roles_that_answer_requests():
    load = {"decode": {"num_running_reqs": 40.0, "gen_throughput": 800.0},
            "prefill": {"num_running_reqs": 5.0, "gen_throughput": 1.0}, "all": {"num_running_reqs": 45.0}}
    assert throughput_tpot(load) == 0.05  # 40 requests sharing 800 tokens/s: 50 ms a token each
    assert throughput_tpot({"server": {"num_running_reqs": 0.0, "gen_throughput": 0.0}}) is None
    assert throughput_tpot({}) is None


def test_the_signal_is_the_larger_estimate_and_says_when_it_is_over_the_target():
    store = SnapshotStore()
    store.append(Snapshot(0.0, itl(1000, 50.0), {}))
    store.append(Snapshot(60.0, itl(1500, 80.0), {}))  # 60 ms a token
    slow = leading_tpot(store, {"server": {"num_running_reqs": 10.0, "gen_throughput": 80.0}}, 60.0, 60.0, 0.1)
    assert (slow.itl_seconds, slow.throughput_seconds, slow.seconds) == (0.06, 0.125, 0.125) and slow.over_target
    fine = leading_tpot(store, {}, 60.0, 60.0, 0.1)
    assert fine.seconds == 0.06 and fine.throughput_seconds is None and not fine.over_target
    idle = leading_tpot(SnapshotStore(), {}, 60.0, 60.0, 0.1)
    assert idle.seconds is None and not idle.over_target


def _exposition(tokens: int, per_token: float, running: float, generated: float, before: int = 0) -> str:
    """`before` tokens at 50 ms then `tokens` at `per_token`: one server's cumulative histogram."""
    labels = 'engine_type="unified",model_name="m"'
    lines = histogram_lines(SLI_FAMILIES["itl"], [0.05, 0.1], [0.05] * before + [per_token] * tokens, labels)
    lines += [f'sglang:num_running_reqs{{{labels},tp_rank="0"}} {running}',
              f'sglang:gen_throughput{{{labels},tp_rank="0"}} {generated}']
    return "\n".join(lines) + "\n"


def test_a_slowdown_shows_in_the_state_the_api_metrics_and_table_before_any_request_finishes():
    eng, (srv,) = make(tpot=0.1)
    feed = [(0.0, _exposition(1000, 0.05, 10, 200)), (60.0, _exposition(2000, 0.05, 10, 200)),
            (120.0, _exposition(500, 0.2, 10, 50, before=2000))]  # decoding 4x slower: no TPOT observed yet
    for t, text in feed:
        eng.observe(srv, parse(text, W), t)
        eng.snapshot(t)
    state = eng.state(120.0)
    assert "tpot" not in {s for s, v in state.slis.items() if v.windows["5m"].events}
    lead = state.leading_tpot
    assert lead is not None and math.isclose(lead.itl_seconds, 0.2) and lead.throughput_seconds == 0.2
    st = _status(eng, state)
    lead = st.deployments[0].tpot_leading
    assert lead.over_target and lead.over_target_since == 120.0 and not lead.warning  # one reading: not yet
    got = {s.labels["source"]: s.value for f in families_from_status(st) for s in f.samples if s.name == M_TPOT_LEADING}
    assert set(got) == {"itl", "gen_throughput", "max"} and math.isclose(got["max"], 0.2)
    assert _row(st).split()[1] == "OK" and "200.0!" in _row(st)
    for t in (150.0, 180.0):  # still 4x slower a minute later: the warning's hold is over
        eng.observe(srv, parse(_exposition(2500 + int(t), 0.2, 10, 50), W), t)
        eng.snapshot(t)
    st = _status(eng, eng.state(180.0))
    assert st.deployments[0].tpot_leading.warning and _row(st).split()[1] == "SLOWING"


def _status(eng, state) -> StatusResponse:
    target = TargetStatus("d", eng.deployment.targets[0].id, "server", "sglang", eng.deployment.targets[0].url, up=True)
    return StatusResponse(sidecar=sidecar_status(0.0, state.ts, 5.0, 3, 0.1),
                          deployments=[deployment_status(eng.deployment, state, [target])])


def _row(st: StatusResponse) -> str:
    return next(line for line in render_table(st, color=False).splitlines() if line.startswith("d "))


def test_the_hold_starts_at_the_first_reading_over_the_target_and_drops_at_the_first_under_it():
    assert held_since(None, True, 10.0) == 10.0
    assert held_since(10.0, True, 15.0) == 10.0
    assert held_since(10.0, False, 20.0) is None
    assert held_since(30.0, True, 20.0) == 20.0  # a start after now (clock stepped back): now
    over = LeadingTPOT(0.12, 0.12, None, 0.1)
    assert with_hold(over, 10.0, 69.0, 60.0).warning is False
    assert with_hold(over, 10.0, 70.0, 60.0) == over._replace(over_since=10.0, warning=True)
    assert with_hold(over, None, 70.0, 60.0) == over._replace(over_since=70.0, warning=False)
    under = LeadingTPOT(0.08, 0.08, None, 0.1)
    assert with_hold(under, 10.0, 70.0, 60.0) == under  # no start, no warning, whatever was tracked
    assert carried_since(10.0, 0.1, 0.1) == 10.0 and carried_since(10.0, 0.1, 0.05) is None
    assert carried_since(None, 0.1, 0.1) is None


def _drive(eng, srv, per_token: dict[float, float], step: float = 5.0) -> list[tuple[float, bool, bool, str]]:
    """Scrape every `step` s until the last key; the decode rate from `per_token` (time -> seconds per token of
    the running requests, held until the next key): (t, over now, warning, the table's state) per scrape."""
    seen, tokens, t = [], 0, 0.0
    keys = sorted(per_token)
    while t <= keys[-1]:
        rate = per_token[max(k for k in keys if k <= t)]
        text = _exposition(tokens, 0.05, 10, 10 / rate)  # ITL healthy: only gen_throughput moves
        eng.observe(srv, parse(text, W), t)
        eng.snapshot(t)
        tokens += 100
        st = _status(eng, eng.state(t))
        lead = st.deployments[0].tpot_leading
        seen.append((t, lead.over_target, lead.warning, _row(st).split()[1]))
        t += step
    return seen


def test_a_single_slow_refresh_does_not_show_slowing():
    eng, (srv,) = make(tpot=0.1)
    seen = _drive(eng, srv, {0.0: 0.07, 300.0: 0.5, 305.0: 0.07, 600.0: 0.07})  # 7x slower for one scrape
    assert [t for t, over, _, _ in seen if over] == [300.0]
    assert {state for t, _, _, state in seen if t > 0} == {"OK"} and not any(w for _, _, w, _ in seen)


def test_slow_for_the_hold_shows_slowing_and_the_api_says_since_when():
    eng, (srv,) = make(tpot=0.1)
    seen = _drive(eng, srv, {0.0: 0.07, 300.0: 0.12, 420.0: 0.12})
    warned = [t for t, _, w, _ in seen if w]
    assert warned[0] == 300.0 + HOLD_SECONDS and warned[-1] == 420.0
    assert {state for t, _, _, state in seen if t >= 360.0} == {"SLOWING"}
    assert {state for t, _, _, state in seen if 0 < t < 360.0} == {"OK"}  # NO DATA at the first scrape
    lead = eng.state(420.0).leading_tpot
    assert lead.over_since == 300.0 and lead.warning
    st = _status(eng, eng.state(420.0)).deployments[0].tpot_leading
    assert (st.over_target_since, st.hold_seconds, st.warning, st.over_target) == (300.0, HOLD_SECONDS, True, True)


def test_back_under_the_target_clears_the_warning_and_a_new_slowdown_waits_the_hold_again():
    eng, (srv,) = make(tpot=0.1)
    seen = _drive(eng, srv, {0.0: 0.07, 300.0: 0.12, 400.0: 0.07, 405.0: 0.12, 480.0: 0.12})
    by_t = {t: (over, w, state) for t, over, w, state in seen}
    assert by_t[395.0] == (True, True, "SLOWING")
    assert by_t[400.0] == (False, False, "OK")  # one reading under it ends the warning
    assert eng.state(480.0).leading_tpot.over_since == 405.0
    assert [t for t, (_, w, _) in by_t.items() if w and t > 400.0] == [465.0, 470.0, 475.0, 480.0]


def test_a_gap_without_data_drops_the_hold_as_an_absent_series_drops_a_pending_alert():
    eng, (srv,) = make(tpot=0.1)
    _drive(eng, srv, {0.0: 0.12, 50.0: 0.12})
    assert eng.tpot_over_since == 0.0
    eng.target_down(srv)  # no gauges; the ITL window holds healthy tokens only
    eng.snapshot(55.0)
    assert eng.tpot_over_since is None and not eng.state(60.0).leading_tpot.warning


def test_a_reload_keeps_the_hold_of_a_kept_deployment_and_of_a_rebuilt_one_with_the_same_tpot_target():
    config = {"deployments": [
        {"name": n, "tpot_target_seconds": 0.1, "targets": [{"role": "server", "url": f"http://s:{i + 1}/metrics"}]}
        for i, n in enumerate(("kept", "same", "other"))]}
    sc = Sidecar(parse_config(config), clock=lambda: 100.0, loader=lambda: parse_config(config))
    for name in ("kept", "same", "other"):
        sc.observations.engines[name].tpot_over_since = 70.0
    config["deployments"][1]["objective"] = 0.995  # rebuilt (windows start empty), same TPOT target
    config["deployments"][2]["tpot_target_seconds"] = 0.2  # rebuilt against another target
    try:
        assert sc.reload() is None
        since = {n: e.tpot_over_since for n, e in sc.observations.engines.items()}
        assert since == {"kept": 70.0, "same": 70.0, "other": None}
    finally:
        asyncio.run(sc.close())
