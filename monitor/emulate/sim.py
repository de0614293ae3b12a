"""What an emulated deployment is made of: its server processes, their DP ranks and the requests in them.

These hold state; the parts of `engine.EmulatedDeployment` move it (scheduler.py, disaggregation.py,
ingress.py, prefix_cache.py) and observe it (observe.py, exposition.py). Every part imports this module,
so it imports none of them: only what a rank or process holds (radix_cache.py, state.py, request_log.py).

Decode is a rate per request (seconds per token) that its rank recomputes whenever the batch, the
prefills beside it or an incident changes; tokens are produced along that piecewise-linear curve
(`Req.tokens`), which is when the HTTP side streams them. A rank keeps the cumulative decode tokens at
each re-rate, so `gen_throughput` is the tokens produced over the last few seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from monitor.emulate.catalog import BY_NAME
from monitor.emulate.kv_budget import INIT_NEW_TOKEN_RATIO
from monitor.emulate.model import LatencyModel, RequestShape, decode_slots, prefill_slots
from monitor.emulate.radix_cache import PrefixCache
from monitor.emulate.request_log import RequestLog
from monitor.emulate.state import MetricStore
from monitor.emulate.topology import ServerSpec
from monitor.emulate.wire import ClientRequest

THROUGHPUT_WINDOW = 5.0  # gen_throughput: tokens produced over about the last decode-log interval
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
    promise: int = 0  # the most KV it can ever hold (prompt and all it may write), counted on ...
    promised_on: RankSim | None = None  # ... this unified rank while it runs there
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
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO  # share of max_new_tokens a running request is expected to write
        self.ratio_t = 0.0  # when the ratio was last decayed ...
        self.step_seconds = 0.0  # ... and the decode step time since then
        self.retry_pending = False  # a waiting request the pool's tokens held back is looked at again soon
        self.promised = 0  # the running requests' promises (Req.promise): a pool that holds them all needs no count
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

    def decode_tokens(self, t: float) -> float:
        """Cumulative decode tokens of the rank at `t` >= its last re-rate (runs are linear in between)."""
        return self.tokens_closed + sum((t - r.mark_t) / r.rate for r in self.decoding if r.rate > 0)

    def record_throughput(self, now: float) -> None:
        """A re-rate at `now`: keep the cumulative tokens there (and the points of the last window)."""
        hist = self.history
        hist.append((now, self.decode_tokens(now)))
        while len(hist) > 2 and hist[1][0] <= now - THROUGHPUT_WINDOW:
            hist.popleft()

    def gen_throughput(self, now: float) -> float:
        """Tokens the rank produced per second over the last THROUGHPUT_WINDOW seconds (or its life)."""
        points = self.history
        if not points:
            return 0.0
        start = now - THROUGHPUT_WINDOW
        if start <= points[0][0]:
            t0, c0 = points[0]
        elif start >= points[-1][0]:
            t0, c0 = start, self.decode_tokens(start)
        else:  # linear between two re-rates
            i = next(j for j in range(1, len(points)) if points[j][0] > start)
            (ta, ca), (tb, cb) = points[i - 1], points[i]
            t0, c0 = start, ca + (cb - ca) * (start - ta) / (tb - ta)
        if now - t0 <= 0:
            return sum(1.0 / r.rate for r in self.decoding if r.rate > 0)
        return max(self.decode_tokens(now) - c0, 0.0) / (now - t0)


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
        self.ranks = [
            RankSim(i, self.spec.rank_labels(i), cap, self.pool_tokens(cap), min(self.reference, cap))
            for i, cap in enumerate(slots)
        ]
        for rank in self.ranks:
            for labels in rank.labels:
                seed_scheduler_counters(rank.store, self.spec, labels)
        self._rr = 0

    def pool_tokens(self, slots: int) -> int:
        """Each rank's KV pool: `--max-total-tokens` where the launch sets it (SGLang's own flag, per scheduler),
        else room for every slot's nominal prompt and answer and a quarter more (SGLang sizes it from
        --mem-fraction-static, which the emulator cannot weigh): the slots bind before the tokens."""
        given = int(self.spec.launch.get("max_total_tokens") or 0)
        return given or max(slots * int((self.model.input_tokens + self.model.output_tokens) * 1.25), 4096)

    def next_rank(self) -> RankSim:
        rank = self.ranks[self._rr % len(self.ranks)]
        self._rr += 1
        return rank

    def base_labels(self) -> dict[str, str]:
        return {"engine_type": self.spec.engine_type, "model_name": self.spec.model_name}


def seed_scheduler_counters(store: MetricStore, spec: ServerSpec, labels: dict[str, str]) -> None:
    """Scheduler counters that SGLang creates (at zero) when the scheduler starts."""
    base = {"engine_type": spec.engine_type, "model_name": spec.model_name, **labels}
    for fam in BY_NAME.values():
        if fam.type != "counter" or fam.kind != "sched" or spec.role not in fam.roles:
            continue
        for extra in fam.extra or ((),):
            store.touch(fam.name, {**base, **dict(extra)})
