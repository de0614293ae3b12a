"""A bench_serving-shaped client inside the engine (no HTTP): `concurrency` requests always in flight.

It submits straight to `EmulatedDeployment.submit` the way the gateway would (PD: one half to a prefill
and one to a decode server, paired by bootstrap_room), so hours of emulated time run in seconds.
"""

from __future__ import annotations

import itertools
import random

from monitor.emulate.engine import EmulatedDeployment, Req
from monitor.emulate.wire import CACHE_BLOCK, ClientRequest


class ClosedLoop:
    def __init__(self, dep: EmulatedDeployment, concurrency: int, input_tokens: int, output_tokens: int,
                 *, range_ratio: float = 1.0, prefix_share: float = 0.0, seed: int = 0) -> None:
        self.dep = dep
        self.prefix_share = prefix_share
        self.rng = random.Random(seed)
        self.input_tokens, self.output_tokens, self.range_ratio = input_tokens, output_tokens, range_ratio
        self.rooms = itertools.count(1)
        self.done: list[Req] = []
        self._seen: set[int] = set()
        self._rr = itertools.count()
        unified = [s for s in dep.servers if s.spec.role == "server"]
        self.unified = unified
        self.prefill = [s for s in dep.servers if s.spec.role == "prefill"]
        self.decode = [s for s in dep.servers if s.spec.role == "decode"]
        for _ in range(concurrency):
            self.send()

    def _length(self, full: int) -> int:
        return max(1, round(full * self.rng.uniform(self.range_ratio, 1.0)))

    def send(self) -> None:
        i = next(self._rr)
        room = next(self.rooms)
        prompt = self._length(self.input_tokens)
        shared = int(prompt * self.prefix_share) // CACHE_BLOCK  # the same leading blocks in every prompt
        blocks = tuple(range(shared)) + tuple(self.rng.getrandbits(60) for _ in range(prompt // CACHE_BLOCK - shared))
        client = ClientRequest(endpoint="/generate", prompt_tokens=prompt, blocks=blocks,
                               max_new_tokens=self._length(self.output_tokens), ignore_eos=True, stream=True,
                               rid=f"loop-{room}", bootstrap_room=room if self.decode else None,
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
