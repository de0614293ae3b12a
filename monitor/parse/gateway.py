"""What a gateway's expositions say, for smg 1.13 and sglang-router 0.3.2 alike (docs/gateways.md).

- Its Prometheus listener: how many workers it lists, how many are healthy or behind an open circuit
  breaker, how many requests it routed (`router_summary`); which of its counters count the requests and the
  failed requests of the availability SLI (`availability_samples`, from `conventions.AVAILABILITY_SERIES`);
  which gateway it is (`detect_gateway`); which count its answers and those whose client left first
  (`client_closed_samples`, from `conventions.CLIENT_CLOSED_SERIES`).
- Its `/engine_metrics`: every worker's `/metrics` merged into one exposition, each series labelled with
  `worker_addr` (0.3.2 also renames `sglang:` to `sglang_`; 1.13 keeps the names and pads a label a worker
  lacks with ""). `split_workers` gives each worker's samples back with the role its `engine_type` label
  names, so that a PD prefill server's request counters are not read as a decode server's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import urlsplit

from monitor.conventions.names import (
    AVAILABILITY_SERIES,
    CB_OPEN,
    CLIENT_CLOSED_SERIES,
    GATEWAY_SGLANG_ROUTER,
    GATEWAY_SMG,
    ROUTER_FAMILIES,
    SMG_ADMISSION_INFLIGHT,
    SMG_HTTP_RESPONSES,
    SMG_ROUTER_REQUESTS,
    SMG_WORKER_CB_STATE,
    SMG_WORKER_HEALTH,
    WORKER_ADDR_LABEL,
    Matcher,
)
from monitor.conventions.slis import ENGINE_TYPE_LABEL, ENGINE_TYPE_ROLES
from monitor.parse.exposition import Labels, Sample

# Every sample name of the router families (counters, gauges, histograms) the sidecar reads.
ROUTER_WANTED = frozenset(f + s for f in ROUTER_FAMILIES for s in ("", "_bucket", "_count", "_sum"))


def router_summary(samples: Iterable[Sample]) -> dict[str, float]:
    """Worker health and traffic from the gateway's listener (a removed worker, -1, is not counted)."""
    health: list[float] = []
    breakers: list[float] = []
    requests = 0.0
    for s in samples:
        if s.name == SMG_WORKER_HEALTH:
            health.append(s.value)
        elif s.name == SMG_WORKER_CB_STATE:
            breakers.append(s.value)
        elif s.name == SMG_ROUTER_REQUESTS:
            requests += s.value
    return {
        "workers": float(sum(1 for v in health if v >= 0)),
        "workers_healthy": float(sum(1 for v in health if v == 1)),
        "workers_circuit_open": float(sum(1 for v in breakers if v == CB_OPEN)),
        "requests_total": requests,
    }


@lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def matches(labels: Labels, matchers: Iterable[Matcher]) -> bool:
    """Prometheus label matching: a missing label reads as "", regexes match the whole value."""
    own = dict(labels)
    for name, op, value in matchers:
        have = own.get(name, "")
        if op == "=":
            ok = have == value
        elif op == "!=":
            ok = have != value
        elif op == "=~":
            ok = _regex(value).fullmatch(have) is not None
        elif op == "!~":
            ok = _regex(value).fullmatch(have) is None
        else:
            raise ValueError(f"unknown matcher operator {op!r}")
        if not ok:
            return False
    return True


def availability_samples(samples: Iterable[Sample], gateway: str) -> tuple[list[Sample], list[Sample]]:
    """(samples counting requests, samples counting failed requests) of the availability SLI on `gateway`;
    one sample can be in both (smg 1.13: a 5xx response is a request and a failure)."""
    spec = AVAILABILITY_SERIES[gateway]
    total: list[Sample] = []
    bad: list[Sample] = []
    for s in samples:
        if s.name == spec.total.family and matches(s.labels, spec.total.matchers):
            total.append(s)
        if any(s.name == m.family and matches(s.labels, m.matchers) for m in spec.bad):
            bad.append(s)
    return total, bad


def client_closed_samples(samples: Iterable[Sample], gateway: str) -> tuple[list[Sample], list[Sample]] | None:
    """(samples counting the answers on serving paths, those counting answers whose client left first) on
    `gateway`, or None where the gateway does not tell a client that left apart (sglang-router 0.3.2)."""
    closed_spec = CLIENT_CLOSED_SERIES[gateway]
    if closed_spec is None:
        return None
    answered_spec = AVAILABILITY_SERIES[gateway].total
    answered: list[Sample] = []
    closed: list[Sample] = []
    for s in samples:
        if s.name == answered_spec.family and matches(s.labels, answered_spec.matchers):
            answered.append(s)
        if s.name == closed_spec.family and matches(s.labels, closed_spec.matchers):
            closed.append(s)
    return answered, closed


def detect_gateway(samples: Iterable[Sample]) -> str | None:
    """Which gateway wrote this listener exposition: smg 1.13 always exposes smg_admission_inflight and labels
    its responses with `path`; sglang-router 0.3.2 has neither. None when it cannot tell (no such series)."""
    responses = False
    for s in samples:
        if s.name == SMG_ADMISSION_INFLIGHT:
            return GATEWAY_SMG
        if s.name == SMG_HTTP_RESPONSES:
            if any(k == "path" for k, _ in s.labels):
                return GATEWAY_SMG
            responses = True
    return GATEWAY_SGLANG_ROUTER if responses else None


def worker_address(url: str) -> str:
    """`scheme://host:port` of a worker or target URL, as the gateway writes `worker_addr`."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def split_workers(samples: Iterable[Sample]) -> dict[str, tuple[str | None, list[Sample]]]:
    """worker_addr -> (role from engine_type, or None when absent or mixed; that worker's samples).
    Samples without `worker_addr` come back under ""."""
    parts: dict[str, list[Sample]] = {}
    types: dict[str, set[str]] = {}
    for s in samples:
        addr = etype = ""
        for k, v in s.labels:
            if k == WORKER_ADDR_LABEL:
                addr = worker_address(v) if v else ""
            elif k == ENGINE_TYPE_LABEL:
                etype = v
        parts.setdefault(addr, []).append(s)
        if etype:
            types.setdefault(addr, set()).add(etype)
    out: dict[str, tuple[str | None, list[Sample]]] = {}
    for addr, own in parts.items():
        found = types.get(addr, set())
        role = ENGINE_TYPE_ROLES.get(next(iter(found))) if len(found) == 1 else None
        out[addr] = (role, own)
    return out
