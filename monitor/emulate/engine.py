"""Discrete-event emulation of one deployment's SGLang servers on an injected clock.

`EmulatedDeployment.advance(seconds)` runs every event up to `now + seconds`; the same seed and the same
total time give the same numbers however the time is cut. Requests arrive by a Poisson process and go
round-robin to servers and DP ranks.

Unified server: wait for a running slot (max_running_requests per DP rank), prefill, decode.
PD: the decode rank preallocates a slot (prefill waits in its bootstrap queue until then), the prefill
rank prefills (its own slots), KV moves (prefill inflight / decode transfer queue), decode runs.
Finished requests are observed into the tokenizer families exactly as SGLang's TokenizerManager does.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.config import Config, Deployment
from monitor.conventions import DEFAULT_BUCKETS, SLI_FAMILIES
from monitor.emulate.catalog import BY_NAME, STAGE_BUCKETS, TOKEN_BUCKETS
from monitor.emulate.incidents import Effects, Incident, effects
from monitor.emulate.model import LatencyModel, build_model, decode_slots, prefill_slots
from monitor.emulate.request_log import RequestLog, record
from monitor.emulate.state import MetricStore
from monitor.emulate.topology import DeploymentLayout, ServerSpec, plan

HTTP_LABELS = {"endpoint": "/v1/chat/completions", "method": "POST"}
ITL_SEGMENTS = 8
REQUEST_PROCESS_SECONDS = 0.002
BOOTSTRAP_SECONDS = 0.008
QUEUE_EDGES = BY_NAME["sglang:queue_time_seconds"].buckets


@dataclass(eq=False)
class Req:
    rid: str
    shape: Any
    created: float
    server: ServerSim  # the server whose tokenizer answers the client (unified or decode)
    rank: RankSim
    p_server: ServerSim | None = None
    p_rank: RankSim | None = None
    t_wait: float = 0.0
    t_prealloc: float = 0.0
    t_first: float = 0.0
    t_end: float = 0.0
    queue_time: float = 0.0
    tpot_rate: float = 0.0  # seconds per token while decoding (for live gauges)
    gaps: list[tuple[int, float]] = field(default_factory=list)  # (tokens, seconds per token)
    produced: int = 0
    accept: float = 0.0
    alive: bool = True


class RankSim:
    """One DP rank's scheduler: slots, queues, its own counters and histograms."""

    def __init__(self, index: int, labels: list[dict[str, str]], capacity: int, max_tokens: int) -> None:
        self.index = index
        self.labels = labels  # one label set per PP stage; all stages report the same values
        self.capacity = capacity
        self.max_total_tokens = max_tokens
        self.waiting: deque[Req] = deque()
        self.running: dict[Req, None] = {}
        self.bootstrap: dict[Req, None] = {}
        self.inflight: dict[Req, None] = {}
        self.prealloc: deque[Req] = deque()
        self.transfer: dict[Req, None] = {}
        self.store = MetricStore()
        self.last_hit = 0.0
        self.last_accept = 0.0
        self.retracted = 0


class ServerSim:
    def __init__(self, spec: ServerSpec, model: LatencyModel, pid: int, now: float) -> None:
        self.spec = spec
        self.model = model
        self.log: RequestLog | None = None
        self.reset(pid, now)

    def reset(self, pid: int, now: float) -> None:
        """A fresh process: new pid, new multiprocess dir, so every counter starts again at zero."""
        self.pid = pid
        self.started_at = now
        self.store = MetricStore()
        slots = prefill_slots(self.spec) if self.spec.role == "prefill" else decode_slots(self.spec)
        tokens = int((self.model.input_tokens + self.model.output_tokens) * 1.25)
        self.ranks = [
            RankSim(i, self.spec.rank_labels(i), cap, max(cap * tokens, 4096)) for i, cap in enumerate(slots)
        ]
        for rank in self.ranks:
            for labels in rank.labels:
                _seed_scheduler(rank.store, self.spec, labels)
        self._rr = 0

    def next_rank(self) -> RankSim:
        rank = self.ranks[self._rr % len(self.ranks)]
        self._rr += 1
        return rank

    def base_labels(self) -> dict[str, str]:
        return {"engine_type": self.spec.engine_type, "model_name": self.spec.model_name}


