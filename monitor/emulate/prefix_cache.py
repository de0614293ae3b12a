"""The KV cache of each DP rank: its pool's tokens, what its requests hold and may write, who is retracted, and
its prefix-cache hits.

A rank has `max_running_requests / dp` slots and a KV pool of `max_total_num_tokens` (`--max-total-tokens`, else
room for every slot's nominal prompt and answer and a quarter more), preallocated at start. Requests are admitted by slots and by
tokens as SGLang admits them (kv_budget.py: a new request needs its prompt and all it may write beside what the
running ones are expected to write, at the new-token ratio); when the decoding requests fill the pool, the next step
retracts the ones that wrote least: they go back to the front of the waiting queue, re-prefill their prompt and
output so far when admitted, and resume decoding without a new TTFT. A full KV cache (`hbm_full`) leaves part of
the pool to the requests (SGLang's pool is preallocated: the chip's HBM does not move). Token usage is read off the requests that hold KV: the prompt and output so far of those
decoding, the prompt of those prefilling, in transfer or in flight. A real prompt's cached part comes from the
rank's radix cache (radix_cache.py `PrefixCache`, which the rank owns).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from monitor.emulate.kv_budget import (
    CLIP_MAX_NEW_TOKENS,
    Writing,
    admits,
    decayed,
    decode_admits,
    ratio_after_retraction,
    retraction,
)

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
    """The KV pools of one deployment's ranks: what their requests hold and may write, who is admitted by
    tokens, who is retracted (kv_budget.py: SGLang's rules, applied here to a rank's requests)."""

    def __init__(self, dep: KVHost) -> None:
        self.dep = dep

    def capacity(self, srv: ServerSim, rank: RankSim) -> int:
        """Running slots of the rank (max_running_requests / dp); the pool's tokens admit within them."""
        return rank.capacity

    def match_prefix(self, srv: ServerSim, rank: RankSim, req: Req) -> RequestShape:
        """The request's shape at its prefill: a real prompt's cached part comes from the rank's prefix
        cache, which then holds it; the rank's cache hit rate is this request's."""
        if req.real and req.client is not None and not srv.spec.disable_radix_cache:
            cached = rank.cache.match_and_insert(req.client.blocks, req.shape.prompt_tokens)
            req.shape = dataclasses.replace(req.shape, cached_tokens=cached)
        shape = req.shape
        rank.last_hit = shape.cached_tokens / max(shape.prompt_tokens, 1)
        return shape

    # --- what the requests hold and may write ------------------------------------------------------
    def writing(self, req: Req, written: int | None = None) -> Writing:
        """One request's tokens for the budget: a client's own limit, else what the synthetic client asked for
        (an answer cut at its length was asked for exactly that; one that stopped by itself, the workload's
        nominal answer)."""
        shape = req.shape
        done = req.tokens(self.dep.now) if written is None else written
        if req.client is not None:
            limit = req.client.max_new_tokens
            max_new = CLIP_MAX_NEW_TOKENS if limit is None else limit
            ignore_eos = req.client.ignore_eos
        else:
            nominal = self.dep.model.output_tokens
            max_new = shape.completion_tokens if shape.finish_reason != "stop" else max(nominal, shape.completion_tokens)
            ignore_eos = False
        return Writing(shape.prompt_tokens + done, done, max_new, ignore_eos)

    def held(self, rank: RankSim) -> int:
        """Tokens the rank's requests hold now: prompt and output so far of those decoding, the prompt of
        those prefilling, in transfer or in flight."""
        return self._seq(rank) + self._outside(rank)

    def _seq(self, rank: RankSim) -> int:
        """Prompt and output so far of the decoding requests (SGLang's decode_sum_seq_lens)."""
        now = self.dep.now
        return sum(r.shape.prompt_tokens + r.tokens(now) for r in rank.decoding)

    @staticmethod
    def _outside(rank: RankSim) -> int:
        """The prompts held outside the decode batch: prefilling, in transfer or in flight."""
        held = sum(r.shape.prompt_tokens for r in rank.running if r not in rank.decoding)
        return held + sum(r.shape.prompt_tokens for r in rank.transfer) + sum(r.shape.prompt_tokens for r in rank.inflight)

    def promise(self, rank: RankSim, req: Req) -> None:
        """`req` runs on the unified `rank` now: count the most KV it can ever hold there."""
        self.release(req)
        mine = self.writing(req, 0)
        req.promise = mine.held + max(mine.max_new, req.shape.completion_tokens)
        rank.promised += req.promise
        req.promised_on = rank

    @staticmethod
    def release(req: Req) -> None:
        """`req` no longer runs where it was promised (finished, aborted or retracted)."""
        rank = req.promised_on
        if rank is not None:
            rank.promised -= req.promise
            req.promised_on = None

    def lost(self, srv: ServerSim, rank: RankSim, eff: Effects | None = None) -> int:
        """Tokens of the pool no request can have (a full KV cache: `hbm_full`); `eff`: the server's effects now."""
        return (eff or self.dep.effects(srv.spec.role)).pool_lost(rank.max_total_tokens)

    def free(self, srv: ServerSim, rank: RankSim, eff: Effects | None = None) -> int:
        return rank.max_total_tokens - self.lost(srv, rank, eff) - self.held(rank)

    # --- the new-token ratio -------------------------------------------------------------------------
    def decay(self, rank: RankSim) -> None:
        """Decode steps since the last look, none of which retracted: the ratio falls by as many."""
        now = self.dep.now
        if rank.decoding and rank.step_seconds > 0:
            rank.new_token_ratio = decayed(rank.new_token_ratio, (now - rank.ratio_t) / rank.step_seconds)
        rank.ratio_t = now

    # --- admission -----------------------------------------------------------------------------------
    def admits(self, srv: ServerSim, rank: RankSim, req: Req, eff: Effects | None = None) -> bool:
        """Whether the waiting `req` fits the unified rank's pool by SGLang's reservation (an idle rank takes
        it whatever it needs: SGLang refuses a prompt longer than the pool at the tokenizer)."""
        if not rank.running:
            return True
        self.decay(rank)
        mine = self.writing(req, int(req.mark_done) + 1 if req.retracted else 0)
        extend = mine.held if req.retracted else req.shape.prompt_tokens - req.shape.cached_tokens
        pool = rank.max_total_tokens - self.lost(srv, rank, eff)
        if rank.promised + extend + mine.left() < pool:
            return True  # the pool holds all the running requests can ever hold: SGLang's count passes too
        running = [self.writing(r) for r in rank.running]
        return admits(self.free(srv, rank, eff), running, rank.new_token_ratio, extend, mine.max_new - mine.written)

    def decode_admits(self, srv: ServerSim, rank: RankSim, req: Req) -> bool:
        """Whether a PD decode rank preallocates `req`'s KV now."""
        holding = len(rank.running) + len(rank.transfer)
        return not holding or decode_admits(self.free(srv, rank), holding, req.shape.prompt_tokens)

    # --- retraction ----------------------------------------------------------------------------------
    def overflow_at(self, srv: ServerSim, rank: RankSim, eff: Effects | None = None) -> float:
        """When the decoding requests will have filled the pool at their current rates (inf: never)."""
        if rank.promised + len(rank.decoding) <= rank.max_total_tokens - self.lost(srv, rank, eff):
            return math.inf  # all they can ever hold fits
        per_second = sum(1.0 / r.rate for r in rank.decoding if r.rate > 0)
        if not per_second:
            return math.inf
        room = self.free(srv, rank, eff) - len(rank.decoding)
        return self.dep.now + max(room, 0) / per_second

    def retract_excess(self, srv: ServerSim, rank: RankSim) -> None:
        """The next decode step does not fit the pool's tokens: retract as SGLang's retract_decode does (fewest
        output tokens first) and set the new-token ratio from the requests kept."""
        decoding = list(rank.decoding)
        free = self.free(srv, rank)
        if len(decoding) < 2 or free > len(decoding):
            return
        self.decay(rank)
        writing = [self.writing(r) for r in decoding]
        out = retraction(free, writing, [r.shape.prompt_tokens for r in decoding])
        self._retract(srv, rank, [decoding[i] for i in out])
        gone = set(out)
        rank.new_token_ratio = ratio_after_retraction([w for i, w in enumerate(writing) if i not in gone])

    def _retract(self, srv: ServerSim, rank: RankSim, victims: list[Req]) -> None:
        """Back to the front of the waiting queue, counted as SGLang counts them (fewest output tokens first:
        the last one retracted is the first to resume)."""
        scheduler = self.dep.scheduler
        for req in victims:
            self.release(req)
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
        """What the rank's requests hold at `now`; tokens a full KV cache lost count as used, as SGLang counts
        every token not free (num_used_tokens = total - available - evictable)."""
        seq = self._seq(rank)
        total = rank.max_total_tokens
        used = min(seq + self._outside(rank) + eff.pool_lost(total), total)
        evictable = max(min(total - used, total * 0.1 * (1 if self.dep.model.prefix_hit else 0.2)), 0.0)
        return KVUsage(seq, used / total, used, evictable, total)
