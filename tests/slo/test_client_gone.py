"""Requests whose client left before the end of the answer: the gateway's 499s (smg 1.13) with their share of its
answers, and SGLang's aborts on the answering servers, per window; None where a source does not measure them."""

from __future__ import annotations

import json
import math

from monitor.config import parse_config
from monitor.parse.exposition import parse
from monitor.parse.gateway import ROUTER_WANTED
from monitor.record.codec import book_from, book_to, snapshot_from, snapshot_to
from monitor.slo.engine import DeploymentEngine


def _dep(gateway: str | None = None, mode: str = "pd-mixed", availability: float | None = None):
    router = {"role": "router", "url": "http://10.0.0.3:29000/metrics"}
    if gateway:
        router["gateway"] = gateway
    roles = ["prefill", "decode"] if mode == "pd-disaggregated" else ["server"]
    servers = [{"role": r, "url": f"http://10.0.0.{i + 1}:8000/metrics"} for i, r in enumerate(roles)]
    return parse_config({"deployments": [{"name": "d", "mode": mode, "availability_objective": availability,
                                          "targets": [router, *servers]}]}).deployments[0]


def smg(ok: float, gone: float | None = None) -> str:
    """smg 1.13's listener: 200s and 499 client_closed_request on /generate, and probes on its own paths."""
    lines = ["smg_admission_inflight 0",
             f'smg_http_responses_total{{path="/generate",status_code="200",error_code=""}} {ok}',
             f'smg_http_responses_total{{path="/health",status_code="200",error_code=""}} {ok * 3}']
    if gone is not None:
        lines.append(f'smg_http_responses_total{{path="/generate",status_code="499",error_code="client_closed_request"}} '
                     f"{gone}")
    return "\n".join(lines) + "\n"


def old(routed: float) -> str:
    return (f'smg_router_requests_total{{endpoint="generate",streaming="true"}} {routed}\n'
            f'smg_http_responses_total{{status_code="200",error_code=""}} {routed}\n')


def sglang(requests: float, aborted: float | None = None) -> str:
    lines = [f'sglang:num_requests_total{{model_name="m",is_streaming="true"}} {requests}']
    if aborted is not None:  # SGLang creates the series at the first abort
        lines.append(f'sglang:num_aborted_requests_total{{model_name="m"}} {aborted}')
    return "\n".join(lines) + "\n"


def feed_gateway(engine: DeploymentEngine, texts: list[str], step: float = 60.0) -> None:
    router = engine.deployment.targets[0]
    for i, text in enumerate(texts):
        engine.observe_gateway(router, parse(text, ROUTER_WANTED), i * step)
        engine.snapshot(i * step)


def test_smg_499s_are_counted_per_window_with_their_share_of_the_answers_without_an_availability_objective():
    engine = DeploymentEngine(_dep())
    feed_gateway(engine, [smg(100), smg(130), smg(150, gone=30)])  # the 499 series is born with its first 30
    w = engine.state(120.0).client_gone["5m"]  # type: ignore[index]
    assert (w.answered, w.client_closed) == (80.0, 30.0)  # /health probes are not answers to clients
    assert w.closed_ratio == 30 / 80
    assert engine.state(120.0).availability is None  # not a server-side failure: no SLI of its own


def test_the_499s_count_once_beside_the_availability_counters_of_the_same_series():
    engine = DeploymentEngine(_dep(availability=0.99))
    feed_gateway(engine, [smg(100, gone=0), smg(150, gone=10)])
    state = engine.state(60.0)
    assert state.client_gone["5m"].client_closed == 10.0  # type: ignore[index]
    assert state.availability.windows["5m"].events == 60.0 and state.availability.windows["5m"].failed == 0.0  # type: ignore[union-attr]


def test_sglang_router_0_3_2_counts_a_client_that_left_200_so_the_gateway_numbers_are_none_not_zero():
    engine = DeploymentEngine(_dep("sglang-router-0.3.2"))
    feed_gateway(engine, [old(10), old(20)])
    assert engine.state(60.0).client_gone is None  # no source of them at all here: nothing listed


def test_sglang_aborts_count_on_the_answering_servers_only_and_are_zero_before_the_first_abort():
    engine = DeploymentEngine(_dep(mode="pd-disaggregated"))
    prefill, decode = engine.deployment.targets[1], engine.deployment.targets[2]
    texts = [(sglang(10), sglang(10)), (sglang(20), sglang(20)), (sglang(30, aborted=50), sglang(30, aborted=4))]
    for i, (p, d) in enumerate(texts):
        engine.observe(prefill, parse(p), i * 60.0)
        engine.observe(decode, parse(d), i * 60.0)
        engine.snapshot(i * 60.0)
        if i == 1:
            w = engine.state(60.0).client_gone["5m"]  # type: ignore[index]
            assert w.aborted == 0.0 and w.answered is None and w.client_closed is None
    w = engine.state(120.0).client_gone["5m"]  # type: ignore[index]
    assert w.aborted == 4.0  # the decode server's; the prefill server's leg of the same requests is not counted again


def test_before_the_second_scrape_the_windows_have_no_data_not_zero():
    engine = DeploymentEngine(_dep())
    feed_gateway(engine, [smg(10, gone=1)])
    w = engine.state(0.0).client_gone["5m"]  # type: ignore[index]
    assert math.isnan(w.client_closed) and math.isnan(w.aborted) and w.closed_ratio is None  # type: ignore[arg-type]


def test_a_restarted_sidecar_keeps_counting_the_499s_from_its_recorded_book():
    dep = _dep()
    first = DeploymentEngine(dep)
    feed_gateway(first, [smg(100, gone=5), smg(150, gone=10)])
    second = DeploymentEngine(dep)
    snaps = [snapshot_from(json.loads(json.dumps(snapshot_to(s)))) for s in first.store.snapshots()]
    second.restore(snaps, book_from(json.loads(json.dumps(book_to(first.book)))))
    assert second.state(60.0).client_gone["5m"].client_closed == 5.0  # type: ignore[index]
    second.observe_gateway(dep.targets[0], parse(smg(200, gone=12), ROUTER_WANTED), 120.0)
    second.snapshot(120.0)
    w = second.state(120.0).client_gone["5m"]  # type: ignore[index]
    assert (w.answered, w.client_closed) == (107.0, 7.0)


def test_an_smg_listener_that_answered_nothing_yet_counts_zero_not_unmeasured():
    """smg creates its /generate series at the first answer; before it, the gateway has answered 0 requests."""
    engine = DeploymentEngine(_dep())
    feed_gateway(engine, ["smg_admission_inflight 0\n"] * 2)
    w = engine.state(60.0).client_gone["5m"]  # type: ignore[index]
    assert (w.answered, w.client_closed, w.closed_ratio) == (0.0, 0.0, None)
    engine.observe_gateway(engine.deployment.targets[0], parse(smg(5, gone=2), ROUTER_WANTED), 120.0)
    engine.snapshot(120.0)
    w = engine.state(120.0).client_gone["5m"]  # type: ignore[index]
    assert (w.answered, w.client_closed) == (7.0, 2.0)  # born after the first scrape: counted whole
