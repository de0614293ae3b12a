"""Demand, capacity and consequence signals derived from a Dataset: pure, one value per grid step.

What SGLang serving is made of, as a queue: requests arrive (demand: how many, how long their prompts and
outputs, how much of each prompt the prefix cache already holds), wait for a slot, prefill, decode, leave.
Capacity is how fast each request is served once admitted and how many can be: per-request decode speed
(gen_throughput / num_running_reqs), prefill time, speculative accept length, the KV cache each running
request can have, accelerator health, PD KV transfers. Little's law ties them: requests in the system =
arrival rate x time in the system, so running requests, KV usage and the queue grow when either arrivals
or durations grow: they are consequences and never named as a cause.

Arrivals are not counted by SGLang's request counter (it counts at the finish); they follow from
conservation: arrivals in a step = requests finished in it + the change of requests in the system
(running and waiting, and in PD the decode server's preallocation and transfer queues).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from monitor.analyze.correlate import median
from monitor.analyze.model import Dataset, Values
from monitor.analyze.sli import SliTrack, step_means
from monitor.conventions.names import (
    STAGE_DECODE_WAITING,
    STAGE_PREFILL_BOOTSTRAP,
    STAGE_PREFILL_FORWARD,
    STAGE_PREFILL_TRANSFER,
)
from monitor.conventions.slis import ADMISSION_ROLES, QUEUE_TIME_SLI, REQUEST_ROLES

DEMAND = "demand"
CAPACITY = "capacity"
CONSEQUENCE = "consequence"
EVENT = "event"  # restarts, targets down, failures: counted, not levels
SYMPTOM = "symptom"  # the SLIs themselves: what hurt, never a cause nor a consequence to list
MIN_RUNNING = 0.5  # below this a per-running-request ratio is noise
MIN_ARRIVALS = 1e-3  # req/s below which Little's law gives no duration
PD_PILED = 5.0  # requests waiting for bootstrap: from here a PD prefill's time is read by Little's law
# A column of values, or a ratio's (numerator, denominator) columns.
Column = Values | tuple[Values, Values]


@dataclass(frozen=True)
class Signal:
    key: str
    label: str
    side: str  # demand | capacity | consequence | event
    unit: str
    values: Values
    # Which way is worse: +1 when a rise hurts (latency, failures), -1 when a fall does (speed, accept length).
    worse: int = 1
    # A ratio's numerator and denominator: smoothing averages each before dividing (a ratio of noisy
    # per-step values is noisier than either).
    parts: tuple[Values, Values] | None = None
    min_den: float = 1e-9
    # Estimated from other series rather than read (arrivals without SGLang's HTTP request counter).
    inferred: bool = False
    # A rate of independent events (requests arriving): averaged over S seconds it swings by sqrt(rate / S) on its
    # own, whatever a short baseline's few points happened to show.
    poisson: bool = False
    # A level the signal counts past whatever its rise (a temperature: the chip's own slowdown limit, where its
    # telemetry reports one).
    ceiling: float | None = None


def _add(*cols: Values) -> Values:
    """Per step sum of the columns that have a value there (None when none does)."""
    out: list[float | None] = []
    for vals in zip(*cols):
        present = [v for v in vals if v is not None]
        out.append(sum(present) if present else None)
    return tuple(out)


def _ratio(num: Values, den: Values, min_den: float = 1e-12) -> Values:
    return tuple(None if a is None or b is None or b < min_den else a / b for a, b in zip(num, den))


def values_of(col: Column, min_den: float = 1e-9) -> Values:
    """A column's values: a ratio's parts divided, plain values as they are."""
    if col and isinstance(col[0], tuple):  # a Values column holds numbers, parts hold two columns
        num, den = col  # type: ignore[misc]
        return _ratio(num, den, min_den)
    return col  # type: ignore[return-value]


def _map(vals: Values, fn: Callable[[float], float | None]) -> Values:
    return tuple(None if v is None else fn(v) for v in vals)


class Derive:
    """Reads a Dataset's series by role; each method one derived column (None where it cannot be had)."""

    def __init__(self, ds: Dataset, tracks: dict[str, SliTrack]) -> None:
        self.ds = ds
        self.tracks = tracks
        self.n = len(ds.times)
        self.none: Values = tuple(None for _ in ds.times)
        roles = {k.split(".")[1] for k in ds.series if k.startswith("load.")}
        # The servers that answer requests (mixed or PD decode); a router's merge reads as `all`.
        self.answering = [r for r in REQUEST_ROLES if r in roles] or [r for r in ("all",) if r in roles]
        self.pd = "decode" in roles and "prefill" in roles
        self._hist_means: dict[str, Values | None] = {}

    def get(self, key: str) -> Values:
        s = self.ds.series.get(key)
        if s is None:
            return self.none
        if key.startswith("rate.") and self._reset_steps:
            # A counter's rate over a step that holds a restart is unknown, not low: what it counted between
            # the last scrape and the restart is lost with the old process (a measured surge would read as
            # a drop to 0 there, and be dated after the restart).
            return tuple(None if i in self._reset_steps else v for i, v in enumerate(s.values))
        return s.values

    @cached_property
    def _reset_steps(self) -> frozenset[int]:
        s = self.ds.series.get("restarts")
        return frozenset(i for i, v in enumerate(s.values) if v) if s is not None else frozenset()

    def has(self, key: str) -> bool:
        s = self.ds.series.get(key)
        return s is not None and any(v is not None for v in s.values)

    def load(self, metric: str, roles: Sequence[str] | None = None) -> Values:
        cols = [self.get(f"load.{r}.{metric}") for r in (roles if roles is not None else self.answering)]
        return _add(*cols) if cols else self.none

    def load_max(self, metric: str, roles: Sequence[str] | None = None) -> Values:
        cols = [self.get(f"load.{r}.{metric}") for r in (roles if roles is not None else self.answering)]
        return tuple(max((v for v in vals if v is not None), default=None) for vals in zip(*cols)) if cols else self.none

    def in_system(self) -> Values:
        """Requests the answering servers hold: running and waiting, and in PD those preallocating or
        receiving their KV cache (a PD request reaches its decode server when it arrives)."""
        cols = [self.load("num_running_reqs"), self.load("num_queue_reqs")]
        if "decode" in self.answering:
            cols += [self.load("num_decode_prealloc_queue_reqs", ["decode"]),
                     self.load("num_decode_transfer_queue_reqs", ["decode"])]
        return _add(*cols)

    @cached_property
    def arrivals_measured(self) -> bool:
        """SGLang's HTTP request counter (counted as a request arrives, before any inference) covers the
        range at least as well as the inference from finished requests does."""
        measured = sum(v is not None for v in self.get("rate.arrived_total"))
        return measured > 0 and measured >= 0.9 * sum(v is not None for v in self._inferred_arrivals)

    def arrivals(self) -> Values:
        return self.get("rate.arrived_total") if self.arrivals_measured else self._inferred_arrivals

    @cached_property  # read by the measured check, arrivals and the queue wait
    def _inferred_arrivals(self) -> Values:
        """Finished requests plus the change of those held: a slower engine also grows what it holds for a while."""
        finished = self.get("rate.requests_total")
        held = self.in_system()
        step = self.ds.step
        out: list[float | None] = []
        for i in range(self.n):
            f, now, before = finished[i], held[i], held[i - 1] if i else None
            if f is None or now is None or before is None:
                out.append(None)
            else:  # a restart drops what the server held without finishing it: never below 0
                out.append(max(f + (now - before) / step, 0.0))
        return tuple(out)

    def completed(self) -> Values:
        """Requests finished without an abort, per second."""
        ok = tuple(None if a is None else a - (b or 0.0)
                   for a, b in zip(self.get("rate.requests_total"), self.get("rate.aborted_requests_total")))
        return _map(ok, lambda v: max(v, 0.0))

    def abandoned(self) -> Values:
        """Aborted requests per second that no PD transfer or bootstrap failure accounts for (the emulator
        counts those aborts too): the candidates for clients that gave up (diagnose gates them on one age)."""
        fails = _add(self.get("rate.transfer_failed_total"), self.get("rate.bootstrap_failed_total"))
        return tuple(None if a is None else max(a - (f or 0.0), 0.0)
                     for a, f in zip(self.get("rate.aborted_requests_total"), fails))

    def per_request(self, counter: str) -> tuple[Values, Values]:
        """A token counter per finished request (parts). SGLang 0.5.23 counts a request's prompt and generated
        tokens with the request itself, at its finish, aborted requests included (an abort finishes through
        `collect_metrics` too): dividing by the requests finished without an abort made every prompt of an
        abandoned request count for no request (a surge with half its requests abandoned read as prompts 2x
        longer)."""
        return self.get(f"rate.{counter}"), self.get("rate.requests_total")

    def cache_hit(self) -> tuple[Values, Values] | Values:
        """Cached over prompt tokens where the counter was read (parts), else the servers' gauge."""
        if self.has("rate.cached_tokens_total"):
            return self.get("rate.cached_tokens_total"), self.get("rate.prompt_tokens_total")
        roles = ["prefill"] if self.pd else self.answering
        return self.load_max("cache_hit_rate", roles)

    def decode_speed(self) -> tuple[Values, Values]:
        """Tokens per second each running request gets: gen_throughput / num_running_reqs (parts)."""
        return self.load("gen_throughput"), self.load("num_running_reqs")

    def sli_mean(self, sli: str) -> Values:
        """Mean latency of the events of each step: the SLI's track, or its histogram where the SLI has no
        target here (ITL is recorded whether or not anyone set a target for it)."""
        tr = self.tracks.get(sli)
        if tr is not None:
            return tr.mean_step if tr.spec.latency else self.none
        return self.hist_mean(sli) or self.none

    def hist_mean(self, key: str) -> Values | None:
        """Per step, the mean of the histogram's events in that step (None: the dataset has no such histogram)."""
        if key not in self._hist_means:
            hs = self.ds.hists.get(key)
            self._hist_means[key] = step_means(hs) if hs and any(h is not None for h in hs) else None
        return self._hist_means[key]

    def queue_wait(self, roles: Sequence[str]) -> Values:
        """Mean wait before the first forward: SGLang's queue_time histogram where it was read, else by
        Little's law from the queue length and the arrival rate."""
        measured = [self.get(f"queue_time.{r}") for r in roles if self.has(f"queue_time.{r}")]
        if measured:
            return tuple(max((v for v in vals if v is not None), default=None) for vals in zip(*measured))
        merged = self.hist_mean(QUEUE_TIME_SLI) if set(roles) <= set(ADMISSION_ROLES) else None
        if merged is not None:
            # A recording keeps the deployment's queue_time histogram merged over the roles that record it
            # (a mixed server, or the PD prefill server where requests are admitted): the measured wait.
            # Little's law on the queue gauge lags and overshoots while the queue swings.
            return merged
        return _ratio(self.load("num_queue_reqs", roles), self.arrivals(), 1e-6)

    def stage(self, role: str, stage: str, gauge: str | None = None) -> Column:
        """Mean seconds of a scheduler stage: its histogram where read, else Little's law on the gauge that
        counts the requests in it (as parts: requests in the stage / arrivals)."""
        if self.has(f"stage.{role}.{stage}"):
            return self.get(f"stage.{role}.{stage}")
        if gauge is None:
            return self.none
        return self.load(gauge, [role]), self.arrivals()

    # The PD stages around the prefill compute (pd_stages lists them all; prefill_time subtracts these).
    def pd_bootstrap(self) -> Column:
        return self.stage("prefill", STAGE_PREFILL_BOOTSTRAP, "num_prefill_bootstrap_queue_reqs")

    def pd_transfer(self) -> Column:
        return self.stage("prefill", STAGE_PREFILL_TRANSFER, "num_prefill_inflight_queue_reqs")

    def pd_decode_wait(self) -> Column:
        if self.has(f"stage.decode.{STAGE_DECODE_WAITING}"):
            return self.stage("decode", STAGE_DECODE_WAITING)
        return self.queue_wait(["decode"])

    def prefill_time(self) -> Column:
        """Prefill compute per request: the prefill_forward stage where read; on a mixed server TTFT minus the
        queue wait; in PD TTFT minus the other stages of its path (the measured prefill queue wait, the
        bootstrap, KV transfer and decode wait by Little's law: small next to the prefill) while few wait for
        bootstrap, and Little's law on the prefill server's running requests where PD_PILED or more do (at a
        light load it runs one or two: too few to average); without TTFT, Little's law on it throughout."""
        if self.pd:
            if self.has(f"stage.prefill.{STAGE_PREFILL_FORWARD}") or not any(v is not None for v in self.sli_mean("ttft")):
                return self.stage("prefill", STAGE_PREFILL_FORWARD, "num_running_reqs")
            others = [values_of(c, MIN_ARRIVALS) for c in (self.queue_wait(["prefill"]), self.pd_bootstrap(),
                                                             self.pd_transfer(), self.pd_decode_wait())]
            left = tuple(None if a is None else max(a - sum(o for o in rest if o is not None), 0.0)
                         for a, *rest in zip(self.sli_mean("ttft"), *others))
            # While requests pile up before the prefill (the decode server's KV slots are all held: bootstrap
            # waits for their preallocation), TTFT is mostly that wait, and what is left after subtracting a
            # Little's-law estimate of a growing queue is noise. The prefill server is busy then: Little's law
            # on its own running requests over the requests served holds (the queue is not part of it).
            boot = self.load("num_prefill_bootstrap_queue_reqs", ["prefill"])
            busy = _ratio(self.load("num_running_reqs", ["prefill"]), self.completed(), MIN_ARRIVALS)
            return tuple(b if q is not None and q >= PD_PILED and b is not None else r
                         for r, b, q in zip(left, busy, boot))
        for role in self.answering:
            if self.has(f"stage.{role}.{STAGE_PREFILL_FORWARD}"):
                return self.get(f"stage.{role}.{STAGE_PREFILL_FORWARD}")
        ttft, wait = self.sli_mean("ttft"), self.queue_wait(self.answering)
        return tuple(None if a is None else max(a - (b or 0.0), 0.0) for a, b in zip(ttft, wait))

    def kv_per_running(self) -> tuple[Values, Values]:
        """KV cache share per request holding KV (parts): flat when usage only follows the number running
        (Little's law); up when the same requests fill more of it (the cache shrank). A PD decode server also
        holds the KV it preallocated for the requests whose transfer it awaits: a slower prefill keeps more of
        them there, which is no smaller cache."""
        held = self.load("num_running_reqs")
        if "decode" in self.answering:
            held = _add(held, self.load("num_decode_transfer_queue_reqs", ["decode"]))
        return self.load_max("token_usage"), held

    def gateway_failed_share(self) -> Values:
        """Share of the gateway's requests that failed (the availability SLI's bad events) per step."""
        tr = self.tracks.get("availability")
        return tr.bad_step if tr is not None else self.none


