"""The availability SLI's counters (conventions.AVAILABILITY_SERIES) against every request the real gateways
answered in the captures (measurements.json: worker answers, broken streams, disconnects; availability.json:
workers down, the gateway's own endpoints, admission shedding): for each probe, what the counters that moved
say (requests, failed requests) is what the clients saw."""

from __future__ import annotations

import json
import re

import pytest

from monitor.conventions.names import GATEWAY_OWN_PATHS, GATEWAY_SGLANG_ROUTER, GATEWAY_SMG
from monitor.parse.exposition import Sample, parse
from monitor.parse.gateway import availability_samples, detect_gateway, matches
from tests.conftest import GATEWAY_FIXTURES, GATEWAY_MEASUREMENTS

AVAILABILITY = GATEWAY_FIXTURES / "availability.json"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
PRE_ROUTING_0_3_2 = "gateway-400"  # malformed JSON: sglang-router 0.3.2 answers it without routing it
ADMISSION_TIMEOUT_0_3_2 = 408  # ... and a request that waited too long for admission


def _moved(changes: dict[str, float]) -> list[Sample]:
    out = []
    for key, delta in changes.items():
        m = _SAMPLE.match(key)
        assert m, key
        out.append(Sample(m.group(1), tuple(sorted(_LABEL.findall(m.group(2)))), delta))
    return out


def _probes() -> list[tuple[str, str, dict]]:
    out = []
    for source in (GATEWAY_MEASUREMENTS, AVAILABILITY):
        for run, doc in json.loads(source.read_text()).items():
            gateway = run.split()[0]
            out += [(gateway, f"{run}: {p['name']}", p) for p in doc["probes"]]
    return out


PROBES = _probes()


def _failed(probe: dict, client: dict) -> bool:
    """What the client saw: a 5xx, or a stream its worker broke mid-body (the worker's log says `broken`)."""
    broken = any(w.get("outcome", "").startswith("broken") for w in probe.get("workers", []))
    return client.get("status", 0) >= 500 or broken


def _own(client: dict) -> bool:
    return re.fullmatch(GATEWAY_OWN_PATHS, client["path"]) is not None


def test_both_capture_files_cover_both_gateways_and_every_kind_of_answer():
    gateways = {g for g, _, _ in PROBES}
    assert gateways == {GATEWAY_SMG, GATEWAY_SGLANG_ROUTER} and len(PROBES) > 100
    statuses = {c.get("status") for _, _, p in PROBES for c in p.get("clients", [p.get("client")])}
    assert {200, 400, 429, 500, 502, 503} <= statuses


@pytest.mark.parametrize("gateway,name,probe", PROBES, ids=[n for _, n, _ in PROBES])
def test_the_counters_give_each_probes_requests_and_failures_as_the_clients_saw_them(gateway, name, probe):
    clients = probe.get("clients") or [probe["client"]]
    total, bad = availability_samples(_moved(probe["changes"]), gateway)
    counted, failed = sum(s.value for s in total), sum(s.value for s in bad)
    if gateway == GATEWAY_SMG:
        # Every answer on a serving path (499, 4xx, 429 included); failed: 5xx and broken streams, each once.
        assert counted == sum(1 for c in clients if not _own(c)), name
        assert failed == sum(1 for c in clients if not _own(c) and _failed(probe, c)), name
    else:
        # The routed requests; failed: every 5xx, the gateway's own endpoints' too; broken streams unseen.
        routed = [c for c in clients if not _own(c) and probe["name"] != PRE_ROUTING_0_3_2
                  and c.get("status") != ADMISSION_TIMEOUT_0_3_2]
        assert counted == len(routed), name
        assert failed == sum(1 for c in clients if c.get("status", 0) >= 500), name


def test_a_workers_5xx_passed_through_by_smg_1_13_counts_once_though_two_counters_move():
    doc = json.loads(GATEWAY_MEASUREMENTS.read_text())["smg-1.13 regular"]
    probe = next(p for p in doc["probes"] if p["name"] == "worker-500")
    moved = _moved(probe["changes"])
    names = {s.name for s in moved if s.name in ("smg_http_responses_total", "smg_router_request_errors_total")
             and s.value}
    assert names == {"smg_http_responses_total", "smg_router_request_errors_total"}
    assert sum(s.value for s in availability_samples(moved, GATEWAY_SMG)[1]) == 1


def test_a_client_disconnect_is_a_request_not_a_failure():
    for run in ("smg-1.13 regular", "smg-1.13 pd"):
        probe = next(p for p in json.loads(GATEWAY_MEASUREMENTS.read_text())[run]["probes"]
                     if p["name"] == "client-disconnect")
        assert "status_code=\"499\"" in " ".join(probe["changes"])
        total, bad = availability_samples(_moved(probe["changes"]), GATEWAY_SMG)
        assert sum(s.value for s in total) == 1 and not bad


@pytest.mark.parametrize("labels,matchers,expected", [
    ((("a", "x"),), (("a", "=", "x"),), True),
    ((("a", "x"),), (("b", "=", ""),), True),  # a missing label reads as ""
    ((("a", "x"),), (("b", "!=", ""),), False),
    ((("code", "503"),), (("code", "=~", "5.."),), True),
    ((("code", "5030"),), (("code", "=~", "5.."),), False),  # anchored
    ((("path", "/workers/abc"),), (("path", "!~", GATEWAY_OWN_PATHS),), False),
    ((("path", "/v1/chat/completions"),), (("path", "!~", GATEWAY_OWN_PATHS),), True),
    ((), (("path", "!~", GATEWAY_OWN_PATHS),), True),
])
def test_label_matching_follows_prometheus(labels, matchers, expected):
    assert matches(labels, matchers) is expected


def test_unknown_matcher_operator_is_an_error():
    with pytest.raises(ValueError, match="operator"):
        matches((), (("a", "==", "x"),))


@pytest.mark.parametrize("path,expected", [
    (p, GATEWAY_SMG if p.name.startswith("smg_") else GATEWAY_SGLANG_ROUTER)
    for p in sorted(GATEWAY_FIXTURES.glob("*metrics.txt")) if "engine_metrics" not in p.name
], ids=lambda x: getattr(x, "name", x))
def test_the_gateway_is_recognised_from_its_listener(path, expected):
    assert detect_gateway(parse(path.read_text()).selected) == expected


def test_a_listener_without_the_telling_series_is_not_guessed():
    assert detect_gateway([Sample("smg_worker_health", (("worker", "http://w"),), 1.0)]) is None
