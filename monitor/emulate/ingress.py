"""Where a deployment's requests come from, and how they leave before their end.

Two sources join the same scheduler, the same queues and the same metrics:
  - synthetic: a Poisson process at the deployment's rate (0: none; a `queue_buildup` incident still adds
    other clients' load), shapes drawn from the recipe row, round-robin over servers;
  - real: `submit()` from the HTTP side (serving.py) for each /generate or OpenAI request that reached a
    server. In PD the gateway sends one half to a prefill and one to a decode server; they are paired by
    `bootstrap_room`, and a half whose other half never comes is aborted after BOOTSTRAP_TIMEOUT.
A request ends early when its client hangs up (aborted DISCONNECT_ABORT_SECONDS later, as SGLang's
create_abort_task does) or when the process serving it dies (restart).

`Ingress` sees the deployment as `IngressHost`, what it reads and calls of it (engine.py imports this
module, so naming `engine.EmulatedDeployment` here would close an import cycle).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from monitor.emulate.disaggregation import BOOTSTRAP_SECONDS, FAKE_BOOTSTRAP_HOST
from monitor.emulate.incidents import restarting
from monitor.emulate.model import RequestShape
from monitor.emulate.sim import Req
from monitor.emulate.wire import ClientRequest

if TYPE_CHECKING:
    from monitor.config import Deployment
    from monitor.emulate.disaggregation import PDFlow
    from monitor.emulate.incidents import Effects, Incident
    from monitor.emulate.model import LatencyModel
    from monitor.emulate.observe import Observer
    from monitor.emulate.scheduler import Scheduler
    from monitor.emulate.sim import RankSim, ServerSim

REQUEST_PROCESS_SECONDS = 0.002  # tokenize and dispatch to the scheduler
BOOTSTRAP_TIMEOUT = 300.0  # SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT
DISCONNECT_ABORT_SECONDS = 2.0  # create_abort_task: a gone client's request is aborted 2 s later
# Clients of one timeout setting do not hang up at one instant, and clients with settings of their own differ more:
# `client_patience` draws each one's wait as the incident's `factor` times a log-normal of a spread, fixed by its
# request id. The lab runs with none. A 15 % and a 5 % spread were tried: the grid's 2 s timeout is aborted at 4.0 s, an
# edge of SGLang's E2E buckets (as a round timeout plus SGLang's 2 s usually is), so the aborts straddle it, and the
# half above vanishes into that bucket's own loss; at light load the histogram then cannot tell them from hang-ups at
# random ages (32 aborts, 9.5 across the edge: 1.3 sigma; 3 of 5 tuned seeds read "no incident"). Reading the aborts'
# own ages from SGLang's request log would settle it (#32, left open).
CLIENT_PATIENCE_SPREAD = 0.0


def client_patience(timeout: float, rid: str, spread: float = CLIENT_PATIENCE_SPREAD) -> float:
    """How long this request's client waits for its whole answer under a `client_timeout` of `timeout`: queued,
    in prefill or decoding, it hangs up then (SGLang aborts it DISCONNECT_ABORT_SECONDS later)."""
    if not spread:
        return timeout
    return timeout * math.exp(spread * random.Random(zlib.crc32(rid.encode())).gauss(0.0, 1.0))


class SubmitError(ValueError):
    """A request this server cannot take the way it came (the HTTP side answers 400)."""


class IngressHost(Protocol):
    """What `Ingress` reads of its deployment (engine.EmulatedDeployment)."""

    deployment: Deployment  # its name prefixes the synthetic requests' ids
    now: float
    rng: random.Random
    model: LatencyModel
    nominal_rate: float  # what `queue_buildup` multiplies when the synthetic load is off
    servers: list[ServerSim]
    incidents: list[Incident]
    live: dict[str, Req]
    scheduler: Scheduler
    pd: PDFlow
    observer: Observer

    def effects(self, role: str) -> Effects: ...

    def schedule(self, t: float, fn: Callable[[Any], None], arg: Any) -> None: ...


class Ingress:
    """Synthetic arrivals, real submissions (PD halves paired), and the ends that come early."""

    def __init__(self, dep: IngressHost) -> None:
        self.dep = dep
        self._rids = itertools.count(1)
        self._pairs: dict[int, Req] = {}  # PD: bootstrap_room -> request with one half here
        self._rr: dict[str, int] = {}
        self._arrivals_pending = False

    # --- synthetic arrivals --------------------------------------------------------------------
    def arrival_rate(self) -> float:
        """Synthetic arrivals per second now; `queue_buildup` adds other clients even with synthetic off."""
        return self.dep.effects("server").arrival_rate(self.dep.model.arrival_rate, self.dep.nominal_rate)

    def kick_arrivals(self) -> None:
        """Schedule the next synthetic arrival, unless one is pending or there is no load."""
        dep = self.dep
        if not self._arrivals_pending and self.arrival_rate() > 0:
            self._arrivals_pending = True
            dep.schedule(dep.now + dep.rng.expovariate(self.arrival_rate()), self.arrival, None)

    def _pick(self, role: str) -> ServerSim | None:
        pool = [s for s in self.dep.servers if s.spec.role == role
                and not restarting(self.dep.incidents, s.spec.role, self.dep.now)]
        if not pool:
            return None
        i = self._rr.get(role, 0)
        self._rr[role] = i + 1
        return pool[i % len(pool)]

    def arrival(self, _: Any) -> None:
        dep = self.dep
        self._arrivals_pending = False
        self.kick_arrivals()
        unified = any(s.spec.role == "server" for s in dep.servers)
        answer = self._pick("server" if unified else "decode")
        prefill = None if unified else self._pick("prefill")
        if answer is None or (not unified and prefill is None):
            return  # every server that could take it is restarting: the client gets an error
        radix = not (answer.spec.disable_radix_cache or (prefill and prefill.spec.disable_radix_cache))
        shape = dep.model.sample_shape(dep.rng, radix_cache=radix)
        rid = f"{dep.deployment.name}-{next(self._rids):08x}"
        req = Req(rid, shape, dep.now, answer, answer.next_rank())
        dep.live[rid] = req
        dep.observer.http_request(answer)
        patience = dep.effects(answer.spec.role).client_timeout
        if patience is not None:  # a client (or the gateway in front) that gives up: `client_timeout`
            dep.schedule(dep.now + client_patience(patience, rid), self.client_gone, req)
        if unified:
            req.t_wait = dep.now + REQUEST_PROCESS_SECONDS
            dep.schedule(req.t_wait, dep.scheduler.enqueue, req)
            return
        assert prefill is not None
        req.p_server, req.p_rank, req.p_created = prefill, prefill.next_rank(), dep.now
        dep.observer.http_request(prefill)
        req.p_rank.bootstrap[req] = None
        assert req.rank is not None
        req.rank.prealloc.append(req)
        dep.pd.prealloc(req.rank)

    # --- real requests -------------------------------------------------------------------------
    def submit(self, srv: ServerSim, client: ClientRequest) -> Req:
        """A request that reached `srv` over HTTP joins the scheduler now. Listeners are called on changes."""
        dep = self.dep
        role = srv.spec.role
        if role != "server" and client.bootstrap_room is None:
            raise SubmitError(f"{srv.spec.name} is a PD {role} server: a request needs `bootstrap_host` and "
                              "`bootstrap_room` (send it through the gateway)")
        if role == "prefill":
            return self._submit_prefill(srv, client)
        if role == "decode":
            return self._submit_decode(srv, client)
        req = self._new_real(client, srv, srv.next_rank())
        req.t_wait = dep.now + REQUEST_PROCESS_SECONDS
        dep.schedule(req.t_wait, dep.scheduler.enqueue, req)
        return req

    def _new_real(self, client: ClientRequest, srv: ServerSim | None, rank: RankSim | None) -> Req:
        dep = self.dep
        produced, reason = self._output_length(client)
        shape = RequestShape(prompt_tokens=client.prompt_tokens, completion_tokens=produced, cached_tokens=0,
                             streaming=client.stream, finish_reason=reason, abort_fraction=1.0,
                             structured=client.structured)
        rid = client.rid if client.rid not in dep.live else f"{client.rid}-{next(self._rids):x}"
        req = Req(rid, shape, dep.now, srv, rank, client=client)
        dep.live[rid] = req
        return req

    def _output_length(self, client: ClientRequest) -> tuple[int, str]:
        """How many tokens the model writes: all it may with ignore_eos, else until it stops by itself."""
        limit = client.max_new_tokens
        if client.ignore_eos and limit is not None:
            return max(limit, 1), "length"
        natural = max(1, round(self.dep.model.output_tokens * self.dep.rng.uniform(0.7, 1.0)))
        if limit is not None and natural >= limit:
            return max(limit, 1), "length"
        return natural, "stop"

    def _submit_decode(self, srv: ServerSim, client: ClientRequest) -> Req:
        dep = self.dep
        room = client.bootstrap_room
        req = self._pairs.get(room) if room is not None else None
        if req is not None and req.server is None and req.alive:
            del self._pairs[room]  # type: ignore[arg-type]
            req.server, req.rank, req.created, req.client = srv, srv.next_rank(), dep.now, client
        else:
            req = self._new_real(client, srv, srv.next_rank())
            if client.bootstrap_host != FAKE_BOOTSTRAP_HOST and room is not None:
                self._pairs[room] = req
                dep.schedule(dep.now + BOOTSTRAP_TIMEOUT, self._bootstrap_timeout, req)
        assert req.rank is not None
        req.rank.prealloc.append(req)
        dep.pd.prealloc(req.rank)
        return req

    def _submit_prefill(self, srv: ServerSim, client: ClientRequest) -> Req:
        dep = self.dep
        room = client.bootstrap_room
        assert room is not None
        req = self._pairs.get(room)
        if req is not None and req.p_server is None and req.alive:
            del self._pairs[room]
        else:
            req = self._new_real(client, None, None)
            self._pairs[room] = req
            dep.schedule(dep.now + BOOTSTRAP_TIMEOUT, self._bootstrap_timeout, req)
        # SGLang's prefill load balance is follow_bootstrap_room: the room picks the DP rank.
        req.p_server, req.p_rank, req.p_created = srv, srv.ranks[room % len(srv.ranks)], dep.now
        req.p_rank.bootstrap[req] = None
        if req.prealloc_ready:
            dep.schedule(dep.now + BOOTSTRAP_SECONDS * dep.rng.uniform(0.5, 1.5), dep.pd.bootstrapped, req)
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
        self.dep.observer.bootstrap_failed(req)
        self.abort(req, "Bootstrap timed out", 500)

    # --- early ends ----------------------------------------------------------------------------
    def client_gone(self, req: Req) -> None:
        """The client hung up before the end: SGLang aborts the request DISCONNECT_ABORT_SECONDS later."""
        if req.alive and not req.finished:
            self.dep.schedule(self.dep.now + DISCONNECT_ABORT_SECONDS, self._disconnect_abort, req)

    def _disconnect_abort(self, req: Req) -> None:
        if req.alive and not req.finished:
            self.abort(req, "Client disconnected", 0, logged=False)

    def abort(self, req: Req, message: str, status: int, *, logged: bool = True) -> None:
        """End a request where it is (queue, prefill, transfer or decode) with an abort finish."""
        dep = self.dep
        scheduler = dep.scheduler
        req.alive = False
        dep.live.pop(req.rid, None)
        self._forget_pair(req)
        req.abort_message, req.abort_status = message, status
        if req.rank is not None and req in req.rank.decoding:
            scheduler.close_segment(req, dep.now)
        req.produced = req.tokens(dep.now) if req.t_first and dep.now >= req.t_first else 0
        req.shape = dataclasses.replace(req.shape, finish_reason="abort")
        if req.p_rank is not None:
            scheduler.leave_prefill(req.p_rank, req)
        if req.server is not None and req.rank is not None:
            rank = req.rank
            scheduler.leave(rank, req)
            if req in rank.waiting:
                rank.waiting.remove(req)
            srv = req.server
            if req.log_metrics:
                dep.observer.aborted(srv, req, logged=logged)
            if srv.spec.role == "decode":
                dep.pd.prealloc(rank)
            else:
                scheduler.admit(srv, rank)
        req.finished = True
        req.prefill_done = True
        req.notify()

    def kill_requests(self, srv: ServerSim) -> None:
        """`srv` died: every request on it is dropped; the other half of a PD request sees an abort."""
        dep = self.dep
        for req in [r for r in dep.live.values() if srv in (r.server, r.p_server)]:
            req.alive = False
            req.killed = True
            dep.live.pop(req.rid, None)
            self._forget_pair(req)
            if req.server is not None and req.server is not srv and req.rank is not None:
                # The decode side survives its prefill server's death: its client sees an abort.
                rank = req.rank
                dep.scheduler.leave(rank, req)
                dep.observer.count_abort(req.server, req)
                dep.pd.prealloc(rank)
            if req.p_server is not None and req.p_server is not srv and req.p_rank is not None:
                dep.scheduler.leave_prefill(req.p_rank, req)
            req.notify()
