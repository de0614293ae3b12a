"""Discrete-event emulation of one deployment's SGLang servers: one scheduler for every request.

`EmulatedDeployment.advance(seconds)` runs every event up to `now + seconds`; the same seed and the same
total time give the same numbers however the time is cut. Requests come from two sources and join the
same scheduler, the same queues and the same metrics:
  - synthetic: a Poisson process at the deployment's rate (0: none; a `queue_buildup` incident still adds
    other clients' load), shapes drawn from the recipe row, round-robin over servers;
  - real: `submit()` from the HTTP side (serving.py) for each /generate or OpenAI request that reached a
    server. In PD the gateway sends one half to a prefill and one to a decode server; they are paired by
    `bootstrap_room`.

Unified server: wait for a running slot (max_running_requests per DP rank), prefill (time from the
uncached prompt; a real prompt's cached part comes from the rank's prefix cache), decode.
PD: the decode rank preallocates a slot (prefill waits in its bootstrap queue until then), the prefill
rank prefills (its own slots), KV moves (prefill inflight / decode transfer queue), decode runs.

Decode is a rate per request (seconds per token) that its rank recomputes from `now` whenever the batch,
the prefills beside it or an incident changes (model.step_factor x the request's own base TPOT); tokens
are produced along that piecewise-linear curve, which is when the HTTP side streams them. Metrics are
observed as SGLang's TokenizerManager does: TTFT at the first token, ITL per constant-rate run of tokens
(SGLang's batched observe: the bucket of interval/n gets n, the sum the interval), TPOT per request as
(finish - first token) / (completion_tokens - 1), E2E and the counters at the finish, aborts counted.
Gauges are read off the same state: running = requests in decode, token usage = the KV they hold,
gen_throughput = tokens produced over the last few seconds.

Scheduler stages are observed where SGLang 0.5.23 observes them (observability/req_time_stats.py,
`per_stage_req_latency_seconds` stages with metrics_is_observed): unified and PD prefill `prefill_forward`;
PD prefill `prefill_bootstrap` (bootstrap queue -> waiting queue: the handshake, which waits for the decode
side's KV preallocation) and `prefill_transfer_kv_cache`; PD decode `decode_bootstrap` (prealloc queue ->
transfer queue), `decode_transferred` (transfer queue -> waiting queue) and `decode_waiting` (waiting ->
first forward, also its `queue_time_seconds`). `prefill_waiting` is not a metric there (queue_time is).
A full KV cache (`hbm_full`) leaves fewer slots; a unified rank retracts the decoding requests beyond them
(newest first, as `retract_decode` keeps the oldest): they go back to the front of the waiting queue,
re-prefill their prompt and output so far when admitted, and resume decoding without a new TTFT.
"""

from __future__ import annotations

import dataclasses
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
from monitor.conventions.slis import DEFAULT_BUCKETS, SLI_FAMILIES
from monitor.emulate.catalog import BY_NAME, STAGE_BUCKETS, TOKEN_BUCKETS
from monitor.emulate.incidents import Effects, Incident, effects
from monitor.emulate.model import (
    LatencyModel,
    RequestShape,
    build_model,
    decode_slots,
    nominal_rate,
    prefill_slots,
    recipe_concurrency,
    reference_batch,
    step_factor,
)
from monitor.emulate.prefix_cache import PrefixCache
from monitor.emulate.request_log import RequestLog, record
from monitor.emulate.state import MetricStore
from monitor.emulate.topology import DeploymentLayout, ServerSpec, plan
from monitor.emulate.wire import ClientRequest

HTTP_LABELS = {"endpoint": "/v1/chat/completions", "method": "POST"}  # synthetic requests' endpoint
REQUEST_PROCESS_SECONDS = 0.002  # tokenize and dispatch to the scheduler
BOOTSTRAP_SECONDS = 0.008
BOOTSTRAP_TIMEOUT = 300.0  # SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT
DISCONNECT_ABORT_SECONDS = 2.0  # create_abort_task: a gone client's request is aborted 2 s later
FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # bench_serving --fake-prefill: decode makes up the KV itself
THROUGHPUT_WINDOW = 5.0  # gen_throughput: tokens produced over about the last decode-log interval
QUEUE_EDGES = BY_NAME["sglang:queue_time_seconds"].buckets
EPS = 1e-9