def _seed_scheduler(store: MetricStore, spec: ServerSpec, labels: dict[str, str]) -> None:
    """Scheduler counters that SGLang creates (at zero) when the scheduler starts."""
    base = {"engine_type": spec.engine_type, "model_name": spec.model_name, **labels}
    for fam in BY_NAME.values():
        if fam.type != "counter" or fam.kind != "sched" or spec.role not in fam.roles:
            continue
        for extra in fam.extra or ((),):
            store.touch(fam.name, {**base, **dict(extra)})


class EmulatedDeployment:
    def __init__(self, deployment: Deployment, layout: DeploymentLayout | None = None, *, seed: int = 0,
                 rate: float | None = None, wall_start: float = 0.0,
                 request_log_dir: str | Path | None = None) -> None:
        self.deployment = deployment
        self.layout = layout or plan(Config(deployments=[deployment]), 0).deployments[0]
        self.rng = random.Random(seed ^ zlib.crc32(deployment.name.encode()))
        self.model = build_model(deployment, list(self.layout.servers), rate)
        self.buckets = {sli: tuple(deployment.buckets.get(sli) or DEFAULT_BUCKETS[sli]) for sli in SLI_FAMILIES}
        self.now = 0.0
        self.wall_start = wall_start
        self.incidents: list[Incident] = []
        self._pids = itertools.count(1000 + (zlib.crc32(deployment.name.encode()) % 20000) * 2)
        self.servers = [ServerSim(s, self.model, next(self._pids), 0.0) for s in self.layout.servers]
        if request_log_dir is not None:
            for srv in self.servers:
                if srv.spec.role != "prefill":
                    srv.log = RequestLog(Path(request_log_dir) / srv.spec.name)
        self._events: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = itertools.count()
        self._rids = itertools.count(1)
        self._live: dict[str, Req] = {}
        self._rr: dict[str, int] = {}
        self.finished = 0
        self._schedule(self.rng.expovariate(self.model.arrival_rate), self._arrival, None)

    # --- clock ---------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        end = self.now + max(seconds, 0.0)
        while self._events and self._events[0][0] <= end:
            t, _, fn, arg = heapq.heappop(self._events)
            self.now = t
            fn(arg)
        self.now = end

    def _schedule(self, t: float, fn: Callable[[Any], None], arg: Any) -> None:
        heapq.heappush(self._events, (t, next(self._seq), fn, arg))

    # --- incidents -----------------------------------------------------------------------------
    def add_incident(self, inc: Incident) -> None:
        self.incidents.append(inc)
        if inc.kind == "restart":
            self._schedule(max(inc.start, self.now), self._restart, inc)

    def clear_incidents(self) -> None:
        self.incidents.clear()

    def effects(self, role: str) -> Effects:
        return effects(self.incidents, role, self.now)

    def _restarting(self, srv: ServerSim) -> bool:
        return any(i.kind == "restart" and i.duration and i.active(self.now) and i.applies_to(srv.spec.role)
                   for i in self.incidents)

    def _restart(self, inc: Incident) -> None:
        for srv in self.servers:
            if inc.applies_to(srv.spec.role):
                self._kill_requests(srv)
                srv.reset(next(self._pids), self.now)

    def _kill_requests(self, srv: ServerSim) -> None:
        for req in [r for r in self._live.values() if srv in (r.server, r.p_server)]:
            req.alive = False
            self._live.pop(req.rid, None)
            if req.server is not srv:  # the decode side survives: its client sees an abort
                rank = req.rank
                rank.running.pop(req, None)
                rank.transfer.pop(req, None)
                if req in rank.prealloc:
                    rank.prealloc.remove(req)
                self._count_abort(req.server, req)
                self._pd_prealloc(rank)
            if req.p_server is not None and req.p_server is not srv and req.p_rank is not None:
                prank = req.p_rank
                for coll in (prank.bootstrap, prank.running, prank.inflight):
                    coll.pop(req, None)
                if req in prank.waiting:
                    prank.waiting.remove(req)
                self._pd_admit_prefill(prank)

    # --- arrivals ------------------------------------------------------------------------------
    def _pick(self, role: str) -> ServerSim | None:
        pool = [s for s in self.servers if s.spec.role == role and not self._restarting(s)]
        if not pool:
            return None
        i = self._rr.get(role, 0)
        self._rr[role] = i + 1
        return pool[i % len(pool)]

    def _arrival(self, _: Any) -> None:
        rate = self.model.arrival_rate * self.effects("server").arrivals
        self._schedule(self.now + self.rng.expovariate(rate), self._arrival, None)
        unified = any(s.spec.role == "server" for s in self.servers)
        answer = self._pick("server" if unified else "decode")
        prefill = None if unified else self._pick("prefill")
        if answer is None or (not unified and prefill is None):
            return  # every server that could take it is restarting: the client gets an error
        radix = not (answer.spec.disable_radix_cache or (prefill and prefill.spec.disable_radix_cache))
        shape = self.model.sample_shape(self.rng, radix_cache=radix)
        rid = f"{self.deployment.name}-{next(self._rids):08x}"
        req = Req(rid, shape, self.now, answer, answer.next_rank())
        self._live[rid] = req
        answer.store.inc("sglang:http_requests", HTTP_LABELS)
        if unified:
            req.t_wait = self.now + REQUEST_PROCESS_SECONDS
            self._schedule(req.t_wait, self._enqueue, req)
            return
        assert prefill is not None
        req.p_server, req.p_rank = prefill, prefill.next_rank()
        prefill.store.inc("sglang:http_requests", HTTP_LABELS)
        req.p_rank.bootstrap[req] = None
        req.rank.prealloc.append(req)
        self._pd_prealloc(req.rank)

    # --- unified flow --------------------------------------------------------------------------
    def _capacity(self, srv: ServerSim, rank: RankSim) -> int:
        # Full HBM leaves fewer KV slots: fewer requests fit, the rest wait.
        return max(1, int(rank.capacity * 0.7)) if self.effects(srv.spec.role).hbm_full else rank.capacity

    def _enqueue(self, req: Req) -> None:
        if not req.alive:
            return
        req.rank.waiting.append(req)
        self._admit(req.server, req.rank)

    def _admit(self, srv: ServerSim, rank: RankSim) -> None:
        cap = self._capacity(srv, rank)
        while rank.waiting and len(rank.running) < cap:
            req = rank.waiting.popleft()
            rank.running[req] = None
            req.queue_time = self.now - req.t_wait
            prefill = self._prefill(srv, rank, req)
            self._start_decode(req, self.now + prefill)

    def _prefill(self, srv: ServerSim, rank: RankSim, req: Req) -> float:
        """Account one prefill on `rank` and return how long it takes."""
        shape = req.shape
        seconds = self.model.prefill_seconds(self.rng, shape.uncached_tokens, self.effects(srv.spec.role).ttft)
        rank.last_hit = shape.cached_tokens / shape.prompt_tokens
        for labels in rank.labels:
            lab = {**srv.base_labels(), **labels}
            rank.store.observe("sglang:queue_time_seconds", lab, QUEUE_EDGES, req.queue_time)
            rank.store.observe("sglang:per_stage_req_latency_seconds", {**lab, "stage": "prefill_waiting"},
                               STAGE_BUCKETS, req.queue_time)
            rank.store.observe("sglang:per_stage_req_latency_seconds", {**lab, "stage": "prefill_forward"},
                               STAGE_BUCKETS, seconds)
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "prefill_compute"}, shape.uncached_tokens)
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "prefill_cache"}, shape.cached_tokens)
            rank.store.inc("sglang:prefill_effective_tokens", {**lab, "mode": "input"}, shape.uncached_tokens)
            rank.store.inc("sglang:prefill_effective_tokens", {**lab, "mode": "device_hit"}, shape.cached_tokens)
        return seconds

    def _start_decode(self, req: Req, t_first: float) -> None:
        srv, rank, shape = req.server, req.rank, req.shape
        eff = self.effects(srv.spec.role)
        cap = rank.capacity
        load = len(rank.running) / cap
        pressure = (len(rank.waiting) + len(rank.prealloc)) / cap
        req.accept = self.model.accept_sample(self.rng)
        if req.accept:
            rank.last_accept = req.accept
        tpot = self.model.tpot_seconds(self.rng, load, pressure, eff.tpot, req.accept)
        produced = shape.completion_tokens
        if shape.finish_reason == "abort":
            produced = max(1, int(produced * shape.abort_fraction))
        req.produced = produced
        req.gaps = _segments(self.rng, produced - 1, tpot)
        decode = sum(n * g for n, g in req.gaps)
        req.tpot_rate = decode / (produced - 1) if produced > 1 else tpot
        req.t_first = t_first
        req.t_end = t_first + decode
        self._schedule(t_first, self._first_token, req)
        self._schedule(req.t_end, self._finish, req)

    def _first_token(self, req: Req) -> None:
        if not req.alive:
            return
        srv = req.server
        labels = {**srv.base_labels(), "is_streaming": _flag(req.shape.streaming)}
        srv.store.observe(SLI_FAMILIES["ttft"], labels, self.buckets["ttft"], req.t_first - req.created)

    def _finish(self, req: Req) -> None:
        if not req.alive:
            return
        req.alive = False
        self._live.pop(req.rid, None)
        srv, rank = req.server, req.rank
        rank.running.pop(req, None)
        self._observe_finished(srv, req)
        self._scheduler_decode_counters(srv, rank, req)
        if srv.spec.role == "decode":
            self._pd_prealloc(rank)
        else:
            self._admit(srv, rank)

    # --- PD flow -------------------------------------------------------------------------------
    def _pd_prealloc(self, rank: RankSim) -> None:
        srv = next((s for s in self.servers if rank in s.ranks), None)
        if srv is None:
            return
        cap = self._capacity(srv, rank)
        while rank.prealloc and len(rank.running) + len(rank.transfer) < cap:
            req = rank.prealloc.popleft()
            rank.transfer[req] = None
            req.t_prealloc = self.now
            self._schedule(self.now + BOOTSTRAP_SECONDS * self.rng.uniform(0.5, 1.5), self._pd_bootstrapped, req)

    def _pd_bootstrapped(self, req: Req) -> None:
        if not req.alive or req.p_rank is None or req.p_server is None:
            return
        prank = req.p_rank
        prank.bootstrap.pop(req, None)
        prank.waiting.append(req)
        req.t_wait = self.now
        for labels in prank.labels:
            lab = {**req.p_server.base_labels(), **labels}
            edges = BY_NAME["sglang:kv_transfer_bootstrap_ms"].buckets
            prank.store.observe("sglang:kv_transfer_bootstrap_ms", lab, edges, (self.now - req.created) * 1000)
            edges = BY_NAME["sglang:kv_transfer_alloc_ms"].buckets
            prank.store.observe("sglang:kv_transfer_alloc_ms", lab, edges, (req.t_prealloc - req.created) * 1000)
        self._pd_admit_prefill(prank)

    def _pd_admit_prefill(self, prank: RankSim) -> None:
        psrv = next((s for s in self.servers if prank in s.ranks), None)
        if psrv is None:
            return
        while prank.waiting and len(prank.running) < prank.capacity:
            req = prank.waiting.popleft()
            prank.running[req] = None
            req.queue_time = self.now - req.t_wait
            self._schedule(self.now + self._prefill(psrv, prank, req), self._pd_prefilled, req)

    def _pd_prefilled(self, req: Req) -> None:
        if not req.alive or req.p_rank is None or req.p_server is None:
            return
        prank, psrv = req.p_rank, req.p_server
        prank.running.pop(req, None)
        prank.inflight[req] = None
        seconds, mb = self.model.kv_transfer(self.rng, req.shape.prompt_tokens)
        for labels in prank.labels:
            lab = {**psrv.base_labels(), **labels}
            for name, value in (("sglang:kv_transfer_latency_ms", seconds * 1000),
                                ("sglang:kv_transfer_speed_gb_s", mb / 1024 / seconds),
                                ("sglang:kv_transfer_total_mb", mb)):
                prank.store.observe(name, lab, BY_NAME[name].buckets, value)
        self._schedule(self.now + seconds, self._pd_transferred, req)
        self._pd_admit_prefill(prank)

    def _pd_transferred(self, req: Req) -> None:
        if not req.alive or req.p_rank is None or req.p_server is None:
            return
        fail = self.effects("prefill").transfer_failure
        if fail and self.rng.random() < fail:
            self._pd_transfer_failed(req)
            return
        req.p_rank.inflight.pop(req, None)
        self._observe_prefill_side(req.p_server, req)
        rank = req.rank
        rank.transfer.pop(req, None)
        rank.running[req] = None
        for labels in rank.labels:
            lab = {**req.server.base_labels(), **labels}
            rank.store.observe("sglang:queue_time_seconds", lab, QUEUE_EDGES, self.now - req.t_prealloc)
        self._start_decode(req, self.now + 0.5 * self.model.tpot_median)

    def _pd_transfer_failed(self, req: Req) -> None:
        """Both sides count the failed transfer (SGLang's prefill.py and decode.py); the decode server aborts
        the request, which its client (and the request log) sees as an error before the first token."""
        assert req.p_rank is not None and req.p_server is not None
        req.alive = False
        self._live.pop(req.rid, None)
        req.p_rank.inflight.pop(req, None)
        rank = req.rank
        rank.transfer.pop(req, None)
        for srv, r in ((req.p_server, req.p_rank), (req.server, rank)):
            for labels in r.labels:
                r.store.inc("sglang:num_transfer_failed_reqs", {**srv.base_labels(), **labels})
        self._count_abort(req.server, req, "500")
        self._log_request(req.server, req, finish_reason="abort", completion_tokens=0, first_token_latency=None,
                          e2e_latency=self.now - req.created, tpot=None, abort=("KV transfer failed", 500))
        self._pd_prealloc(rank)
        self._pd_admit_prefill(req.p_rank)

    # --- observation ---------------------------------------------------------------------------
    def _observe_finished(self, srv: ServerSim, req: Req) -> None:
        """TokenizerManager.collect_metrics at finish (TTFT was observed at the first token)."""
        shape, store = req.shape, srv.store
        base = srv.base_labels()
        ls = {**base, "is_streaming": _flag(shape.streaming)}
        e2e = req.t_end - req.created
        store.inc("sglang:num_requests", ls)
        store.inc("sglang:prompt_tokens", ls, shape.prompt_tokens)
        store.inc("sglang:generation_tokens", ls, req.produced)
        if shape.cached_tokens:
            store.inc("sglang:cached_tokens", {**base, "cache_source": "device"}, shape.cached_tokens)
        if shape.structured:
            store.inc("sglang:num_so_requests", base)
        if req.accept:
            store.inc("sglang:spec_verify_calls", base, math.ceil(req.produced / req.accept))
        store.observe("sglang:prompt_tokens_histogram", base, TOKEN_BUCKETS, shape.prompt_tokens)
        store.observe("sglang:uncached_prompt_tokens_histogram", base, TOKEN_BUCKETS, shape.uncached_tokens)
        store.observe("sglang:generation_tokens_histogram", base, TOKEN_BUCKETS, req.produced)
        store.observe(SLI_FAMILIES["e2e"], ls, self.buckets["e2e"], e2e)
        for n, gap in req.gaps:  # token-weighted: bucket of interval/n gets n, the sum gets interval
            store.observe(SLI_FAMILIES["itl"], base, self.buckets["itl"], gap, weight=n, sum_add=gap * n)
        tpot = None
        if shape.finish_reason in ("stop", "length") and req.produced > 1:
            tpot = (req.t_end - req.t_first) / (req.produced - 1)
            store.observe(SLI_FAMILIES["tpot"], ls, self.buckets["tpot"], tpot)
        if shape.finish_reason == "abort":
            store.inc("sglang:num_aborted_requests", base)
        status = "499" if shape.finish_reason == "abort" else "200"
        store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": status})
        self.finished += 1
        self._log_request(srv, req, finish_reason=shape.finish_reason, completion_tokens=req.produced,
                          first_token_latency=req.t_first - req.created, e2e_latency=e2e, tpot=tpot)

    def _log_request(self, srv: ServerSim, req: Req, **outcome: Any) -> None:
        """One line of SGLang's request-metrics log on `srv`, when it writes one; `outcome`: how it ended."""
        if srv.log is None:
            return
        shape = req.shape
        srv.log.write(record(
            rid=req.rid, streaming=shape.streaming, max_new_tokens=shape.completion_tokens,
            prompt_tokens=shape.prompt_tokens, cached_tokens=shape.cached_tokens,
            received_wall=self.wall_start + req.created, queue_time=req.queue_time, **outcome))

    def _observe_prefill_side(self, psrv: ServerSim, req: Req) -> None:
        """A PD prefill server's tokenizer finishes the request after the KV left: no TTFT/TPOT/ITL."""
        shape, store = req.shape, psrv.store
        base = psrv.base_labels()
        ls = {**base, "is_streaming": _flag(shape.streaming)}
        store.inc("sglang:num_requests", ls)
        store.inc("sglang:prompt_tokens", ls, shape.prompt_tokens)
        store.inc("sglang:generation_tokens", ls, 1)
        if shape.cached_tokens:
            store.inc("sglang:cached_tokens", {**base, "cache_source": "device"}, shape.cached_tokens)
        store.observe("sglang:prompt_tokens_histogram", base, TOKEN_BUCKETS, shape.prompt_tokens)
        store.observe("sglang:uncached_prompt_tokens_histogram", base, TOKEN_BUCKETS, shape.uncached_tokens)
        store.observe("sglang:generation_tokens_histogram", base, TOKEN_BUCKETS, 1)
        store.observe(SLI_FAMILIES["e2e"], ls, self.buckets["e2e"], self.now - req.created)
        store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": "200"})

    def _count_abort(self, srv: ServerSim, req: Req, status: str = "499") -> None:
        base = srv.base_labels()
        srv.store.inc("sglang:num_aborted_requests", base)
        srv.store.inc("sglang:num_requests", {**base, "is_streaming": _flag(req.shape.streaming)})
        srv.store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": status})

    def _scheduler_decode_counters(self, srv: ServerSim, rank: RankSim, req: Req) -> None:
        steps = math.ceil(req.produced / req.accept) if req.accept else req.produced
        for labels in rank.labels:
            lab = {**srv.base_labels(), **labels}
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "decode"}, req.produced)
            rank.store.inc("sglang:cuda_graph_passes", {**lab, "mode": "decode_cuda_graph"}, steps)

    # --- live state ----------------------------------------------------------------------------
    def rank_gauges(self, srv: ServerSim, rank: RankSim) -> dict[str, float]:
        """Scheduler gauges of one rank right now (what its last log_stats would have written)."""
        now, role = self.now, srv.spec.role
        eff = self.effects(role)
        decoding = [r for r in rank.running if r.t_first <= now and r.tpot_rate > 0]
        done = {r: min(max((now - r.t_first) / r.tpot_rate, 0.0), r.produced) for r in decoding}
        seq = sum(r.shape.prompt_tokens + done[r] for r in decoding)
        used = seq + sum(r.shape.prompt_tokens for r in rank.running if r not in done)
        used += sum(r.shape.prompt_tokens for r in rank.transfer) + sum(r.shape.prompt_tokens for r in rank.inflight)
        total = rank.max_total_tokens
        usage = min(used / total, 1.0)
        if eff.hbm_full:
            usage = max(usage, 0.97)
            used = usage * total
        evictable = min(total - used, total * 0.1 * (1 if self.model.prefix_hit else 0.2))
        thr = sum(1.0 / r.tpot_rate for r in decoding) if role != "prefill" else 0.0
        accept = rank.last_accept if self.model.accept_length else 0.0
        drafts = self.model.draft_tokens
        cap = self._capacity(srv, rank)
        return {
            "sglang:num_running_reqs": float(len(rank.running)),
            "sglang:num_queue_reqs": float(len(rank.waiting)),
            "sglang:gen_throughput": thr,
            "sglang:cache_hit_rate": rank.last_hit if role != "decode" else 0.0,
            "sglang:decode_sum_seq_lens": float(int(seq)),
            "sglang:token_usage": usage,
            "sglang:full_token_usage": usage,
            "sglang:num_used_tokens": float(int(used)),
            "sglang:kv_used_tokens": float(int(used)),
            "sglang:kv_available_tokens": float(int(total - used - evictable)),
            "sglang:kv_evictable_tokens": float(int(evictable)),
            "sglang:max_total_num_tokens": float(total),
            "sglang:num_pages": float(total),
            "sglang:spec_accept_length": accept,
            "sglang:spec_accept_rate": (accept - 1) / max(drafts - 1, 1) if accept else 0.0,
            "sglang:spec_num_steps": float(max(drafts - 1, 0)),
            "sglang:spec_num_draft_tokens": float(drafts),
            "sglang:num_prefill_bootstrap_queue_reqs": float(len(rank.bootstrap)),
            "sglang:num_prefill_inflight_queue_reqs": float(len(rank.inflight)),
            "sglang:num_decode_prealloc_queue_reqs": float(len(rank.prealloc)),
            "sglang:num_decode_transfer_queue_reqs": float(len(rank.transfer)),
            "sglang:utilization": min(len(rank.running) / cap, 1.0),
            "sglang:num_retracted_reqs": 2.0 if eff.hbm_full and rank.running else 0.0,
        }

    def load(self) -> float:
        """Busy share of the decode-capable slots (drives accelerator utilisation)."""
        ranks = [r for s in self.servers if s.spec.role != "prefill" for r in s.ranks]
        return sum(len(r.running) for r in ranks) / max(sum(r.capacity for r in ranks), 1)

    def state(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment.name,
            "now": self.now,
            "arrival_rate": self.model.arrival_rate,
            "tpot_median_seconds": self.model.tpot_median,
            "finished_requests": self.finished,
            "incidents": [i.to_dict() | {"active": i.active(self.now)} for i in self.incidents],
            "servers": [
                {"name": s.spec.name, "role": s.spec.role, "port": s.spec.port, "pid": s.pid,
                 "running": sum(len(r.running) for r in s.ranks), "queued": sum(len(r.waiting) for r in s.ranks),
                 "down": self.effects(s.spec.role).down}
                for s in self.servers
            ],
        }

    def close(self) -> None:
        for srv in self.servers:
            if srv.log is not None:
                srv.log.close()


def _flag(v: bool) -> str:
    return "true" if v else "false"


def _segments(rng: random.Random, tokens: int, tpot: float) -> list[tuple[int, float]]:
    """Split `tokens` decode steps into up to ITL_SEGMENTS runs with slightly different gaps."""
    if tokens <= 0:
        return []
    k = min(ITL_SEGMENTS, tokens)
    sizes = [tokens // k + (1 if i < tokens % k else 0) for i in range(k)]
    return [(n, tpot * rng.lognormvariate(0.0, 0.05)) for n in sizes]
