"""What SGLang's metric collectors observe, and when: the counters and histograms of each emulated process.

Tokenizer side, as SGLang's TokenizerManager does: TTFT at the first token, ITL per constant-rate run of
tokens (SGLang's batched observe: the bucket of interval/n gets n, the sum the interval), TPOT per request
as (finish - first token) / (completion_tokens - 1), E2E and the counters at the finish, aborts counted.
A PD prefill server's tokenizer finishes the request when its KV left: E2E and the counters, no TTFT/TPOT/ITL.

Scheduler side, per DP rank and PP stage. Stages are observed where SGLang 0.5.23 observes them
(observability/req_time_stats.py, `per_stage_req_latency_seconds` stages with metrics_is_observed):
unified and PD prefill `prefill_forward`; PD prefill `prefill_bootstrap` (bootstrap queue -> waiting queue:
the handshake, which waits for the decode side's KV preallocation) and `prefill_transfer_kv_cache`; PD
decode `decode_bootstrap` (prealloc queue -> transfer queue), `decode_transferred` (transfer queue ->
waiting queue) and `decode_waiting` (waiting -> first forward, also its `queue_time_seconds`).
`prefill_waiting` is not a metric there (queue_time is). Retractions, failed bootstraps and failed KV
transfers are counted as SGLang counts them.

And the request-metrics log line (`--export-metrics-to-file`) of the server that answers the client.

The SLI histograms follow the SLI records (`conventions.slis`): each moment above observes a measure of the
request (`Measure`: TTFT at the first token, ITL per run, TPOT and E2E at the finish, the queue wait at the
first forward), into every record of that measure, on the record's family with the deployment's buckets (or
SGLang's fixed ones, for a record no launch flag sets). No SLI key or family is spelled here; a measure with
no observation point is refused at import.

`Observer` sees the deployment as `ObserverHost` (its clock, buckets and incident effects), not as
`engine.EmulatedDeployment`, which imports this module. The counters a fresh scheduler starts with at zero
are sim.py's (`seed_scheduler_counters`): a new process holds them before anything is observed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from monitor.conventions.slis import (
    E2E_LATENCY,
    FIRST_TOKEN_LATENCY,
    INTER_TOKEN_LATENCY,
    MEASURES,
    OUTPUT_TOKEN_LATENCY,
    QUEUE_WAIT,
    RECORDS_OF,
    SLI,
    Measure,
)
from monitor.emulate.catalog import BY_NAME, STAGE_BUCKETS, TOKEN_BUCKETS
from monitor.emulate.request_log import record
from monitor.emulate.state import MetricStore

if TYPE_CHECKING:
    from monitor.emulate.incidents import Effects
    from monitor.emulate.sim import RankSim, Req, ServerSim

HTTP_LABELS = {"endpoint": "/v1/chat/completions", "method": "POST"}  # synthetic requests' endpoint
# Where each measure is observed (the methods of `Observer` that call `_measure` with it).
OBSERVED_AT: dict[Measure, str] = {
    FIRST_TOKEN_LATENCY: "first_token", INTER_TOKEN_LATENCY: "itl", OUTPUT_TOKEN_LATENCY: "finished",
    E2E_LATENCY: "finished, prefill_finished", QUEUE_WAIT: "prefill, decode_transferred",
}
if _unobserved := [m.name for m in MEASURES if m not in OBSERVED_AT]:
    raise ValueError(f"emulator: no observation point in monitor/emulate/observe.py for the measure(s) {_unobserved}")


class ObserverHost(Protocol):
    """What `Observer` reads of its deployment (engine.EmulatedDeployment)."""

    now: float
    wall_start: float  # the wall time of emulated 0 (the request log's receipt times)
    buckets: dict[str, tuple[float, ...]]  # the deployment's SLI buckets, by SLI

    def effects(self, role: str) -> Effects: ...


class Observer:
    """Records one deployment's metrics into its servers' and ranks' stores as the scheduler moves."""

    def __init__(self, dep: ObserverHost) -> None:
        self.dep = dep

    # --- tokenizer ---------------------------------------------------------------------------
    def http_request(self, srv: ServerSim) -> None:
        """A synthetic request reached `srv` (real ones are counted by the HTTP side)."""
        srv.store.inc("sglang:http_requests", HTTP_LABELS)

    def _edges(self, sli: SLI) -> tuple[float, ...]:
        """The record's buckets on this deployment: its launch flag's (the config's), or SGLang's fixed ones."""
        return self.dep.buckets[sli.key] if sli.bucket_flag is not None else sli.buckets

    def _measure(self, store: MetricStore, measure: Measure, labels: dict[str, str], value: float, *,
                 weight: float = 1.0, sum_add: float | None = None, prefill: bool = False) -> None:
        """One observation of `measure` into every SLI record of it (`prefill`: those a PD prefill server has)."""
        for sli in RECORDS_OF[measure]:
            if not prefill or sli.prefill_records:
                store.observe(sli.family, labels, self._edges(sli), value, weight, sum_add)

    def first_token(self, srv: ServerSim, req: Req) -> None:
        labels = {**srv.base_labels(), "is_streaming": _flag(req.shape.streaming)}
        self._measure(srv.store, FIRST_TOKEN_LATENCY, labels, req.t_first - req.created)

    def itl(self, srv: ServerSim, interval: float, n: int) -> None:
        """`n` tokens over `interval` seconds at one rate (SGLang's batched ITL observe)."""
        self._measure(srv.store, INTER_TOKEN_LATENCY, srv.base_labels(), interval / n, weight=n, sum_add=interval)

    def finished(self, srv: ServerSim, req: Req, *, end: float, logged: bool = True) -> None:
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
            accept = self.dep.effects(srv.spec.role).accepted(req.accept)
            store.inc("sglang:spec_verify_calls", base, math.ceil(req.produced / accept))
        store.observe("sglang:prompt_tokens_histogram", base, TOKEN_BUCKETS, shape.prompt_tokens)
        store.observe("sglang:uncached_prompt_tokens_histogram", base, TOKEN_BUCKETS, shape.uncached_tokens)
        store.observe("sglang:generation_tokens_histogram", base, TOKEN_BUCKETS, req.produced)
        self._measure(store, E2E_LATENCY, ls, e2e)
        tpot = request_tpot(req)
        if tpot is not None:
            self._measure(store, OUTPUT_TOKEN_LATENCY, ls, tpot)
        if not req.real:
            if shape.finish_reason == "abort" and not req.abort_message:
                # A synthetic client drawn to abandon its request; an abort where the request was (`aborted`)
                # counts itself.
                store.inc("sglang:num_aborted_requests", base)
            status = "499" if shape.finish_reason == "abort" else "200"
            store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": status})
        if logged:
            first = req.t_first - req.created if req.t_first and req.produced else None
            self.log_request(srv, req, finish_reason=shape.finish_reason, completion_tokens=req.produced,
                             first_token_latency=first, e2e_latency=e2e, tpot=tpot,
                             **({"abort": (req.abort_message, req.abort_status)} if req.abort_message else {}))

    def aborted(self, srv: ServerSim, req: Req, *, logged: bool) -> None:
        """An abort where the request was: counted, then finished as SGLang finishes it."""
        srv.store.inc("sglang:num_aborted_requests", srv.base_labels())
        self.finished(srv, req, end=self.dep.now, logged=logged)

    def count_abort(self, srv: ServerSim, req: Req, status: str = "499") -> None:
        base = srv.base_labels()
        srv.store.inc("sglang:num_aborted_requests", base)
        srv.store.inc("sglang:num_requests", {**base, "is_streaming": _flag(req.shape.streaming)})
        if not req.real:
            srv.store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": status})

    def prefill_finished(self, psrv: ServerSim, req: Req) -> None:
        """A PD prefill server's tokenizer finishes the request after the KV left: no TTFT/TPOT/ITL."""
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
        self._measure(store, E2E_LATENCY, ls, self.dep.now - req.p_created, prefill=True)
        if not req.real:
            store.inc("sglang:http_responses", {**HTTP_LABELS, "status_code": "200"})

    def log_request(self, srv: ServerSim, req: Req, **outcome: Any) -> None:
        """One line of SGLang's request-metrics log on `srv`, when it writes one; `outcome`: how it ended."""
        if srv.log is None or not req.log_metrics:
            return
        shape = req.shape
        max_new = req.client.max_new_tokens if req.client is not None else shape.completion_tokens
        srv.log.write(record(
            rid=req.rid, streaming=shape.streaming, max_new_tokens=max_new or shape.completion_tokens,
            prompt_tokens=shape.prompt_tokens, cached_tokens=shape.cached_tokens,
            received_wall=self.dep.wall_start + req.created, queue_time=req.queue_time, **outcome))

    # --- scheduler ---------------------------------------------------------------------------
    def prefill(self, srv: ServerSim, rank: RankSim, req: Req, seconds: float) -> None:
        """One prefill admitted on `rank` (unified or PD prefill), taking `seconds`."""
        shape = req.shape
        for labels in rank.labels:
            lab = {**srv.base_labels(), **labels}
            self._measure(rank.store, QUEUE_WAIT, lab, req.queue_time, prefill=srv.spec.role == "prefill")
            stage(rank.store, lab, "prefill_forward", seconds)
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "prefill_compute"}, shape.uncached_tokens)
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "prefill_cache"}, shape.cached_tokens)
            rank.store.inc("sglang:prefill_effective_tokens", {**lab, "mode": "input"}, shape.uncached_tokens)
            rank.store.inc("sglang:prefill_effective_tokens", {**lab, "mode": "device_hit"}, shape.cached_tokens)

    def decode_counters(self, srv: ServerSim, rank: RankSim, req: Req) -> None:
        accepted = self.dep.effects(srv.spec.role).accepted(req.accept) if req.accept else 0.0
        steps = math.ceil(req.produced / accepted) if accepted else req.produced
        for labels in rank.labels:
            lab = {**srv.base_labels(), **labels}
            rank.store.inc("sglang:realtime_tokens", {**lab, "mode": "decode"}, req.produced)
            rank.store.inc("sglang:cuda_graph_passes", {**lab, "mode": "decode_cuda_graph"}, steps)

    def retracted(self, srv: ServerSim, rank: RankSim, req: Req, done: int) -> None:
        """`req` was retracted after `done` output tokens (SGLang's retract_decode counters)."""
        for labels in rank.labels:
            lab = {**srv.base_labels(), **labels}
            rank.store.inc("sglang:num_retracted_requests", lab)
            rank.store.inc("sglang:num_retracted_input_tokens", lab, req.shape.prompt_tokens)
            rank.store.inc("sglang:num_retracted_output_tokens", lab, done)

    def decode_bootstrap(self, srv: ServerSim, rank: RankSim, req: Req) -> None:
        """PD decode: a slot was preallocated (prealloc queue -> transfer queue)."""
        for labels in rank.labels:
            stage(rank.store, {**srv.base_labels(), **labels}, "decode_bootstrap", self.dep.now - req.created)

    def prefill_bootstrapped(self, psrv: ServerSim, prank: RankSim, req: Req) -> None:
        """PD prefill: the handshake is done (bootstrap queue -> waiting queue)."""
        now = self.dep.now
        for labels in prank.labels:
            lab = {**psrv.base_labels(), **labels}
            edges = BY_NAME["sglang:kv_transfer_bootstrap_ms"].buckets
            prank.store.observe("sglang:kv_transfer_bootstrap_ms", lab, edges, (now - req.p_created) * 1000)
            edges = BY_NAME["sglang:kv_transfer_alloc_ms"].buckets
            prank.store.observe("sglang:kv_transfer_alloc_ms", lab, edges,
                                max(req.t_prealloc - req.p_created, 0.0) * 1000)
            stage(prank.store, lab, "prefill_bootstrap", now - req.p_created)

    def kv_transferred(self, psrv: ServerSim, prank: RankSim, req: Req) -> None:
        """The KV transfer finished: SGLang observes it now, on the prefill side."""
        seconds, mb = req.kv_seconds, req.kv_mb
        for labels in prank.labels:
            lab = {**psrv.base_labels(), **labels}
            for name, value in (("sglang:kv_transfer_latency_ms", seconds * 1000),
                                ("sglang:kv_transfer_speed_gb_s", mb / 1024 / seconds),
                                ("sglang:kv_transfer_total_mb", mb)):
                prank.store.observe(name, lab, BY_NAME[name].buckets, value)
            stage(prank.store, lab, "prefill_transfer_kv_cache", seconds)

    def decode_transferred(self, srv: ServerSim, rank: RankSim, req: Req, wait: float) -> None:
        """PD decode: the KV is here (transfer queue -> waiting queue); the first forward comes `wait` later."""
        for labels in rank.labels:
            lab = {**srv.base_labels(), **labels}
            stage(rank.store, lab, "decode_transferred", self.dep.now - req.t_prealloc)
            stage(rank.store, lab, "decode_waiting", wait)
            self._measure(rank.store, QUEUE_WAIT, lab, wait)

    def transfer_failed(self, req: Req) -> None:
        """Both sides count the failed transfer (SGLang's prefill.py and decode.py); the decode server's
        client (and its request log) sees an error before the first token."""
        assert req.p_rank is not None and req.p_server is not None and req.server is not None
        assert req.rank is not None
        for srv, r in ((req.p_server, req.p_rank), (req.server, req.rank)):
            for labels in r.labels:
                r.store.inc("sglang:num_transfer_failed_reqs", {**srv.base_labels(), **labels})
        self.count_abort(req.server, req, "500")
        self.log_request(req.server, req, finish_reason="abort", completion_tokens=0, first_token_latency=None,
                         e2e_latency=self.dep.now - req.created, tpot=None, abort=("KV transfer failed", 500))

    def bootstrap_failed(self, req: Req) -> None:
        """The half (or halves) of a PD request whose bootstrap timed out."""
        for srv, rank in ((req.server, req.rank), (req.p_server, req.p_rank)):
            if srv is not None and rank is not None:
                for labels in rank.labels:
                    rank.store.inc("sglang:num_bootstrap_failed_reqs", {**srv.base_labels(), **labels})


def request_tpot(req: Req) -> float | None:
    """SGLang's per-request TPOT: only for stop/length finishes with more than one token."""
    if req.shape.finish_reason in ("stop", "length") and req.produced > 1 and req.t_end > req.t_first:
        return (req.t_end - req.t_first) / (req.produced - 1)
    return None


def stage(store: MetricStore, labels: dict[str, str], name: str, seconds: float) -> None:
    """One `sglang:per_stage_req_latency_seconds` observation of the scheduler stage `name`."""
    store.observe("sglang:per_stage_req_latency_seconds", {**labels, "stage": name}, STAGE_BUCKETS, max(seconds, 0.0))


def _flag(v: bool) -> str:
    return "true" if v else "false"
