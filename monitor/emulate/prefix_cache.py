"""The KV cache of each DP rank: its slots, what it holds, what is retracted, and its prefix-cache hits.

`KVCache` is the deployment's view of its ranks' KV pools. A rank has `max_running_requests / dp` slots;
a full KV cache (`hbm_full`) leaves fewer, and a unified rank then retracts the decoding requests beyond
them (newest first, as SGLang's `retract_decode` keeps the oldest): they go back to the front of the
waiting queue, re-prefill their prompt and output so far when admitted, and resume decoding without a
new TTFT. Token usage is read off the requests that hold KV: the prompt and output so far of those
decoding, the prompt of those prefilling, in transfer or in flight. A real prompt's cached part comes
from the rank's radix cache (radix_cache.py `PrefixCache`, which the rank owns).

`KVCache` sees the deployment as `KVHost` and the scheduler as `RetractingScheduler`: what it reads and
calls of them, no more. The scheduler imports this module (it asks `capacity`), so naming
`engine.EmulatedDeployment` or `scheduler.Scheduler` here would close an import cycle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from monitor.emulate.incidents import Effects
    from monitor.emulate.model import LatencyModel, RequestShape
    from monitor.emulate.observe import Observer
    from monitor.emulate.sim import RankSim, Req, ServerSim


class RetractingScheduler(Protocol):
    """What a retraction needs of the scheduler (scheduler.Scheduler): end a request's decode run, re-rate."""

    def close_segment(self, req: Req, now: float) -> None: ...

    def touch(self, rank: RankSim) -> None: ...


class KVHost(Protocol):
    """What `KVCache` reads of its deployment (engine.EmulatedDeployment)."""

    now: float
    model: LatencyModel
    observer: Observer

    @property  # read-only, so that the deployment's `Scheduler` satisfies this narrower type
    def scheduler(self) -> RetractingScheduler: ...

    def effects(self, role: str) -> Effects: ...


@dataclass(frozen=True)
class KVUsage:
    """A rank's KV pool right now, in tokens (`usage` is the share the scheduler reports)."""

    seq: int  # prompt and output so far of the decoding requests
    usage: float
    used: float
    evictable: float
    total: int


class KVCache:
    """The KV pools of one deployment's ranks: how many requests fit, who is retracted, what they hold."""

    def __init__(self, dep: KVHost) -> None:
        self.dep = dep

    def capacity(self, srv: ServerSim, rank: RankSim) -> int:
        """Requests that fit on the rank now (full HBM leaves fewer KV slots: the rest wait)."""
        return self.dep.effects(srv.spec.role).kv_slots(rank.capacity)

    def match_prefix(self, srv: ServerSim, rank: RankSim, req: Req) -> RequestShape:
        """The request's shape at its prefill: a real prompt's cached part comes from the rank's prefix
        cache, which then holds it; the rank's cache hit rate is this request's."""
        if req.real and req.client is not None and not srv.spec.disable_radix_cache:
            cached = rank.cache.match_and_insert(req.client.blocks, req.shape.prompt_tokens)
            req.shape = dataclasses.replace(req.shape, cached_tokens=cached)
        shape = req.shape
        rank.last_hit = shape.cached_tokens / max(shape.prompt_tokens, 1)
        return shape

    def retract_excess(self, srv: ServerSim, rank: RankSim) -> None:
        """KV room for fewer requests than are running: retract the newest decoding ones (SGLang's
        retract_decode), counted as SGLang counts them."""
        scheduler = self.dep.scheduler
        cap = self.capacity(srv, rank)
        victims = list(rank.decoding)[::-1][:max(len(rank.running) - cap, 0)]
        for req in victims:
            scheduler.close_segment(req, self.dep.now)
            del rank.decoding[req]
            del rank.running[req]
            req.rate = 0.0
            req.retracted = True
            rank.retracted[req] = None
            rank.waiting.appendleft(req)
            self.dep.observer.retracted(srv, rank, req, int(req.mark_done) + 1)
        if victims:
            scheduler.touch(rank)

    def usage(self, rank: RankSim, eff: Effects) -> KVUsage:
        """What the rank's requests hold at `now` (and what a full HBM makes of it)."""
        done = {r: r.tokens(self.dep.now) for r in rank.decoding}
        seq = sum(r.shape.prompt_tokens + done[r] for r in rank.decoding)
        held = seq + sum(r.shape.prompt_tokens for r in rank.running if r not in done)
        held += sum(r.shape.prompt_tokens for r in rank.transfer) + sum(r.shape.prompt_tokens for r in rank.inflight)
        total = rank.max_total_tokens
        usage = eff.token_usage(min(held / total, 1.0))
        pool = total * eff.kv_share if eff.hbm_full else total  # what a full HBM leaves of the KV pool
        used = min(held, pool)
        evictable = max(min(pool - used, pool * 0.1 * (1 if self.dep.model.prefix_hit else 0.2)), 0.0)
        return KVUsage(seq, usage, used, evictable, total)