def pd_stages(d: Derive) -> list[tuple[str, str, Column]]:
    """The parts of a PD request's TTFT, in the order it passes them: (key, label, mean seconds)."""
    return [
        ("pd.bootstrap", "bootstrap and decode KV preallocation (prefill_bootstrap)", d.pd_bootstrap()),
        ("pd.prefill_queue", "prefill queueing (queue_time, prefill)", d.queue_wait(["prefill"])),
        ("pd.prefill", "prefill compute (prefill_forward)", d.prefill_time()),
        ("pd.transfer", "KV transfer (prefill_transfer_kv_cache)", d.pd_transfer()),
        ("pd.decode_queue", "decode queueing (queue_time, decode)", d.pd_decode_wait()),
    ]


def _lowest(values: Values) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def ratio_signal(key: str, label: str, side: str, unit: str, parts: Column, worse: int = 1,
                 min_den: float = 1e-9) -> Signal:
    """A signal from (numerator, denominator) columns, or from plain values."""
    pair = parts if parts and isinstance(parts[0], tuple) else None
    return Signal(key, label, side, unit, values_of(parts, min_den), worse, pair, min_den)  # type: ignore[arg-type]


def unheld(kv: Signal | None, base_idx: Sequence[int]) -> Signal | None:
    """KV usage the running requests do not hold, as a share of the pool: usage less the running requests times
    what each held through the baseline (its median KV per running request). SGLang preallocates the pool, so a
    pool that lost tokens (a leak, pinned cache) shows here and not on the chip's HBM; requests being prefilled hold
    their prompts here too (diagnose: a slower prefill's share is bounded by Little's law)."""
    if kv is None or kv.parts is None:
        return None
    usage, running = kv.parts
    per = [u / r for i in base_idx if i < len(usage) and (u := usage[i]) is not None
           and (r := running[i]) is not None and r >= kv.min_den]
    if not per:
        return None
    a = median(per)
    values = tuple(None if u is None or r is None else u - a * r for u, r in zip(usage, running))
    return Signal("kv_unheld", "KV cache no running request holds", CAPACITY, "ratio", values)


