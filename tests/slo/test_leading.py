"""The leading TPOT signal: ITL mean over the last minute and running / gen_throughput, before TPOT moves."""

from __future__ import annotations

import math

from monitor.commands.status import render_table
from monitor.conventions.names import M_TPOT_LEADING
from monitor.conventions.slis import SLI_FAMILIES
from monitor.export.prometheus import families_from_status
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.scrape.status import TargetStatus
from monitor.slo.histogram import Hist
from monitor.slo.leading import itl_mean, leading_tpot, throughput_tpot
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


def _exposition(tokens: int, per_token: float, running: float, generated: float) -> str:
    labels = 'engine_type="unified",model_name="m"'
    lines = histogram_lines(SLI_FAMILIES["itl"], [0.05, 0.1], [per_token] * tokens, labels)
    lines += [f'sglang:num_running_reqs{{{labels},tp_rank="0"}} {running}',
              f'sglang:gen_throughput{{{labels},tp_rank="0"}} {generated}']
    return "\n".join(lines) + "\n"


def test_a_slowdown_shows_in_the_state_the_api_metrics_and_table_before_any_request_finishes():
    eng, (srv,) = make(tpot=0.1)
    feed = [(0.0, _exposition(1000, 0.05, 10, 200)), (60.0, _exposition(2000, 0.05, 10, 200)),
            (120.0, _exposition(2500, 0.2, 10, 50))]  # decoding 4x slower: no TPOT observed yet
    for t, text in feed:
        eng.observe(srv, parse(text, W), t)
        eng.snapshot(t)
    state = eng.state(120.0)
    assert "tpot" not in {s for s, v in state.slis.items() if v.windows["5m"].events}
    lead = state.leading_tpot
    assert lead is not None and math.isclose(lead.itl_seconds, 0.2) and lead.throughput_seconds == 0.2
    target = TargetStatus("d", srv.id, "server", "sglang", srv.url, up=True)
    st = StatusResponse(sidecar=sidecar_status(0.0, 120.0, 5.0, 3, 0.1),
                        deployments=[deployment_status(eng.deployment, state, [target])])
    assert st.deployments[0].tpot_leading.over_target
    got = {s.labels["source"]: s.value for f in families_from_status(st) for s in f.samples if s.name == M_TPOT_LEADING}
    assert set(got) == {"itl", "gen_throughput", "max"} and math.isclose(got["max"], 0.2)
    row = next(line for line in render_table(st, color=False).splitlines() if line.startswith("d "))
    assert "SLOWING" in row and "200.0!" in row
