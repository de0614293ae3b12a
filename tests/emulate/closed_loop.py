"""A bench_serving-shaped client inside the engine (no HTTP): `shape.concurrency` requests always in flight.

It submits straight to `EmulatedDeployment.submit` the way the gateway would (PD: one half to a prefill
and one to a decode server, paired by bootstrap_room), with the lengths and prefix share the demo's load
generator uses (`monitor.emulate.loadgen`), so hours of emulated time run in seconds.
"""

from __future__ import annotations

import itertools
import random

from monitor.emulate.engine import EmulatedDeployment, Req
from monitor.emulate.loadgen import LoadShape, draw_length
from monitor.emulate.wire import CACHE_BLOCK, ClientRequest


class ClosedLoop:
    def __init__(self, dep: EmulatedDeployment, shape: LoadShape, *, seed: int = 0) -> None:
        self.dep = dep
        self.shape = shape
        self.rng = random.Random(seed)
        self.rooms = itertools.count(1)
        self.done: list[Req] = []
        self._seen: set[int] = set()
        self._rr = itertools.count()
        self.unified = [s for s in dep.servers if s.spec.role == "server"]
        self.prefill = [s for s in dep.servers if s.spec.role == "prefill"]
        self.decode = [s for s in dep.servers if s.spec.role == "decode"]
        for _ in range(shape.concurrency):
            self.send()

    def send(self) -> None:
        i = next(self._rr)
        room = next(self.rooms)
        prompt = draw_length(self.rng, self.shape.input_tokens, self.shape.range_ratio)
        shared = int(prompt * self.shape.prefix_share) // CACHE_BLOCK  # the same leading blocks in every prompt
        blocks = tuple(range(shared)) + tuple(self.rng.getrandbits(60) for _ in range(prompt // CACHE_BLOCK - shared))
        client = ClientRequest(endpoint="/generate", prompt_tokens=prompt, blocks=blocks,
                               max_new_tokens=draw_length(self.rng, self.shape.output_tokens, self.shape.range_ratio),
                               ignore_eos=True, stream=True, rid=f"loop-{room}",
                               bootstrap_room=room if self.decode else None,
                               bootstrap_host="127.0.0.1" if self.decode else None)
        if self.unified:
            req = self.dep.submit(self.unified[i % len(self.unified)], client)
        else:
            self.dep.submit(self.prefill[i % len(self.prefill)], client)
            req = self.dep.submit(self.decode[i % len(self.decode)], client)
        req.listeners.append(lambda r=req: self._changed(r))

    def _changed(self, req: Req) -> None:
        if req.finished and id(req) not in self._seen:
            self._seen.add(id(req))
            self.done.append(req)
            self.send()