def derive(ds: Dataset, tracks: dict[str, SliTrack]) -> dict[str, Signal]:
    """Every signal the dataset can give, by key (a signal with no value anywhere is left out)."""
    d = Derive(ds, tracks)
    out: list[Signal] = [
        Signal("arrivals", "arrival rate" if d.arrivals_measured else "arrival rate (inferred)", DEMAND, "req/s",
               d.arrivals(), inferred=not d.arrivals_measured, poisson=True),
        ratio_signal("prompt_len", "prompt length", DEMAND, "tokens", d.per_request("prompt_tokens_total")),
        ratio_signal("output_len", "output length", DEMAND, "tokens", d.per_request("generation_tokens_total")),
        ratio_signal("cache_hit", "prefix-cache hit rate", DEMAND, "ratio", d.cache_hit(), worse=-1),
        ratio_signal("decode_speed", "per-request decode speed", CAPACITY, "tokens/s", d.decode_speed(),
                     worse=-1, min_den=MIN_RUNNING),
        Signal("itl_mean", "ITL (mean)", CAPACITY, "s", d.sli_mean("itl")),
        ratio_signal("prefill_time", "prefill time per request", CAPACITY, "s", d.prefill_time(),
                     min_den=MIN_ARRIVALS),
        Signal("accept_length", "speculative accept length", CAPACITY, "tokens", d.load_max("spec_accept_length"),
               worse=-1),
        Signal("retractions", "retracted requests", EVENT, "req/s", d.get("rate.retracted_total")),
        ratio_signal("kv_per_running", "KV cache per running request", CAPACITY, "ratio", d.kv_per_running(),
                     min_den=MIN_RUNNING),
        Signal("temperature", "accelerator temperature (hottest chip)", CAPACITY, "°C", d.get("accel.temperature_max"),
               ceiling=_lowest(d.get("accel.temperature_slowdown_min"))),
        Signal("throttling", "accelerator chips throttling for heat", EVENT, "chips", d.get("accel.thermal_throttling")),
        Signal("hbm", "accelerator HBM free (fullest chip)", CAPACITY, "ratio",
               tuple(None if v is None else max(0.0, 1.0 - v) for v in d.get("accel.memory_ratio_max")), worse=-1),
        Signal("unhealthy", "accelerator chips not healthy", EVENT, "chips", d.get("accel.unhealthy")),
        Signal("kv_transfer_latency", "PD KV transfer time (mean)", CAPACITY, "ms", d.get("kv_transfer_latency")),
        Signal("transfer_failed", "PD KV transfer failures", EVENT, "req/s", d.get("rate.transfer_failed_total")),
        Signal("bootstrap_failed", "PD bootstrap failures", EVENT, "req/s", d.get("rate.bootstrap_failed_total")),
        Signal("router_errors", "gateway request errors", EVENT, "1/s", d.get("router_errors")),
        Signal("gateway_failed", "gateway failed requests (availability SLI)", EVENT, "ratio", d.gateway_failed_share()),
        Signal("gave_up", "requests abandoned", EVENT, "req/s", d.abandoned()),
        Signal("restarts", "restarts (counter resets)", EVENT, "count", d.get("restarts")),
        Signal("targets_down", "targets down", EVENT, "targets", d.get("targets_down")),
        Signal("tpot_mean", "TPOT (mean)", SYMPTOM, "s", d.sli_mean("tpot")),
        Signal("ttft_mean", "TTFT (mean)", SYMPTOM, "s", d.sli_mean("ttft")),
        Signal("running", "running requests", CONSEQUENCE, "requests", d.load("num_running_reqs")),
        Signal("queued", "queued requests", CONSEQUENCE, "requests", d.load("num_queue_reqs", d.answering + (
            ["prefill"] if d.pd else []))),
        Signal("token_usage", "KV token usage", CONSEQUENCE, "ratio", d.load_max("token_usage")),
        Signal("finished", "finished requests rate", CONSEQUENCE, "req/s", d.get("rate.requests_total")),
        Signal("throughput", "generation throughput", CONSEQUENCE, "tokens/s", d.load("gen_throughput")),
        Signal("utilization", "accelerator utilization (mean)", CONSEQUENCE, "ratio", d.get("accel.utilization_mean")),
        Signal("power", "accelerator power (mean)", CONSEQUENCE, "W", d.get("accel.power_mean")),
        Signal("aborted", "aborted requests rate", CONSEQUENCE, "req/s", d.get("rate.aborted_requests_total")),
    ]
    if d.pd:
        out += [ratio_signal(k, label, CONSEQUENCE, "s", col, min_den=MIN_ARRIVALS) for k, label, col in pd_stages(d)]
    return {s.key: s for s in out if any(v is not None for v in s.values)}
