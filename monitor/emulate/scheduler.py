"""The scheduler of each DP rank: admission, the running batch and its decode step loop.

Unified server: a request waits for a running slot (`KVCache.capacity`), prefills (time from the
uncached prompt; a real prompt's cached part comes from the rank's prefix cache), then decodes. PD: the
decode rank's slots are admitted by `disaggregation.PDFlow`, which hands the request here once its KV
arrived (`start_decode`).

Decode is a rate per request (seconds per token) that its rank recomputes (`rerate`) from `now` whenever
the batch, the prefills beside it or an incident changes: `model.step_factor` x the request's own base
TPOT x what the incidents do (`Effects.decode_rate`). A change only marks the rank (`touch`); the
deployment re-rates every marked rank after the event (`flush`), and each rank keeps one pending event
for its next finish. Tokens are produced along that piecewise-linear curve; each constant-rate run is
closed (`close_segment`) with one ITL observation when the rate changes.

`Scheduler` sees the deployment as `SchedulerHost`: what it reads and writes of it, the other parts
included (the KV cache, the PD flow and the observer, which name the scheduler only through protocols
of their own, so that none of them imports this module or engine.py back).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from monitor.emulate.model import step_factor
from monitor.emulate.sim import EPS

# Decode steps between two looks at a waiting queue that the pool's tokens hold back (SGLang looks every step;
# the ratio falls by 0.1 % of its range a step, so ten steps move the reservation little).
RETRY_STEPS = 10

if TYPE_CHECKING:
    from monitor.emulate.disaggregation import PDFlow
    from monitor.emulate.incidents import Effects
    from monitor.emulate.model import LatencyModel
    from monitor.emulate.observe import Observer
    from monitor.emulate.prefix_cache import KVCache
    from monitor.emulate.sim import RankSim, Req, ServerSim


class SchedulerHost(Protocol):
    """What `Scheduler` reads and writes of its deployment (engine.EmulatedDeployment)."""

    now: float
    rng: random.Random
    model: LatencyModel
    server_of: dict[int, ServerSim]  # id(rank) -> its server, for the ranks alive now
    live: dict[str, Req]
    finished: int  # counted here, at each finish
    real_finished: int
    kv: KVCache
    pd: PDFlow
    observer: Observer

    def effects(self, role: str) -> Effects: ...

    def schedule(self, t: float, fn: Callable[[Any], None], arg: Any) -> None: ...


class Scheduler:
    """Admission and the decode loop of every rank of one deployment (PD decode ranks decode here too)."""

    def __init__(self, dep: SchedulerHost) -> None:
        self.dep = dep
        self._dirty: dict[int, RankSim] = {}

    # --- re-rating -----------------------------------------------------------------------------
    def touch(self, rank: RankSim) -> None:
        """The rank's batch, prefills or effects changed: recompute its decode rates after this event."""
        self._dirty[id(rank)] = rank

    def flush(self) -> None:
        """Re-rate every rank touched since the last flush."""
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        for rank in dirty.values():
            if not rank.dead:
                self.rerate(rank)

    def rerate(self, rank: RankSim) -> None:
        """New decode rates for every request in the rank's batch from now; one event for the next finish."""
        dep = self.dep
        srv = dep.server_of.get(id(rank))
        if srv is None:
            return
        now = dep.now
        unified = srv.spec.role == "server"  # a PD decode server runs no prefill beside its decode
        eff = dep.effects(srv.spec.role)
        dep.kv.decay(rank)  # the steps run at the old step time
        step = eff.step_time(step_factor(len(rank.decoding), rank.reference, rank.prefilling() if unified else 0,
                                         rank.capacity))
        rank.step_seconds = dep.model.tpot_median * step
        t_next = math.inf
        for req in rank.decoding:
            self.close_segment(req, now)
            old = req.rate
            req.rate = eff.decode_rate(req.base_tpot, step, req.accept)
            req.t_end = now + max(req.produced - 1 - req.mark_done, 0.0) * req.rate
            t_next = min(t_next, req.t_end)
            if req.listeners and (old <= 0.0 or req.rate < old):
                req.notify()  # faster: a waiting stream would otherwise send its next token late
        rank.record_throughput(now)
        rank.version += 1
        if t_next < math.inf:
            dep.schedule(t_next, self.rank_finish, (rank, rank.version))
        if unified and len(rank.decoding) > 1 and (t_full := dep.kv.overflow_at(srv, rank, eff)) < t_next:
            dep.schedule(t_full, self.pool_full, (rank, rank.version))

    def pool_full(self, arg: tuple[RankSim, int]) -> None:
        """The decoding requests filled the pool (unless re-rated since): retract what the next step needs."""
        rank, version = arg
        srv = self.dep.server_of.get(id(rank))
        if version != rank.version or rank.dead or srv is None:
            return
        before = len(rank.decoding)
        self.dep.kv.retract_excess(srv, rank)  # re-rates the rank when it retracted
        if len(rank.decoding) == before:  # whole tokens lag the rates' fractions: look again a step later
            t = max(self.dep.kv.overflow_at(srv, rank), self.dep.now + max(rank.step_seconds, 1e-3))
            self.dep.schedule(t, self.pool_full, arg)

    def close_segment(self, req: Req, now: float) -> None:
        """End the current constant-rate run at `now`: observe ITL up to its last whole token."""
        if req.rate <= 0.0:
            req.mark_t = now
            return
        done = min(req.mark_done + (now - req.mark_t) / req.rate, float(req.produced - 1))
        k = int(done + EPS)
        if k > req.itl_k:
            t_k = req.mark_t + (k - req.mark_done) * req.rate
            if req.server is not None and req.log_metrics:
                self.dep.observer.itl(req.server, t_k - req.itl_t, k - req.itl_k)
            req.itl_t, req.itl_k = t_k, k
        if req.rank is not None:
            req.rank.tokens_closed += done - req.mark_done
        req.mark_done, req.mark_t = done, now

    # --- admission -----------------------------------------------------------------------------
    def enqueue(self, req: Req) -> None:
        if not req.alive or req.server is None or req.rank is None:
            return
        req.rank.waiting.append(req)
        self.admit(req.server, req.rank)

    def admit_any(self, srv: ServerSim, rank: RankSim) -> None:
        """Let in what fits now, whatever the server's role."""
        if srv.spec.role == "server":
            self.admit(srv, rank)
        elif srv.spec.role == "decode":
            self.dep.pd.prealloc(rank)
        else:
            self.dep.pd.admit_prefill(rank)

    def admit(self, srv: ServerSim, rank: RankSim) -> None:
        """A unified rank takes waiting requests while it has slots: prefill, then decode."""
        dep = self.dep
        eff = dep.effects(srv.spec.role)
        cap = dep.kv.capacity(srv, rank)
        while rank.waiting and len(rank.running) < cap:
            if not dep.kv.admits(srv, rank, rank.waiting[0], eff):
                self.retry_later(rank)  # the ratio falls with every decode step: the reservation shrinks
                break
            req = rank.waiting.popleft()
            rank.running[req] = None
            dep.kv.promise(rank, req)
            if req.retracted:  # its KV is gone: prefill the prompt and its output so far again, then go on
                tokens = req.shape.prompt_tokens + int(req.mark_done) + 1
                seconds = dep.model.prefill_seconds(dep.rng, tokens, eff.ttft)
                dep.schedule(dep.now + seconds, self.resume, req)
                self.touch(rank)
                continue
            req.queue_time = dep.now - req.t_wait
            prefill = self.prefill(srv, rank, req)
            self.start_decode(req, dep.now + prefill)
            self.touch(rank)

    def retry_later(self, rank: RankSim) -> None:
        """Look at the waiting queue again after RETRY_STEPS decode steps (one pending look per rank)."""
        if rank.retry_pending or not rank.decoding:
            return  # nothing decodes: a prefill's first token or a finish admits next
        rank.retry_pending = True
        self.dep.schedule(self.dep.now + RETRY_STEPS * max(rank.step_seconds, 1e-3), self._retry, rank)

    def _retry(self, rank: RankSim) -> None:
        rank.retry_pending = False
        srv = self.dep.server_of.get(id(rank))
        if srv is not None and not rank.dead:
            self.admit(srv, rank)

    def resume(self, req: Req) -> None:
        """A retracted request is prefilled again: it decodes on from where it stopped."""
        rank = req.rank
        if not req.alive or rank is None or rank.dead or req not in rank.running:
            return
        req.retracted = False
        rank.retracted.pop(req, None)
        req.mark_t = self.dep.now
        rank.decoding[req] = None
        self.touch(rank)

    def prefill(self, srv: ServerSim, rank: RankSim, req: Req) -> float:
        """Account one prefill on `rank` (unified or PD prefill) and return how long it takes."""
        dep = self.dep
        shape = dep.kv.match_prefix(srv, rank, req)
        seconds = dep.model.prefill_seconds(dep.rng, shape.uncached_tokens, dep.effects(srv.spec.role).ttft)
        dep.observer.prefill(srv, rank, req, seconds)
        return seconds

    # --- decode --------------------------------------------------------------------------------
    def start_decode(self, req: Req, t_first: float) -> None:
        """Prefill is under way: the first token comes at `t_first`, then decode at the rank's rate."""
        dep = self.dep
        rank, shape = req.rank, req.shape
        assert rank is not None
        req.accept = dep.model.accept_sample(dep.rng)
        if req.accept:
            rank.last_accept = req.accept
        req.base_tpot = dep.model.base_tpot(dep.rng, req.accept)
        produced = shape.completion_tokens
        if shape.finish_reason == "abort":
            produced = max(1, int(produced * shape.abort_fraction))
        req.produced = produced
        req.t_first = t_first
        dep.schedule(t_first, self.first_token, req)

    def first_token(self, req: Req) -> None:
        if not req.alive or req.server is None or req.rank is None:
            return
        srv, rank = req.server, req.rank
        if req.log_metrics:
            self.dep.observer.first_token(srv, req)
        req.mark_t = req.itl_t = self.dep.now
        req.mark_done, req.itl_k = 0.0, 0
        if req.produced <= 1:
            req.t_end = self.dep.now
            self.finish(req)
            return
        rank.decoding[req] = None
        if rank.waiting:
            self.retry_later(rank)
        self.touch(rank)
        req.notify()

    def rank_finish(self, arg: tuple[RankSim, int]) -> None:
        """The rank's next finish is due (unless it was re-rated since)."""
        rank, version = arg
        if version != rank.version or rank.dead:
            return
        for req in [r for r in rank.decoding if r.t_end <= self.dep.now + EPS]:
            self.close_segment(req, req.t_end)
            self.finish(req)
        self.touch(rank)

    def finish(self, req: Req) -> None:
        dep = self.dep
        if not req.alive or req.server is None or req.rank is None:
            return
        req.alive = False
        dep.live.pop(req.rid, None)
        srv, rank = req.server, req.rank
        self.leave(rank, req)
        req.finished = True
        if req.log_metrics:
            dep.observer.finished(srv, req, end=req.t_end)
            dep.observer.decode_counters(srv, rank, req)
        dep.finished += 1
        dep.real_finished += int(req.real)
        if srv.spec.role == "decode":
            dep.pd.prealloc(rank)
        else:
            self.admit(srv, rank)
        req.notify()

    # --- leaving -------------------------------------------------------------------------------
    def leave(self, rank: RankSim, req: Req) -> None:
        """Take a request out of every place it can hold on its (decode or unified) rank."""
        if req in rank.decoding:
            del rank.decoding[req]
            self.touch(rank)
        if req in rank.running:
            del rank.running[req]
            self.touch(rank)
        self.dep.kv.release(req)
        rank.transfer.pop(req, None)
        rank.retracted.pop(req, None)
        if req in rank.prealloc:
            rank.prealloc.remove(req)

    def leave_prefill(self, prank: RankSim, req: Req) -> None:
        """Take a request out of every queue of its PD prefill rank, and let the next one in."""
        for coll in (prank.bootstrap, prank.running, prank.inflight):
            coll.pop(req, None)
        if req in prank.waiting:
            prank.waiting.remove(req)
        self.dep.pd.admit_prefill(prank)
