"""The engine's output, pinned: a seeded run of a mixed and a PD deployment renders the same bytes.

The emulator is seeded, so a refactor of the engine (issue #26: its split into scheduler, KV cache,
incident effects and exposition state) must keep every random draw in the same order and every metric
where it was. This drives both test deployments through synthetic load, real requests (a closed loop,
a client that hangs up, a lone PD half that times out, a --fake-prefill decode half, a refused one) and
every incident kind, and hashes what /metrics renders at checkpoints along the way, the NPU exporter's
page, the control state and the request log. The digests were recorded on the engine before the split, and
recorded again when issue #23 made overheating thermal (a chip heats and cools with the magnitude) and a
full HBM shrink the KV pool by the share lost: an intended change of behaviour, not a refactor; and again when
issue #32 item 3 made an overheating chip's throttle slow its prefill too (a throttle lowers the clocks every
kernel runs at); and again when it made the chips' healthy temperature, power and HBM like the real A3 capture (with
each reading's noise), the throttle start past a margin, and clients' timeouts differ; and again when it made the
KV pool admit by tokens as SGLang does (kv_budget.py: the new-token ratio, retraction when a decode step no longer
fits). That last one left every request where it was (the request log's digest held): the mixed pages' digest moved
only by the next pending event, the pool's own look at when it fills. And again when a full KV cache (`hbm_full`)
became tokens of a preallocated pool that no request can have, with the chip's HBM flat, instead of slots taken
and HBM risen.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from monitor.emulate.engine import EmulatedDeployment, SubmitError
from monitor.emulate.exposition import render_npu, render_server
from monitor.emulate.incidents import Incident
from monitor.emulate.loadgen import LoadShape
from monitor.emulate.request_log import read_records
from monitor.emulate.wire import ClientRequest
from tests.emulate.closed_loop import ClosedLoop
from tests.emulate.conftest import make_config

SEED = 11
CHECKPOINTS = (2.0, 60.0, 130.0, 150.0, 205.0, 215.0, 290.0, 341.0, 348.5, 360.0, 430.0, 450.0, 500.0,
               600.0)

# sha256 of (the /metrics pages at every checkpoint, NPU pages, state) and of the request log.
DIGESTS = {
    "mixed": ("baaf90bebb207d7e560ab3f75e79b67a6f3e8f9caa6681e0aa7ca4e49d4268d0",
              "806303833c516f2a50d88c13e42753d7d72d6d97392567cacdf22211951f96b8"),
    "pd": ("82ea80661b9fce9c962dda4a9bd9977525063f67a24fd8f734bdc96ea9297bbc",
           "05ac0921113f67c87ca326e7c3ce8ec79d463733adfe7a6113a71940efdfb31f"),
}


def _incidents(name: str, pd: bool) -> list[Incident]:
    out = [
        Incident(name, "tpot_regression", 2.0, start=40, duration=60),
        Incident(name, "ttft_spike", 3.0, start=90, duration=40),
        Incident(name, "queue_buildup", 2.0, start=140, duration=40),
        Incident(name, "hbm_full", 0.25, start=200, duration=50),
        Incident(name, "spec_accept_drop", 2.0, start=230, duration=60),
        Incident(name, "npu_overheat", 1.5, start=300, duration=30),
        Incident(name, "metrics_disabled", start=310, duration=5),
        Incident(name, "restart", start=340, duration=8, role="prefill" if pd else None),
        Incident(name, "restart", start=450),
        Incident(name, "restart", start=480, role="decode" if pd else None),
        Incident(name, "down", start=400, duration=10, role="decode" if pd else None),
    ]
    if pd:
        out.append(Incident(name, "kv_transfer_failure", 0.4, start=260, duration=60))
    return out


def _client(rid: str, *, room: int | None = None, host: str | None = None, max_new: int | None = 64,
            ignore_eos: bool = True, log: bool = True) -> ClientRequest:
    return ClientRequest(endpoint="/generate", prompt_tokens=900, max_new_tokens=max_new, ignore_eos=ignore_eos,
                         stream=True, rid=rid, blocks=tuple(range(20)), bootstrap_room=room, bootstrap_host=host,
                         log_metrics=log, created_wall=0)


def _send(dep: EmulatedDeployment, pd: bool, rid: str, room: int, *, decode_first: bool = False, **kw):
    """One request the way the gateway sends it (PD: both halves, in either order); the answering half."""
    answer = next(s for s in dep.servers if s.spec.role in ("server", "decode"))
    if not pd:
        return dep.submit(answer, _client(rid, **kw))
    prefill = next(s for s in dep.servers if s.spec.role == "prefill")
    client = _client(rid, room=room, host="10.0.0.9", **kw)
    if decode_first:
        req = dep.submit(answer, client)
        dep.advance(0.5)
        dep.submit(prefill, client)
        return req
    dep.submit(prefill, client)
    return dep.submit(answer, client)


def _odd_clients(dep: EmulatedDeployment, pd: bool) -> dict[str, object]:
    """Clients the closed loop never is: long, one-token, limited without ignore_eos, unlogged, half-sent."""
    reqs = {
        "long": _send(dep, pd, "long", 900001, max_new=5000),
        "one": _send(dep, pd, "one", 900002, max_new=1),
        "natural": _send(dep, pd, "natural", 900003, max_new=40, ignore_eos=False),
        "chat": _send(dep, pd, "chat", 900004, max_new=None, ignore_eos=False),
        "unlogged": _send(dep, pd, "unlogged", 900005, log=False),
        "late-prefill": _send(dep, pd, "late-prefill", 900006, decode_first=True),
    }
    if pd:
        decode = next(s for s in dep.servers if s.spec.role == "decode")
        prefill = next(s for s in dep.servers if s.spec.role == "prefill")
        reqs["lone-decode"] = dep.submit(decode, _client("lone-decode", room=900007, host="10.0.0.9"))
        reqs["lone-prefill"] = dep.submit(prefill, _client("lone-prefill", room=900008, host="10.0.0.9"))
        reqs["fake"] = dep.submit(decode, _client("fake", room=900009, host="2.2.2.2"))
        with pytest.raises(SubmitError):
            dep.submit(decode, _client("no-room"))
    return reqs


def _progress(dep: EmulatedDeployment) -> bytes:
    """What the HTTP side reads off every live request: tokens so far and when the next one comes."""
    out = []
    for rid, req in sorted(dep._live.items()):
        n = req.tokens(dep.now)
        out.append((rid, n, req.next_token_time(n), req.finished, req.prefill_done, req.killed))
    return repr(out).encode()


def run(name: str, log_dir: Path) -> tuple[str, str]:
    cfg = make_config()
    dep = EmulatedDeployment(cfg.deployment(name), seed=SEED, wall_start=1_700_000_000.0, request_log_dir=log_dir)
    pd = any(s.spec.role == "decode" for s in dep.servers)
    for inc in _incidents(name, pd):
        dep.add_incident(inc)
    loop = ClosedLoop(dep, LoadShape(concurrency=6, input_tokens=2000, output_tokens=120, range_ratio=0.5,
                                     prefix_share=0.5), seed=SEED)
    pages = hashlib.sha256()
    odd: dict[str, object] = {}
    for i, t in enumerate(CHECKPOINTS):
        if i % 2:
            dep.advance(t - dep.now)
        else:
            dep.advance_to(t)
        if i == 1:
            odd = _odd_clients(dep, pd)
        if i == 2:
            dep.client_gone(odd["long"])  # mid-decode
            dep.client_gone(loop.done[-1])  # already finished: nothing happens
        if i == 5:  # inside hbm_full: a queue; one of it hangs up while it waits
            queued = [_send(dep, pd, f"queued-{k}", 900100 + k, max_new=200) for k in range(12)]
            dep.advance(0.01)
            dep.client_gone(queued[-1])
        if i == 9:
            dep.clear_incidents()
            dep.add_incident(Incident(name, "tpot_regression", 1.5, start=dep.now + 5, duration=30))
        for srv in dep.servers:
            body, _ = render_server(dep, srv, None)
            pages.update(f"{t} {srv.spec.name}\n".encode() + body)
        pages.update(render_npu(dep, 2, wall_ms=0).encode())
        state = dep.state()
        for inc in state["incidents"]:
            inc.pop("id")  # a process-wide counter: depends on which tests ran before
        pages.update(json.dumps(state, sort_keys=True).encode())
        pages.update(_progress(dep))
        pages.update(f"{dep.next_event_time()!r} {len(loop.done)} {dep.finished} {dep.real_finished}\n".encode())
    dep.close()
    log = hashlib.sha256()
    for server_dir in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        log.update(server_dir.name.encode())
        for rec in read_records(server_dir):
            log.update(json.dumps(rec, sort_keys=True).encode() + b"\n")
    return pages.hexdigest(), log.hexdigest()


@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_seeded_run_renders_the_recorded_bytes(name, tmp_path):
    assert run(name, tmp_path) == DIGESTS[name]