@dataclass(eq=False)
class Req:
    rid: str
    shape: RequestShape
    created: float  # receipt by the answering server (unified or decode)
    server: ServerSim | None  # the server whose tokenizer answers the client; None until a PD decode half came
    rank: RankSim | None
    p_server: ServerSim | None = None
    p_rank: RankSim | None = None
    p_created: float = 0.0  # receipt by the PD prefill server
    client: ClientRequest | None = None  # a real request; None for synthetic load
    t_wait: float = 0.0
    t_prealloc: float = 0.0
    t_first: float = 0.0
    t_end: float = 0.0
    queue_time: float = 0.0
    base_tpot: float = 0.0  # this request's TPOT at the reference batch
    rate: float = 0.0  # seconds per token right now
    mark_t: float = 0.0  # the current constant-rate run started here ...
    mark_done: float = 0.0  # ... with this many tokens after the first already produced
    itl_t: float = 0.0  # time and count of the last token ITL was observed up to
    itl_k: int = 0
    produced: int = 0  # completion tokens when it ends
    accept: float = 0.0
    kv_seconds: float = 0.0  # PD: how long its KV cache takes to move, and how many MB
    kv_mb: float = 0.0
    retracted: bool = False  # pushed back to the waiting queue by KV pressure; resumes where it was
    alive: bool = True
    finished: bool = False  # the answering side has its final output
    prefill_done: bool = False  # PD: the prefill side has its final output
    prealloc_ready: bool = False  # PD: decode slot held, the prefill half not here yet
    killed: bool = False  # the process serving it died (restart/down): its connection drops
    abort_message: str = ""
    abort_status: int = 0
    listeners: list[Callable[[], None]] = field(default_factory=list)

    @property
    def real(self) -> bool:
        return self.client is not None

    @property
    def log_metrics(self) -> bool:
        return self.client is None or self.client.log_metrics

    def tokens(self, t: float) -> int:
        """Completion tokens produced by time `t` (the last one comes with the finish)."""
        if self.finished:
            return self.produced
        if not self.t_first or t < self.t_first - EPS:
            return 0
        if self.retracted:
            return min(1 + int(self.mark_done + EPS), self.produced - 1)
        if self.rate <= 0.0:
            return 1 if self.produced > 1 else 0
        n = 1 + int(self.mark_done + (t - self.mark_t) / self.rate + EPS)
        return min(n, self.produced - 1)

    def next_token_time(self, have: int) -> float | None:
        """When the token after `have` is produced at the current rate (None: not known yet)."""
        if not self.t_first:
            return None
        if have < 1:
            return self.t_first
        if self.rate <= 0.0:
            return None
        return self.mark_t + (have - self.mark_done) * self.rate

    def notify(self) -> None:
        for fn in self.listeners:
            fn()


class RankSim:
    """One DP rank's scheduler: slots, queues, prefix cache, its own counters and histograms."""

    def __init__(self, index: int, labels: list[dict[str, str]], capacity: int, max_tokens: int,
                 reference: float) -> None:
        self.index = index
        self.labels = labels  # one label set per PP stage; all stages report the same values
        self.capacity = capacity
        self.reference = reference  # decode batch at which the recipe measured TPOT
        self.max_total_tokens = max_tokens
        self.waiting: deque[Req] = deque()
        self.running: dict[Req, None] = {}  # admitted: prefilling or decoding (PD prefill: prefilling)
        self.decoding: dict[Req, None] = {}
        self.bootstrap: dict[Req, None] = {}
        self.inflight: dict[Req, None] = {}
        self.prealloc: deque[Req] = deque()
        self.transfer: dict[Req, None] = {}
        self.retracted: dict[Req, None] = {}  # retracted requests waiting to resume
        self.store = MetricStore()
        self.cache = PrefixCache(max_tokens)
        self.last_hit = 0.0
        self.last_accept = 0.0
        self.version = 0  # of its pending next-finish event
        self.dead = False  # replaced by a restart
        self.tokens_closed = 0.0  # decode tokens of runs already closed (for gen_throughput)
        self.history: deque[tuple[float, float]] = deque()  # (t, cumulative decode tokens)

    def prefilling(self) -> int:
        return len(self.running) - len(self.decoding)


