"""PD disaggregation: how a request moves from its prefill server to its decode server.

The decode rank preallocates a slot (its prealloc queue, while the KV slots are taken); meanwhile the
prefill half waits in its rank's bootstrap queue for the handshake, which needs that preallocation. Then
the prefill rank prefills (its own slots), the KV moves (prefill inflight queue / decode transfer queue),
and decode runs on the decode rank (`Scheduler.start_decode`). A transfer may fail (`kv_transfer_failure`):
the decode server aborts the request. `--fake-prefill` clients (bench_serving) send only a decode half
with FAKE_BOOTSTRAP_HOST: the decode server makes up the KV itself.

`PDFlow` sees the deployment as `PDHost` and the scheduler as `PrefillDecodeScheduler`, what it reads and
calls of them: the scheduler imports this module (it hands decode ranks their prealloc queue), so naming
`scheduler.Scheduler` or `engine.EmulatedDeployment` here would close an import cycle.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from monitor.emulate.incidents import Effects
    from monitor.emulate.model import LatencyModel
    from monitor.emulate.observe import Observer
    from monitor.emulate.prefix_cache import KVCache
    from monitor.emulate.sim import RankSim, Req, ServerSim

BOOTSTRAP_SECONDS = 0.008
FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # bench_serving --fake-prefill: decode makes up the KV itself


class PrefillDecodeScheduler(Protocol):
    """What the PD flow needs of the scheduler (scheduler.Scheduler): a prefill's time, a decode's start."""

    def prefill(self, srv: ServerSim, rank: RankSim, req: Req) -> float: ...

    def start_decode(self, req: Req, t_first: float) -> None: ...


class PDHost(Protocol):
    """What `PDFlow` reads of its deployment (engine.EmulatedDeployment)."""

    now: float
    rng: random.Random
    model: LatencyModel
    server_of: dict[int, ServerSim]  # id(rank) -> its server, for the ranks alive now
    live: dict[str, Req]
    kv: KVCache
    observer: Observer

    @property  # read-only, so that the deployment's `Scheduler` satisfies this narrower type
    def scheduler(self) -> PrefillDecodeScheduler: ...

    def effects(self, role: str) -> Effects: ...

    def schedule(self, t: float, fn: Callable[[Any], None], arg: Any) -> None: ...


class PDFlow:
    """The prefill and decode queues of one PD deployment's ranks, and the KV transfer between them."""

    def __init__(self, dep: PDHost) -> None:
        self.dep = dep

    def prealloc(self, rank: RankSim) -> None:
        """A decode rank preallocates KV slots for the requests in its prealloc queue while they fit."""
        dep = self.dep
        srv = dep.server_of.get(id(rank))
        if srv is None or rank.dead:
            return
        cap = dep.kv.capacity(srv, rank)
        while (rank.prealloc and len(rank.running) + len(rank.transfer) < cap
               and dep.kv.decode_admits(srv, rank, rank.prealloc[0])):
            req = rank.prealloc.popleft()
            rank.transfer[req] = None
            req.t_prealloc = dep.now
            dep.observer.decode_bootstrap(srv, rank, req)
            if req.client is not None and req.client.bootstrap_host == FAKE_BOOTSTRAP_HOST:
                dep.schedule(dep.now + BOOTSTRAP_SECONDS, self.fake_transfer, req)
            elif req.p_rank is not None:
                dep.schedule(dep.now + BOOTSTRAP_SECONDS * dep.rng.uniform(0.5, 1.5), self.bootstrapped, req)
            else:
                req.prealloc_ready = True  # the prefill half has not reached its server yet

    def fake_transfer(self, req: Req) -> None:
        """--fake-prefill: the decode server makes up the KV cache and decodes straight away."""
        if not req.alive or req.rank is None:
            return
        req.rank.transfer.pop(req, None)
        req.rank.running[req] = None
        self.dep.scheduler.start_decode(req, self.dep.now + 0.5 * self.dep.model.tpot_median)

    def bootstrapped(self, req: Req) -> None:
        """The handshake is done: the prefill half joins its rank's waiting queue."""
        if not req.alive or req.p_rank is None or req.p_server is None or req not in req.p_rank.bootstrap:
            return
        prank = req.p_rank
        prank.bootstrap.pop(req, None)
        prank.waiting.append(req)
        req.t_wait = self.dep.now
        self.dep.observer.prefill_bootstrapped(req.p_server, prank, req)
        self.admit_prefill(prank)

    def admit_prefill(self, prank: RankSim) -> None:
        """A prefill rank takes waiting requests while it has slots."""
        dep = self.dep
        psrv = dep.server_of.get(id(prank))
        if psrv is None or prank.dead:
            return
        while prank.waiting and len(prank.running) < prank.capacity:
            req = prank.waiting.popleft()
            prank.running[req] = None
            req.queue_time = dep.now - req.t_wait
            dep.schedule(dep.now + dep.scheduler.prefill(psrv, prank, req), self.prefilled, req)

    def prefilled(self, req: Req) -> None:
        """Prefill done: the KV starts moving; the prefill slot is free."""
        dep = self.dep
        if not req.alive or req.p_rank is None or req.p_server is None:
            return
        prank = req.p_rank
        prank.running.pop(req, None)
        prank.inflight[req] = None
        req.kv_seconds, req.kv_mb = dep.model.kv_transfer(dep.rng, req.shape.prompt_tokens)
        dep.schedule(dep.now + req.kv_seconds, self.transferred, req)
        self.admit_prefill(prank)

    def transferred(self, req: Req) -> None:
        """The KV arrived (or the transfer failed): the prefill side finishes, the decode side decodes."""
        dep = self.dep
        if not req.alive or req.p_rank is None or req.p_server is None or req.rank is None:
            return
        if dep.effects("prefill").transfer_fails(dep.rng):
            self.transfer_failed(req)
            return
        req.p_rank.inflight.pop(req, None)
        dep.observer.kv_transferred(req.p_server, req.p_rank, req)
        req.prefill_done = True
        req.notify()
        dep.observer.prefill_finished(req.p_server, req)
        rank = req.rank
        assert req.server is not None
        rank.transfer.pop(req, None)
        rank.running[req] = None
        # The KV is here: the request waits for the next decode batch (half a step on average).
        wait = 0.5 * dep.model.tpot_median
        dep.observer.decode_transferred(req.server, rank, req, wait)
        dep.scheduler.start_decode(req, dep.now + wait)

    def transfer_failed(self, req: Req) -> None:
        """Both sides count the failed transfer; the decode server aborts the request, which its client
        (and the request log) sees as an error before the first token."""
        dep = self.dep
        assert req.p_rank is not None and req.p_server is not None and req.server is not None
        assert req.rank is not None
        req.alive = False
        dep.live.pop(req.rid, None)
        req.p_rank.inflight.pop(req, None)
        rank = req.rank
        rank.transfer.pop(req, None)
        dep.observer.transfer_failed(req)
        req.produced = 0
        req.shape = dataclasses.replace(req.shape, finish_reason="abort")
        req.abort_message, req.abort_status = "KV transfer failed", 500
        req.finished = req.prefill_done = True
        self.prealloc(rank)
        self.admit_prefill(req.p_rank)
        req.notify()
