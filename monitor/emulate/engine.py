"""Discrete-event emulation of one deployment's SGLang servers: one scheduler for every request.

`EmulatedDeployment.advance(seconds)` runs every event up to `now + seconds`; the same seed and the same
total time give the same numbers however the time is cut. The deployment holds the clock, the random
stream, the servers and the requests in flight; its parts move them:
  - ingress.py: synthetic Poisson arrivals and real requests from the HTTP side (`submit`, PD halves
    paired by `bootstrap_room`), and the ends that come early (client gone, bootstrap timeout, restart);
  - scheduler.py: admission to each DP rank's slots, prefill, the decode batch and its step loop;
  - disaggregation.py: PD preallocation, bootstrap, prefill and the KV transfer between the two sides;
  - prefix_cache.py: each rank's KV pool (admission by tokens, retraction), the prefix cache, token usage;
  - incidents.py: what an active incident does to step times, accept length, slots, transfers, chips;
  - observe.py: the counters and histograms SGLang observes, and the request-metrics log;
  - exposition.py: the gauges read off a rank when scraped, and what /metrics renders.
Every random draw comes from the one `rng`, in event order, so a seed fixes a whole run.

Each part takes the deployment as a Protocol of its own (`SchedulerHost`, `KVHost`, `PDHost`, `IngressHost`,
`ObserverHost`, `ScrapedDeployment`): what it reads and writes of it, so that no part imports this module.
"""

from __future__ import annotations

import heapq
import itertools
import random
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monitor.config import Config, Deployment
from monitor.conventions.slis import DEFAULT_BUCKETS, SLI_FAMILIES
from monitor.emulate.disaggregation import PDFlow
from monitor.emulate.exposition import rank_gauges
from monitor.emulate.incidents import Effects, Incident, effects
from monitor.emulate.ingress import Ingress, SubmitError
from monitor.emulate.model import build_model, nominal_rate, recipe_concurrency, reference_batch
from monitor.emulate.observe import Observer, request_tpot
from monitor.emulate.prefix_cache import KVCache
from monitor.emulate.request_log import RequestLog
from monitor.emulate.scheduler import Scheduler
from monitor.emulate.sim import RankSim, Req, ServerSim
from monitor.emulate.topology import DeploymentLayout, plan
from monitor.emulate.wire import ClientRequest

__all__ = ["EmulatedDeployment", "RankSim", "Req", "ServerSim", "SubmitError"]


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
        self.server_of: dict[int, ServerSim] = {}  # id(rank) -> its server, for the ranks alive now
        self._index_ranks()
        if request_log_dir is not None:
            for srv in self.servers:
                if srv.spec.role != "prefill":
                    srv.log = RequestLog(Path(request_log_dir) / srv.spec.name)
        self._events: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = itertools.count()
        self.live: dict[str, Req] = {}  # requests in flight by rid
        self._live = self.live  # the same dict, under the name earlier callers read
        self.finished = 0
        self.real_finished = 0
        self.observer = Observer(self)
        self.kv = KVCache(self)
        self.scheduler = Scheduler(self)
        self.pd = PDFlow(self)
        self.ingress = Ingress(self)
        self.ingress.kick_arrivals()

    def _index_ranks(self) -> None:
        self.server_of = {id(r): s for s in self.servers for r in s.ranks}

    # --- clock ---------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        self.advance_to(self.now + max(seconds, 0.0))

    def advance_to(self, end: float) -> None:
        while self._events and self._events[0][0] <= end:
            t, _, fn, arg = heapq.heappop(self._events)
            self.now = max(self.now, t)
            fn(arg)
            self.scheduler.flush()
        self.now = max(self.now, end)

    def next_event_time(self) -> float | None:
        return self._events[0][0] if self._events else None

    def schedule(self, t: float, fn: Callable[[Any], None], arg: Any) -> None:
        """Run `fn(arg)` at emulated time `t` (events at the same time run in the order scheduled)."""
        heapq.heappush(self._events, (t, next(self._seq), fn, arg))

    # --- incidents -----------------------------------------------------------------------------
    def effects(self, role: str) -> Effects:
        return effects(self.incidents, role, self.now)

    def add_incident(self, inc: Incident) -> None:
        self.incidents.append(inc)
        if inc.kind == "restart":
            self.schedule(max(inc.start, self.now), self._restart, inc)
        # Rates change when it starts and when it ends (and along a ramp); arrivals may start (queue_buildup).
        for t in inc.change_points():
            self.schedule(max(t, self.now), self._effects_changed, None)

    def clear_incidents(self) -> None:
        self.incidents.clear()
        self._effects_changed(None)
        self.scheduler.flush()

    def _effects_changed(self, _: Any) -> None:
        for srv in self.servers:
            for rank in srv.ranks:
                self.scheduler.touch(rank)
                if srv.spec.role == "server":
                    self.kv.retract_excess(srv, rank)
                self.scheduler.admit_any(srv, rank)
        self.ingress.kick_arrivals()

    def _restart(self, inc: Incident) -> None:
        for srv in self.servers:
            if inc.applies_to(srv.spec.role):
                self.ingress.kill_requests(srv)
                srv.reset(next(self._pids), self.now)
        self._index_ranks()

    # --- the HTTP side -------------------------------------------------------------------------
    def submit(self, srv: ServerSim, client: ClientRequest) -> Req:
        """A request that reached `srv` over HTTP joins the scheduler now. Listeners are called on changes."""
        return self.ingress.submit(srv, client)

    def client_gone(self, req: Req) -> None:
        """The client hung up before the end: SGLang aborts the request a little later."""
        self.ingress.client_gone(req)

    @staticmethod
    def request_tpot(req: Req) -> float | None:
        """SGLang's per-request TPOT: only for stop/length finishes with more than one token."""
        return request_tpot(req)

    def rank_gauges(self, srv: ServerSim, rank: RankSim) -> dict[str, float]:
        """Scheduler gauges of one rank right now (what its last log_stats would have written)."""
        return rank_gauges(self, srv, rank)

    def state(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment.name,
            "now": self.now,
            "arrival_rate": self.model.arrival_rate,
            "tpot_median_seconds": self.model.tpot_median,
            "finished_requests": self.finished,
            "real_finished_requests": self.real_finished,
            "real_in_flight": sum(1 for r in self.live.values() if r.real),
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
