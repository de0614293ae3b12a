"""The sidecar's availability SLI: the gateway's counters per version, windows, budget, resets, restarts."""

from __future__ import annotations

import json
import math

import pytest

from monitor.config import parse_config
from monitor.conventions.names import GATEWAY_ANSWERED, GATEWAY_FAILED, GATEWAY_REQUESTS
from monitor.conventions.policy import SERIES_EXPIRY_SECONDS
from monitor.parse.exposition import parse
from monitor.parse.gateway import ROUTER_WANTED
from monitor.record.codec import book_from, book_to, snapshot_from, snapshot_to
from monitor.slo.engine import DeploymentEngine
from monitor.slo.state import ratio_window
from tests.conftest import GATEWAY_FIXTURES


def _dep(gateway: str | None = None, objective: float | None = 0.99, period: str = "30d"):
    router = {"role": "router", "url": "http://10.0.0.3:29000/metrics"}
    if gateway:
        router["gateway"] = gateway
    return parse_config({"deployments": [{"name": "d", "availability_objective": objective, "period": period,
                                          "targets": [router]}]}).deployments[0]


def smg(ok: float, passed: float = 0, own: float = 0, broken: float = 0, disconnects: float = 0) -> str:
    """smg 1.13's listener: responses by path/status/error_code, backend_error (passed-through 5xx + broken)."""
    lines = ["smg_admission_inflight 0",
             f'smg_http_responses_total{{path="/generate",status_code="200",error_code=""}} {ok}',
             f'smg_http_responses_total{{path="/readiness",status_code="503",error_code=""}} {ok / 10}',
             f'smg_http_responses_total{{path="/health_generate",status_code="503",error_code="no_workers"}} {ok / 10}']
    if disconnects:
        lines.append(f'smg_http_responses_total{{path="/generate",status_code="499",error_code="client_closed_request"}} '
                     f"{disconnects}")
    if passed:
        lines.append(f'smg_http_responses_total{{path="/generate",status_code="500",error_code=""}} {passed}')
    if own:
        lines.append(f'smg_http_responses_total{{path="/generate",status_code="503",error_code="no_available_workers"}} '
                     f"{own}")
    if passed or broken:
        lines.append(f'smg_router_request_errors_total{{endpoint="generate",error_type="backend_error"}} {passed + broken}')
    return "\n".join(lines) + "\n"


def old(routed: float, failed: float = 0) -> str:
    lines = [f'smg_router_requests_total{{endpoint="generate",streaming="false"}} {routed}',
             f'smg_http_responses_total{{status_code="200",error_code=""}} {routed - failed + 3}']
    if failed:
        lines.append(f'smg_http_responses_total{{status_code="500",error_code=""}} {failed}')
    return "\n".join(lines) + "\n"


def feed(engine: DeploymentEngine, texts: list[str], step: float = 60.0) -> None:
    target = engine.deployment.targets[0]
    for i, text in enumerate(texts):
        engine.observe_gateway(target, parse(text, ROUTER_WANTED))
        engine.snapshot(i * step)


def test_smg_1_13_counts_serving_answers_and_each_failure_once():
    engine = DeploymentEngine(_dep())
    # First scrape: history before the sidecar looked is not counted. Then 100 answers: 88 with status 200 (3 of
    # them streams broken mid-body: + backend_error), 5 client disconnects (499), 4 workers' 500s passed through
    # (+ backend_error), 3 of the gateway's own 503s; its probe endpoints' 503s are no requests.
    feed(engine, [smg(50), smg(50 + 88, passed=4, own=3, broken=3, disconnects=5)])
    w = engine.state(60.0).availability.windows["5m"]  # type: ignore[union-attr]
    assert (w.events, w.failed) == (100.0, 10.0) and w.good_ratio == pytest.approx(0.9)
    assert w.burn_rate == pytest.approx(10.0)


def test_sglang_router_0_3_2_counts_routed_requests_and_5xx():
    engine = DeploymentEngine(_dep("sglang-router-0.3.2"))
    feed(engine, [old(10), old(110, failed=2)])
    w = engine.state(60.0).availability.windows["5m"]  # type: ignore[union-attr]
    assert (w.events, w.failed, w.good_ratio) == (100.0, 2.0, 0.98)


def test_no_requests_is_no_sli_and_no_burn():
    engine = DeploymentEngine(_dep())
    feed(engine, [smg(10), smg(10)])
    state = engine.state(60.0).availability
    assert state is not None and state.windows["5m"].good_ratio is None and state.windows["5m"].burn_rate == 0
    assert state.budget_remaining is None


def test_a_gateway_restart_resets_counters_without_losing_or_inventing_failures():
    engine = DeploymentEngine(_dep())
    feed(engine, [smg(100), smg(200, passed=10), smg(20, passed=1), smg(120, passed=2)])
    w = engine.state(180.0).availability.windows["5m"]  # type: ignore[union-attr]
    # 100 + 10 before the restart; 21 after it (20 + 1), then 101 more (100 + 1).
    assert (w.events, w.failed) == (232.0, 12.0)
    assert engine.resets


def test_the_budget_spans_the_period_with_the_same_math_as_the_latency_slis():
    engine = DeploymentEngine(_dep(objective=0.9))
    feed(engine, [smg(0), smg(95, own=5), smg(190, own=10)], step=3600.0)
    state = engine.state(7200.0).availability
    assert state is not None and state.budget_remaining == pytest.approx(1 - 10 / (200 * 0.1))