class ServerSim:
    def __init__(self, spec: ServerSpec, model: LatencyModel, pid: int, now: float, reference: float) -> None:
        self.spec = spec
        self.model = model
        self.reference = reference
        self.log: RequestLog | None = None
        self.reset(pid, now)

    def reset(self, pid: int, now: float) -> None:
        """A fresh process: new pid, new multiprocess dir, so every counter starts again at zero."""
        self.pid = pid
        self.started_at = now
        self.store = MetricStore()
        for rank in getattr(self, "ranks", ()):
            rank.dead = True
        slots = prefill_slots(self.spec) if self.spec.role == "prefill" else decode_slots(self.spec)
        tokens = int((self.model.input_tokens + self.model.output_tokens) * 1.25)
        self.ranks = [
            RankSim(i, self.spec.rank_labels(i), cap, max(cap * tokens, 4096), min(self.reference, cap))
            for i, cap in enumerate(slots)
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


class SubmitError(ValueError):
    """A request this server cannot take the way it came (the HTTP side answers 400)."""


class EmulatedDeployment:
    def __init__(self, deployment: Deployment, layout: DeploymentLayout | None = None, *, seed: int = 0,
                 rate: float | None = None, wall_start: float = 0.0,
                 request_log_dir: str | Path | None = None) -> None:
        """`rate`: synthetic requests per second (None: the recipe's concurrency by Little's law; 0: none)."""
        self.deployment = deployment
        self.layout = layout or plan(Config(deployments=[deployment]), 0).deployments[0]
        self.rng = random.Random(seed ^ zlib.crc32(deployment.name.encode()))
        specs = list(self.layout.servers)
        self.model = build_model(deployment, specs, rate)
        self.nominal_rate = nominal_rate(self.model, specs, recipe_concurrency(deployment))
        self.buckets = {sli: tuple(deployment.buckets.get(sli) or DEFAULT_BUCKETS[sli]) for sli in SLI_FAMILIES}
        self.now = 0.0
        self.wall_start = wall_start
        self.incidents: list[Incident] = []
        self._pids = itertools.count(1000 + (zlib.crc32(deployment.name.encode()) % 20000) * 2)
        self.servers = [ServerSim(s, self.model, next(self._pids), 0.0,
                                  reference_batch(deployment, specs, s) if s.role != "prefill" else 1.0)
                        for s in self.layout.servers]
        self._server_of: dict[int, ServerSim] = {}
        self._index_ranks()
        if request_log_dir is not None:
            for srv in self.servers:
                if srv.spec.role != "prefill":
                    srv.log = RequestLog(Path(request_log_dir) / srv.spec.name)
        self._events: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = itertools.count()
        self._rids = itertools.count(1)
        self._live: dict[str, Req] = {}
        self._pairs: dict[int, Req] = {}  # PD: bootstrap_room -> request with one half here
        self._rr: dict[str, int] = {}
        self._dirty: dict[int, RankSim] = {}
        self._arrivals_pending = False
        self.finished = 0
        self.real_finished = 0
        self._kick_arrivals()

    def _index_ranks(self) -> None:
        self._server_of = {id(r): s for s in self.servers for r in s.ranks}

    # --- clock ---------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        self.advance_to(self.now + max(seconds, 0.0))

    def advance_to(self, end: float) -> None:
        while self._events and self._events[0][0] <= end:
            t, _, fn, arg = heapq.heappop(self._events)
            self.now = max(self.now, t)
            fn(arg)
            if self._dirty:
                self._flush()
        self.now = max(self.now, end)

    def next_event_time(self) -> float | None:
        return self._events[0][0] if self._events else None

    def _schedule(self, t: float, fn: Callable[[Any], None], arg: Any) -> None:
        heapq.heappush(self._events, (t, next(self._seq), fn, arg))

    def _touch(self, rank: RankSim) -> None:
        """The rank's batch, prefills or effects changed: recompute its decode rates after this event."""
        self._dirty[id(rank)] = rank

    def _flush(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for rank in dirty.values():
            if not rank.dead:
                self._rerate(rank)

    # --- incidents -----------------------------------------------------------------------------
    def add_incident(self, inc: Incident) -> None:
        self.incidents.append(inc)
        if inc.kind == "restart":
            self._schedule(max(inc.start, self.now), self._restart, inc)
        # Rates change when it starts and when it ends; arrivals may start (queue_buildup).
        for t in (inc.start, inc.end):
            if t is not None:
                self._schedule(max(t, self.now), self._effects_changed, None)

    def clear_incidents(self) -> None:
        self.incidents.clear()
        self._effects_changed(None)
        if self._dirty:
            self._flush()

    def effects(self, role: str) -> Effects:
        return effects(self.incidents, role, self.now)

    def _effects_changed(self, _: Any) -> None:
        for srv in self.servers:
            for rank in srv.ranks:
                self._touch(rank)
                if srv.spec.role == "server":
                    self._retract_excess(srv, rank)
                self._admit_any(srv, rank)
        self._kick_arrivals()

    def _retract_excess(self, srv: ServerSim, rank: RankSim) -> None:
        """KV room for fewer requests than are running: retract the newest decoding ones (SGLang's
        retract_decode), counted as SGLang counts them."""
        cap = self._capacity(srv, rank)
        victims = list(rank.decoding)[::-1][:max(len(rank.running) - cap, 0)]
        for req in victims:
            self._close_segment(req, self.now)
            del rank.decoding[req]
            del rank.running[req]
            req.rate = 0.0
            req.retracted = True
            rank.retracted[req] = None
            rank.waiting.appendleft(req)
            done = int(req.mark_done) + 1
            for labels in rank.labels:
                lab = {**srv.base_labels(), **labels}
                rank.store.inc("sglang:num_retracted_requests", lab)
                rank.store.inc("sglang:num_retracted_input_tokens", lab, req.shape.prompt_tokens)
                rank.store.inc("sglang:num_retracted_output_tokens", lab, done)
        if victims:
            self._touch(rank)

    def _restarting(self, srv: ServerSim) -> bool:
        return any(i.kind == "restart" and i.duration and i.active(self.now) and i.applies_to(srv.spec.role)
                   for i in self.incidents)

    def _restart(self, inc: Incident) -> None:
        for srv in self.servers:
            if inc.applies_to(srv.spec.role):
                self._kill_requests(srv)
                srv.reset(next(self._pids), self.now)
        self._index_ranks()

    def _kill_requests(self, srv: ServerSim) -> None:
        for req in [r for r in self._live.values() if srv in (r.server, r.p_server)]:
            req.alive = False
            req.killed = True
            self._live.pop(req.rid, None)
            self._forget_pair(req)
            if req.server is not None and req.server is not srv and req.rank is not None:
                # The decode side survives its prefill server's death: its client sees an abort.
                rank = req.rank
                self._leave(rank, req)
                self._count_abort(req.server, req)
                self._pd_prealloc(rank)
            if req.p_server is not None and req.p_server is not srv and req.p_rank is not None:
                self._leave_prefill(req.p_rank, req)
            req.notify()

    # --- arrivals ------------------------------------------------------------------------------
    def _arrival_rate(self) -> float:
        """Synthetic arrivals per second now; `queue_buildup` adds other clients even with synthetic off."""
        factor = self.effects("server").arrivals
        base = self.model.arrival_rate
        return base * factor if base > 0 else self.nominal_rate * max(factor - 1.0, 0.0)

    def _kick_arrivals(self) -> None:
        if not self._arrivals_pending and self._arrival_rate() > 0:
            self._arrivals_pending = True
            self._schedule(self.now + self.rng.expovariate(self._arrival_rate()), self._arrival, None)

    def _pick(self, role: str) -> ServerSim | None:
        pool = [s for s in self.servers if s.spec.role == role and not self._restarting(s)]
        if not pool:
            return None
        i = self._rr.get(role, 0)
        self._rr[role] = i + 1
        return pool[i % len(pool)]

    def _arrival(self, _: Any) -> None:
        self._arrivals_pending = False
        self._kick_arrivals()
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
        req.p_server, req.p_rank, req.p_created = prefill, prefill.next_rank(), self.now
        prefill.store.inc("sglang:http_requests", HTTP_LABELS)
        req.p_rank.bootstrap[req] = None
        assert req.rank is not None
        req.rank.prealloc.append(req)
        self._pd_prealloc(req.rank)

    # --- real requests -------------------------------------------------------------------------
    def submit(self, srv: ServerSim, client: ClientRequest) -> Req:
        """A request that reached `srv` over HTTP joins the scheduler now. Listeners are called on changes."""
        role = srv.spec.role
        if role != "server" and client.bootstrap_room is None:
            raise SubmitError(f"{srv.spec.name} is a PD {role} server: a request needs `bootstrap_host` and "
                              "`bootstrap_room` (send it through the gateway)")
        if role == "prefill":
            return self._submit_prefill(srv, client)
        if role == "decode":
            return self._submit_decode(srv, client)
        req = self._new_real(client, srv, srv.next_rank())
        req.t_wait = self.now + REQUEST_PROCESS_SECONDS
        self._schedule(req.t_wait, self._enqueue, req)
        return req

    def _new_real(self, client: ClientRequest, srv: ServerSim | None, rank: RankSim | None) -> Req:
        produced, reason = self._output_length(client)
        shape = RequestShape(prompt_tokens=client.prompt_tokens, completion_tokens=produced, cached_tokens=0,
                             streaming=client.stream, finish_reason=reason, abort_fraction=1.0,
                             structured=client.structured)
        rid = client.rid if client.rid not in self._live else f"{client.rid}-{next(self._rids):x}"
        req = Req(rid, shape, self.now, srv, rank, client=client)
        self._live[rid] = req
        return req

    def _output_length(self, client: ClientRequest) -> tuple[int, str]:
        """How many tokens the model writes: all it may with ignore_eos, else until it stops by itself."""
        limit = client.max_new_tokens
        if client.ignore_eos and limit is not None:
            return max(limit, 1), "length"
        natural = max(1, round(self.model.output_tokens * self.rng.uniform(0.7, 1.0)))
        if limit is not None and natural >= limit:
            return max(limit, 1), "length"
        return natural, "stop"

    def _submit_decode(self, srv: ServerSim, client: ClientRequest) -> Req:
        room = client.bootstrap_room
        req = self._pairs.get(room) if room is not None else None
        if req is not None and req.server is None and req.alive:
            del self._pairs[room]  # type: ignore[arg-type]
            req.server, req.rank, req.created, req.client = srv, srv.next_rank(), self.now, client
        else:
            req = self._new_real(client, srv, srv.next_rank())
            if client.bootstrap_host != FAKE_BOOTSTRAP_HOST and room is not None:
                self._pairs[room] = req
                self._schedule(self.now + BOOTSTRAP_TIMEOUT, self._bootstrap_timeout, req)
        assert req.rank is not None
        req.rank.prealloc.append(req)
        self._pd_prealloc(req.rank)
        return req

    def _submit_prefill(self, srv: ServerSim, client: ClientRequest) -> Req:
        room = client.bootstrap_room
        assert room is not None
        req = self._pairs.get(room)
        if req is not None and req.p_server is None and req.alive:
            del self._pairs[room]
        else:
            req = self._new_real(client, None, None)
            self._pairs[room] = req
            self._schedule(self.now + BOOTSTRAP_TIMEOUT, self._bootstrap_timeout, req)
        # SGLang's prefill load balance is follow_bootstrap_room: the room picks the DP rank.
        req.p_server, req.p_rank, req.p_created = srv, srv.ranks[room % len(srv.ranks)], self.now
        req.p_rank.bootstrap[req] = None
        if req.prealloc_ready:
            self._schedule(self.now + BOOTSTRAP_SECONDS * self.rng.uniform(0.5, 1.5), self._pd_bootstrapped, req)
        return req

    def _forget_pair(self, req: Req) -> None:
        room = req.client.bootstrap_room if req.client is not None else None
        if room is not None and self._pairs.get(room) is req:
            del self._pairs[room]

    def _bootstrap_timeout(self, req: Req) -> None:
        """One PD half waited BOOTSTRAP_TIMEOUT for the other: SGLang aborts it (bootstrap failed)."""
        if not req.alive or (req.server is not None and req.p_server is not None):
            return
        self._forget_pair(req)
        for srv, rank in ((req.server, req.rank), (req.p_server, req.p_rank)):
            if srv is not None and rank is not None:
                for labels in rank.labels:
                    rank.store.inc("sglang:num_bootstrap_failed_reqs", {**srv.base_labels(), **labels})
        self._abort(req, "Bootstrap timed out", 500)

    def client_gone(self, req: Req) -> None:
        """The client hung up before the end: SGLang aborts the request DISCONNECT_ABORT_SECONDS later."""
        if req.alive and not req.finished:
            self._schedule(self.now + DISCONNECT_ABORT_SECONDS, self._disconnect_abort, req)

    def _disconnect_abort(self, req: Req) -> None:
        if req.alive and not req.finished:
            self._abort(req, "Client disconnected", 0, logged=False)

    def _abort(self, req: Req, message: str, status: int, *, logged: bool = True) -> None:
        """End a request where it is (queue, prefill, transfer or decode) with an abort finish."""
        req.alive = False
        self._live.pop(req.rid, None)
        self._forget_pair(req)
        req.abort_message, req.abort_status = message, status
        if req.rank is not None and req in req.rank.decoding:
            self._close_segment(req, self.now)
        req.produced = req.tokens(self.now) if req.t_first and self.now >= req.t_first else 0
        req.shape = dataclasses.replace(req.shape, finish_reason="abort")
        if req.p_rank is not None:
            self._leave_prefill(req.p_rank, req)
        if req.server is not None and req.rank is not None:
            rank = req.rank
            self._leave(rank, req)
            if req in rank.waiting:
                rank.waiting.remove(req)
            srv = req.server
            if req.log_metrics:
                srv.store.inc("sglang:num_aborted_requests", srv.base_labels())
                self._observe_finished(srv, req, end=self.now, logged=logged)
            if srv.spec.role == "decode":
                self._pd_prealloc(rank)
            else:
                self._admit(srv, rank)
        req.finished = True
        req.prefill_done = True
        req.notify()

    # --- unified flow --------------------------------------------------------------------------
    def _capacity(self, srv: ServerSim, rank: RankSim) -> int:
        # Full HBM leaves fewer KV slots: fewer requests fit, the rest wait.
        eff = self.effects(srv.spec.role)
        return max(1, int(rank.capacity * eff.kv_share)) if eff.hbm_full else rank.capacity

    def _enqueue(self, req: Req) -> None:
        if not req.alive or req.server is None or req.rank is None:
            return
        req.rank.waiting.append(req)
        self._admit(req.server, req.rank)

    def _admit_any(self, srv: ServerSim, rank: RankSim) -> None:
        if srv.spec.role == "server":
            self._admit(srv, rank)
        elif srv.spec.role == "decode":
            self._pd_prealloc(rank)
        else:
            self._pd_admit_prefill(rank)

    def _admit(self, srv: ServerSim, rank: RankSim) -> None:
        cap = self._capacity(srv, rank)
        while rank.waiting and len(rank.running) < cap:
            req = rank.waiting.popleft()
            rank.running[req] = None
            if req.retracted:  # its KV is gone: prefill the prompt and its output so far again, then go on
                tokens = req.shape.prompt_tokens + int(req.mark_done) + 1
                seconds = self.model.prefill_seconds(self.rng, tokens, self.effects(srv.spec.role).ttft)
                self._schedule(self.now + seconds, self._resume, req)
                self._touch(rank)
                continue
            req.queue_time = self.now - req.t_wait
            prefill = self._prefill(srv, rank, req)
            self._start_decode(req, self.now + prefill)
            self._touch(rank)

    def _resume(self, req: Req) -> None:
        """A retracted request is prefilled again: it decodes on from where it stopped."""
        rank = req.rank
        if not req.alive or rank is None or rank.dead or req not in rank.running:
            return
        req.retracted = False
        rank.retracted.pop(req, None)
        req.mark_t = self.now
        rank.decoding[req] = None
        self._touch(rank)

    def _prefill(self, srv: ServerSim, rank: RankSim, req: Req) -> float:
        """Account one prefill on `rank` and return how long it takes."""
        if req.real and req.client is not None and not srv.spec.disable_radix_cache:
            cached = rank.cache.match_and_insert(req.client.blocks, req.shape.prompt_tokens)
            req.shape = dataclasses.replace(req.shape, cached_tokens=cached)
        shape = req.shape
        seconds = self.model.prefill_seconds(self.rng, shape.uncached_tokens, self.effects(srv.spec.role).ttft)
        rank.last_hit = shape.cached_tokens / max(shape.prompt_tokens, 1)
        for labels in rank.labels:
            lab = {**srv.base_labels(), **labels}
            rank.store.observe("sglang:queue_time_seconds", lab, QUEUE_EDGES, req.queue_time)
            _stage(rank.store, lab, "prefill_forward", seconds)
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "prefill_compute"}, shape.uncached_tokens)
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "prefill_cache"}, shape.cached_tokens)
            rank.store.inc("sglang:prefill_effective_tokens", {**lab, "mode": "input"}, shape.uncached_tokens)
            rank.store.inc("sglang:prefill_effective_tokens", {**lab, "mode": "device_hit"}, shape.cached_tokens)
        return seconds

    def _start_decode(self, req: Req, t_first: float) -> None:
        """Prefill is under way: the first token comes at `t_first`, then decode at the rank's rate."""
        rank, shape = req.rank, req.shape
        assert rank is not None
        req.accept = self.model.accept_sample(self.rng)
        if req.accept:
            rank.last_accept = req.accept
        req.base_tpot = self.model.base_tpot(self.rng, req.accept)
        produced = shape.completion_tokens
        if shape.finish_reason == "abort":
            produced = max(1, int(produced * shape.abort_fraction))
        req.produced = produced
        req.t_first = t_first
        self._schedule(t_first, self._first_token, req)

    def _first_token(self, req: Req) -> None:
        if not req.alive or req.server is None or req.rank is None:
            return
        srv, rank = req.server, req.rank
        if req.log_metrics:
            labels = {**srv.base_labels(), "is_streaming": _flag(req.shape.streaming)}
            srv.store.observe(SLI_FAMILIES["ttft"], labels, self.buckets["ttft"], req.t_first - req.created)
        req.mark_t = req.itl_t = self.now
        req.mark_done, req.itl_k = 0.0, 0
        if req.produced <= 1:
            req.t_end = self.now
            self._finish(req)
            return
        rank.decoding[req] = None
        self._touch(rank)
        req.notify()

    def _close_segment(self, req: Req, now: float) -> None:
        """End the current constant-rate run at `now`: observe ITL up to its last whole token."""
        if req.rate <= 0.0:
            req.mark_t = now
            return
        done = min(req.mark_done + (now - req.mark_t) / req.rate, float(req.produced - 1))
        k = int(done + EPS)
        if k > req.itl_k:
            t_k = req.mark_t + (k - req.mark_done) * req.rate
            if req.server is not None and req.log_metrics:
                interval = t_k - req.itl_t
                n = k - req.itl_k
                req.server.store.observe(SLI_FAMILIES["itl"], req.server.base_labels(), self.buckets["itl"],
                                         interval / n, weight=n, sum_add=interval)
            req.itl_t, req.itl_k = t_k, k
        if req.rank is not None:
            req.rank.tokens_closed += done - req.mark_done
        req.mark_done, req.mark_t = done, now

    def _rerate(self, rank: RankSim) -> None:
        """New decode rates for every request in the rank's batch from now; one event for the next finish."""
        srv = self._server_of.get(id(rank))
        if srv is None:
            return
        now = self.now
        unified = srv.spec.role == "server"  # a PD decode server runs no prefill beside its decode
        eff = self.effects(srv.spec.role)
        factor = step_factor(len(rank.decoding), rank.reference, rank.prefilling() if unified else 0,
                             rank.capacity) * eff.tpot
        t_next = math.inf
        for req in rank.decoding:
            self._close_segment(req, now)
            old = req.rate
            # Fewer draft tokens accepted per verify step: more steps for the same tokens.
            req.rate = req.base_tpot * factor * (req.accept / _accepted(req.accept, eff.accept_drop) if req.accept
                                                 else 1.0)
            req.t_end = now + max(req.produced - 1 - req.mark_done, 0.0) * req.rate
            t_next = min(t_next, req.t_end)
            if req.listeners and (old <= 0.0 or req.rate < old):
                req.notify()  # faster: a waiting stream would otherwise send its next token late
        self._record_throughput(rank, now)
        rank.version += 1
        if t_next < math.inf:
            self._schedule(t_next, self._rank_finish, (rank, rank.version))

    def _rank_finish(self, arg: tuple[RankSim, int]) -> None:
        rank, version = arg
        if version != rank.version or rank.dead:
            return
        for req in [r for r in rank.decoding if r.t_end <= self.now + EPS]:
            self._close_segment(req, req.t_end)
            self._finish(req)
        self._touch(rank)

    def _finish(self, req: Req) -> None:
        if not req.alive or req.server is None or req.rank is None:
            return
        req.alive = False
        self._live.pop(req.rid, None)
        srv, rank = req.server, req.rank
        self._leave(rank, req)
        req.finished = True
        if req.log_metrics:
            self._observe_finished(srv, req, end=req.t_end)
            self._scheduler_decode_counters(srv, rank, req)
        self.finished += 1
        self.real_finished += int(req.real)
        if srv.spec.role == "decode":
            self._pd_prealloc(rank)
        else:
            self._admit(srv, rank)
        req.notify()

    def _leave(self, rank: RankSim, req: Req) -> None:
        """Take a request out of every place it can hold on its (decode or unified) rank."""
        if req in rank.decoding:
            del rank.decoding[req]
            self._touch(rank)
        if req in rank.running:
            del rank.running[req]
            self._touch(rank)
        rank.transfer.pop(req, None)
        rank.retracted.pop(req, None)
        if req in rank.prealloc:
            rank.prealloc.remove(req)

    def _leave_prefill(self, prank: RankSim, req: Req) -> None:
        """Take a request out of every queue of its PD prefill rank, and let the next one in."""
        for coll in (prank.bootstrap, prank.running, prank.inflight):
            coll.pop(req, None)
        if req in prank.waiting:
            prank.waiting.remove(req)
        self._pd_admit_prefill(prank)

    # --- PD flow -------------------------------------------------------------------------------
    def _pd_prealloc(self, rank: RankSim) -> None:
        srv = self._server_of.get(id(rank))
        if srv is None or rank.dead:
            return
        cap = self._capacity(srv, rank)
        while rank.prealloc and len(rank.running) + len(rank.transfer) < cap:
            req = rank.prealloc.popleft()
            rank.transfer[req] = None
            req.t_prealloc = self.now
            for labels in rank.labels:
                _stage(rank.store, {**srv.base_labels(), **labels}, "decode_bootstrap", self.now - req.created)
            if req.client is not None and req.client.bootstrap_host == FAKE_BOOTSTRAP_HOST:
                self._schedule(self.now + BOOTSTRAP_SECONDS, self._fake_transfer, req)
            elif req.p_rank is not None:
                self._schedule(self.now + BOOTSTRAP_SECONDS * self.rng.uniform(0.5, 1.5), self._pd_bootstrapped, req)
            else:
                req.prealloc_ready = True  # the prefill half has not reached its server yet

    def _fake_transfer(self, req: Req) -> None:
        """--fake-prefill: the decode server makes up the KV cache and decodes straight away."""
        if not req.alive or req.rank is None:
            return
        req.rank.transfer.pop(req, None)
        req.rank.running[req] = None
        self._start_decode(req, self.now + 0.5 * self.model.tpot_median)

    def _pd_bootstrapped(self, req: Req) -> None:
        if not req.alive or req.p_rank is None or req.p_server is None or req not in req.p_rank.bootstrap:
            return
        prank = req.p_rank
        prank.bootstrap.pop(req, None)
        prank.waiting.append(req)
        req.t_wait = self.now
        for labels in prank.labels:
            lab = {**req.p_server.base_labels(), **labels}
            edges = BY_NAME["sglang:kv_transfer_bootstrap_ms"].buckets
            prank.store.observe("sglang:kv_transfer_bootstrap_ms", lab, edges, (self.now - req.p_created) * 1000)
            edges = BY_NAME["sglang:kv_transfer_alloc_ms"].buckets
            prank.store.observe("sglang:kv_transfer_alloc_ms", lab, edges,
                                max(req.t_prealloc - req.p_created, 0.0) * 1000)
            _stage(prank.store, lab, "prefill_bootstrap", self.now - req.p_created)
        self._pd_admit_prefill(prank)

    def _pd_admit_prefill(self, prank: RankSim) -> None:
        psrv = self._server_of.get(id(prank))
        if psrv is None or prank.dead:
            return
        while prank.waiting and len(prank.running) < prank.capacity:
            req = prank.waiting.popleft()
            prank.running[req] = None
            req.queue_time = self.now - req.t_wait
            self._schedule(self.now + self._prefill(psrv, prank, req), self._pd_prefilled, req)

    def _pd_prefilled(self, req: Req) -> None:
        if not req.alive or req.p_rank is None or req.p_server is None:
            return
        prank = req.p_rank
        prank.running.pop(req, None)
        prank.inflight[req] = None
        req.kv_seconds, req.kv_mb = self.model.kv_transfer(self.rng, req.shape.prompt_tokens)
        self._schedule(self.now + req.kv_seconds, self._pd_transferred, req)
        self._pd_admit_prefill(prank)

    def _pd_transferred(self, req: Req) -> None:
        if not req.alive or req.p_rank is None or req.p_server is None or req.rank is None:
            return
        fail = self.effects("prefill").transfer_failure
        if fail and self.rng.random() < fail:
            self._pd_transfer_failed(req)
            return
        req.p_rank.inflight.pop(req, None)
        seconds, mb = req.kv_seconds, req.kv_mb
        for labels in req.p_rank.labels:  # the transfer finished: SGLang observes it now, on the prefill side
            lab = {**req.p_server.base_labels(), **labels}
            for name, value in (("sglang:kv_transfer_latency_ms", seconds * 1000),
                                ("sglang:kv_transfer_speed_gb_s", mb / 1024 / seconds),
                                ("sglang:kv_transfer_total_mb", mb)):
                req.p_rank.store.observe(name, lab, BY_NAME[name].buckets, value)
            _stage(req.p_rank.store, lab, "prefill_transfer_kv_cache", seconds)
        self._observe_prefill_side(req.p_server, req)
        rank = req.rank
        assert req.server is not None
        rank.transfer.pop(req, None)
        rank.running[req] = None
        # The KV is here: the request waits for the next decode batch (half a step on average).
        wait = 0.5 * self.model.tpot_median
        for labels in rank.labels:
            lab = {**req.server.base_labels(), **labels}
            _stage(rank.store, lab, "decode_transferred", self.now - req.t_prealloc)
            _stage(rank.store, lab, "decode_waiting", wait)
            rank.store.observe("sglang:queue_time_seconds", lab, QUEUE_EDGES, wait)
        self._start_decode(req, self.now + wait)

    def _pd_transfer_failed(self, req: Req) -> None:
        """Both sides count the failed transfer (SGLang's prefill.py and decode.py); the decode server aborts
        the request, which its client (and the request log) sees as an error before the first token."""
        assert req.p_rank is not None and req.p_server is not None and req.server is not None
        assert req.rank is not None
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
        req.produced = 0
        req.shape = dataclasses.replace(req.shape, finish_reason="abort")
        req.abort_message, req.abort_status = "KV transfer failed", 500
        req.finished = req.prefill_done = True
        self._pd_prealloc(rank)
        self._pd_admit_prefill(req.p_rank)
        req.notify()

    # --- observation ---------------------------------------------------------------------------
    def _observe_finished(self, srv: ServerSim, req: Req, *, end: float, logged: bool = True) -> None:
        """TokenizerManager.collect_metrics at finish (TTFT was observed at the first token, ITL per run)."""
        shape, store = req.shape, srv.store
        base = srv.base_labels()
        ls = {**base, "is_streaming": _flag(shape.streaming)}
        e2e = end - req.created
        store.inc("sglang:num_requests", ls)
        store.inc("sglang:prompt_tokens", ls, shape.prompt_tokens)
        store.inc("sglang:generation_tokens", ls, req.produced)
        if shape.cached_tokens:
            store.inc("sglang:cached_tokens", {**base, "cache_source": "device"}, shape.cached_tokens)
        if shape.structured:
            store.inc("sglang:num_so_requests", base)
        if req.accept:
            accept = _accepted(req.accept, self.effects(srv.spec.role).accept_drop)
            store.inc("sglang:spec_verify_calls", base, math.ceil(req.produced / accept))
        store.observe("sglang:prompt_tokens_histogram", base, TOKEN_BUCKETS, shape.prompt_tokens)
        store.observe("sglang:uncached_prompt_tokens_histogram", base, TOKEN_BUCKETS, shape.uncached_tokens)
        store.observe("sglang:generation_tokens_histogram", base, TOKEN_BUCKETS, req.produced)
        store.observe(SLI_FAMILIES["e2e"], ls, self.buckets["e2e"], e2e)
        tpot = self.request_tpot(req)
        if tpot is not None:
            store.observe(SLI_FAMILIES["tpot"], ls, self.buckets["tpot"], tpot)
        if not req.real:
            if shape.finish_reason == "abort":
                store.inc("sglang:num_aborted_requests", base)
            status = "499" if shape.finish_reason == "abort" else "200"
            store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": status})
        if logged:
            first = req.t_first - req.created if req.t_first and req.produced else None
            self._log_request(srv, req, finish_reason=shape.finish_reason, completion_tokens=req.produced,
                              first_token_latency=first, e2e_latency=e2e, tpot=tpot,
                              **({"abort": (req.abort_message, req.abort_status)} if req.abort_message else {}))

    @staticmethod
    def request_tpot(req: Req) -> float | None:
        """SGLang's per-request TPOT: only for stop/length finishes with more than one token."""
        if req.shape.finish_reason in ("stop", "length") and req.produced > 1 and req.t_end > req.t_first:
            return (req.t_end - req.t_first) / (req.produced - 1)
        return None

    def _log_request(self, srv: ServerSim, req: Req, **outcome: Any) -> None:
        """One line of SGLang's request-metrics log on `srv`, when it writes one; `outcome`: how it ended."""
        if srv.log is None or not req.log_metrics:
            return
        shape = req.shape
        max_new = req.client.max_new_tokens if req.client is not None else shape.completion_tokens
        srv.log.write(record(
            rid=req.rid, streaming=shape.streaming, max_new_tokens=max_new or shape.completion_tokens,
            prompt_tokens=shape.prompt_tokens, cached_tokens=shape.cached_tokens,
            received_wall=self.wall_start + req.created, queue_time=req.queue_time, **outcome))

    def _observe_prefill_side(self, psrv: ServerSim, req: Req) -> None:
        """A PD prefill server's tokenizer finishes the request after the KV left: no TTFT/TPOT/ITL."""
        req.prefill_done = True
        req.notify()
        if not req.log_metrics:
            return
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
        store.observe(SLI_FAMILIES["e2e"], ls, self.buckets["e2e"], self.now - req.p_created)
        if not req.real:
            store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": "200"})

    def _count_abort(self, srv: ServerSim, req: Req, status: str = "499") -> None:
        base = srv.base_labels()
        srv.store.inc("sglang:num_aborted_requests", base)
        srv.store.inc("sglang:num_requests", {**base, "is_streaming": _flag(req.shape.streaming)})
        if not req.real:
            srv.store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": status})

    def _scheduler_decode_counters(self, srv: ServerSim, rank: RankSim, req: Req) -> None:
        accepted = _accepted(req.accept, self.effects(srv.spec.role).accept_drop) if req.accept else 0.0
        steps = math.ceil(req.produced / accepted) if accepted else req.produced
        for labels in rank.labels:
            lab = {**srv.base_labels(), **labels}
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "decode"}, req.produced)
            rank.store.inc("sglang:cuda_graph_passes", {**lab, "mode": "decode_cuda_graph"}, steps)

    # --- live state ----------------------------------------------------------------------------
    def _decode_tokens(self, rank: RankSim, t: float) -> float:
        """Cumulative decode tokens of the rank at `t` >= its last re-rate (runs are linear in between)."""
        return rank.tokens_closed + sum((t - r.mark_t) / r.rate for r in rank.decoding if r.rate > 0)

    def _record_throughput(self, rank: RankSim, now: float) -> None:
        hist = rank.history
        hist.append((now, self._decode_tokens(rank, now)))
        while len(hist) > 2 and hist[1][0] <= now - THROUGHPUT_WINDOW:
            hist.popleft()

    def gen_throughput(self, rank: RankSim) -> float:
        """Tokens the rank produced per second over the last THROUGHPUT_WINDOW seconds (or its life)."""
        now = self.now
        points = rank.history
        if not points:
            return 0.0
        start = now - THROUGHPUT_WINDOW
        if start <= points[0][0]:
            t0, c0 = points[0]
        elif start >= points[-1][0]:
            t0, c0 = start, self._decode_tokens(rank, start)
        else:  # linear between two re-rates
            i = next(j for j in range(1, len(points)) if points[j][0] > start)
            (ta, ca), (tb, cb) = points[i - 1], points[i]
            t0, c0 = start, ca + (cb - ca) * (start - ta) / (tb - ta)
        if now - t0 <= 0:
            return sum(1.0 / r.rate for r in rank.decoding if r.rate > 0)
        return max(self._decode_tokens(rank, now) - c0, 0.0) / (now - t0)

    def rank_gauges(self, srv: ServerSim, rank: RankSim) -> dict[str, float]:
        """Scheduler gauges of one rank right now (what its last log_stats would have written)."""
        now, role = self.now, srv.spec.role
        eff = self.effects(role)
        done = {r: r.tokens(now) for r in rank.decoding}
        seq = sum(r.shape.prompt_tokens + done[r] for r in rank.decoding)
        held = seq + sum(r.shape.prompt_tokens for r in rank.running if r not in done)
        held += sum(r.shape.prompt_tokens for r in rank.transfer) + sum(r.shape.prompt_tokens for r in rank.inflight)
        total = rank.max_total_tokens
        usage = min(held / total, 1.0)
        used = held
        if eff.hbm_full:
            usage = max(usage, 0.97)
            used = usage * total
        evictable = min(total - used, total * 0.1 * (1 if self.model.prefix_hit else 0.2))
        thr = self.gen_throughput(rank) if role != "prefill" else 0.0
        accept = 0.0
        if self.model.accept_length:  # the batch's mean accepted length now (SGLang: over its last log interval)
            batch = [r.accept for r in rank.decoding if r.accept] or [rank.last_accept]
            accept = sum(_accepted(a, eff.accept_drop) for a in batch) / len(batch)
        drafts = self.model.draft_tokens
        cap = self._capacity(srv, rank)
        running = len(rank.running) if role == "prefill" else len(rank.decoding)
        return {
            "sglang:num_running_reqs": float(running),
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
            "sglang:num_retracted_reqs": float(len(rank.retracted)),
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
            "real_finished_requests": self.real_finished,
            "real_in_flight": sum(1 for r in self._live.values() if r.real),
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


def _accepted(accept: float, drop: float) -> float:
    """Tokens accepted per verify step under an accept-length drop (never below the one token a step makes)."""
    return max(1.0, accept / drop) if accept else 0.0


def _stage(store: MetricStore, labels: dict[str, str], stage: str, seconds: float) -> None:
    """One `sglang:per_stage_req_latency_seconds` observation of a scheduler stage."""
    store.observe("sglang:per_stage_req_latency_seconds", {**labels, "stage": stage}, STAGE_BUCKETS, max(seconds, 0.0))
