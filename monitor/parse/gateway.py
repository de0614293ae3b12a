"""What a gateway's expositions say, for smg 1.13 and sglang-router 0.3.2 alike (docs/gateways.md).

- Its Prometheus listener: how many workers it lists, how many are healthy or behind an open circuit
  breaker, how many requests it routed (`router_summary`).
- Its `/engine_metrics`: every worker's `/metrics` merged into one exposition, each series labelled with
  `worker_addr` (0.3.2 also renames `sglang:` to `sglang_`; 1.13 keeps the names and pads a label a worker
  lacks with ""). `split_workers` gives each worker's samples back with the role its `engine_type` label
  names, so that a PD prefill server's request counters are not read as a decode server's.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from monitor.conventions import (
    ENGINE_TYPE_LABEL,
    ENGINE_TYPE_ROLES,
    ROUTER_FAMILIES,
    SMG_ROUTER_REQUESTS,
    SMG_WORKER_CB_STATE,
    SMG_WORKER_HEALTH,
    WORKER_ADDR_LABEL,
)
from monitor.parse.exposition import Sample

CB_OPEN = 1.0
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