def test_a_failure_series_born_later_counts_from_its_first_value():
    engine = DeploymentEngine(_dep())
    feed(engine, [smg(100), smg(150), smg(200, own=7)])
    snap = engine.store.latest()
    assert snap is not None and snap.counters[GATEWAY_FAILED] == 7 and snap.counters[GATEWAY_REQUESTS] == 107


def test_a_deployment_without_availability_objective_reads_no_gateway_counters():
    engine = DeploymentEngine(_dep(objective=None))
    feed(engine, [smg(10), smg(20, own=1)])
    assert engine.state(60.0).availability is None
    assert GATEWAY_REQUESTS not in engine.store.latest().counters  # type: ignore[union-attr]


def test_the_other_gateway_version_is_flagged_on_the_target():
    engine = DeploymentEngine(_dep("sglang-router-0.3.2"))
    target = engine.deployment.targets[0]
    engine.observe_gateway(target, parse((GATEWAY_FIXTURES / "smg_1.13.0_pd_metrics.txt").read_text(), ROUTER_WANTED))
    assert "this gateway is smg-1.13, the config says sglang-router-0.3.2" in engine.warnings[target.id][0]
    engine = DeploymentEngine(_dep(objective=None))
    engine.observe_gateway(engine.deployment.targets[0], parse(
        (GATEWAY_FIXTURES / "sglang_router_0.3.2_pd_metrics.txt").read_text(), ROUTER_WANTED))
    assert "set `gateway: sglang-router-0.3.2`" in engine.warnings[engine.deployment.targets[0].id][0]


def test_a_nan_counter_is_skipped_and_said():
    engine = DeploymentEngine(_dep())
    feed(engine, [smg(10), smg(20).replace("} 20", "} NaN", 1)])
    assert any("is not a count" in w for w in engine.warnings[engine.deployment.targets[0].id])


def test_the_window_never_goes_below_zero_good():
    # sglang-router 0.3.2 counts its own endpoints' 5xx, which are not routed requests.
    w = ratio_window("5m", 300, 300, {GATEWAY_REQUESTS: 10, GATEWAY_FAILED: 15}, {}, 0.99)
    assert w.good_ratio == 0.0 and w.burn_rate == pytest.approx(100.0)
    assert not math.isnan(w.burn_rate)


def test_history_and_accumulators_survive_a_sidecar_restart():
    """Through the recording's codec, as `run` with a recording_path restores them."""
    dep = _dep()
    first = DeploymentEngine(dep)
    feed(first, [smg(100), smg(200, own=4)])
    second = DeploymentEngine(dep)
    snaps = [snapshot_from(json.loads(json.dumps(snapshot_to(s)))) for s in first.store.snapshots()]
    assert second.restore(snaps, book_from(json.loads(json.dumps(book_to(first.book))))) == 2
    second.observe_gateway(dep.targets[0], parse(smg(300, own=6), ROUTER_WANTED))
    second.snapshot(120.0)
    w = second.state(120.0).availability.windows["5m"]  # type: ignore[union-attr]
    assert (w.events, w.failed) == (206.0, 6.0)


def test_before_the_second_scrape_the_windows_have_no_data_not_a_perfect_ratio():
    engine = DeploymentEngine(_dep())
    assert engine.state(0.0).availability is not None  # listed before the first scrape
    feed(engine, [smg(10)])
    w = engine.state(0.0).availability.windows["5m"]  # type: ignore[union-attr]
    assert math.isnan(w.events) and w.good_ratio is None and math.isnan(w.burn_rate)


def test_gateway_series_absent_longer_than_the_horizon_retire_into_the_availability_totals():
    """A 500 series that stops appearing is retired after the longest window: as a request and as a failure
    (one series, both counters), not into its family's total; no count moves, while those still scraped stay."""
    engine = DeploymentEngine(_dep())
    target = engine.deployment.targets[0]
    t0 = 1_800_000_000.0
    for i, text in enumerate([smg(100), smg(200, passed=10)]):
        engine.observe_gateway(target, parse(text, ROUTER_WANTED), t0 + 60 * i)
        engine.snapshot(t0 + 60 * i)
    before = engine.store.latest().counters  # type: ignore[union-attr]
    assert (before[GATEWAY_REQUESTS], before[GATEWAY_FAILED]) == (110.0, 10.0)
    t, ok = t0 + 60, 200.0
    while t < t0 + 60 + SERIES_EXPIRY_SECONDS + 3600:  # the 500 series is gone from here on
        t, ok = t + 300, ok + 5
        engine.observe_gateway(target, parse(smg(ok), ROUTER_WANTED), t)
        engine.snapshot(t)
    # ... and into the gateway's answers, which the count of clients that left is a share of
    assert engine.book.retired_scalars == {GATEWAY_REQUESTS: 10.0, GATEWAY_FAILED: 10.0, GATEWAY_ANSWERED: 10.0}
    assert len(engine.book.scalars) == 1  # the 200s, scraped all along, kept
    latest = engine.store.latest()
    assert latest is not None and latest.counters[GATEWAY_FAILED] == 10.0
    assert latest.counters[GATEWAY_REQUESTS] == 110.0 + (ok - 200.0)
    assert engine.state(t).availability.windows["1h"].events == 60.0  # type: ignore[union-attr]
