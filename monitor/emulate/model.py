"""Latency and load model of one deployment, calibrated from its recipe row.

The recipe's TPOT was measured at its bench_serving concurrency, so that is the reference: at that
decode batch per rank a request's base TPOT is lognormal with its median at 66 % of the target and a
spread (sigma 0.09) that puts almost none over it, so the batch swings of round-robin DP dispatch
still leave the burn well under 0.5x. The scheduler (scheduler.py) multiplies the base by what its rank does right now: the decode batch relative
to the reference (a bigger batch makes every step slower), prefills running beside decode (chunked
prefill shares the forward; a queue keeps a saturated rank prefilling), incidents; speculative decoding divides by the accepted length relative
to the recipe's. TTFT is queueing plus prefill of the uncached prompt tokens; in PD it also carries
bootstrap and KV transfer.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from monitor.config import Deployment
from monitor.emulate.topology import ServerSpec

TPOT_MEDIAN_SHARE = 0.66  # of the target
TPOT_SIGMA = 0.09
ACCEPT_SIGMA = 0.05
TTFT_SIGMA = 0.15
NOMINAL_LOAD = 0.4  # share of running slots busy when the recipe gives no concurrency
# A decode step reads every weight once plus each running request's KV: each request in the batch adds
# this share of the weight-only step time.
REQUEST_STEP_COST = 0.04
# Prefill batches run between decode steps: step time + this x (requests in prefill / slots). Under a
# queue every freed slot is refilled at once, so a saturated rank is always prefilling something; a
# request waiting for a slot it cannot get costs nothing.
PREFILL_INTERFERENCE = 1.0
DEFAULT_INPUT, DEFAULT_OUTPUT = 1024, 256
PREFILL_TOKENS_PER_SECOND = 12000.0  # used only when the recipe gives no TTFT at all
KV_MB_PER_TOKEN = 0.07
KV_GBPS_MEDIAN = 20.0
PREFILL_SLOTS_DEFAULT = 8


@dataclass(frozen=True)
class RequestShape:
    prompt_tokens: int
    completion_tokens: int  # tokens it would produce if not aborted
    cached_tokens: int
    streaming: bool
    finish_reason: str  # stop | length | abort
    abort_fraction: float  # share of completion produced before an abort
    structured: bool

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True)
class LatencyModel:
    tpot_median: float
    ttft_nominal: float  # prefill time at the nominal uncached prompt
    input_tokens: int
    output_tokens: int
    prefix_hit: float
    accept_length: float  # 0 without speculative decoding
    draft_tokens: int
    arrival_rate: float  # requests per second into the whole deployment
    streaming_share: float = 0.7
    abort_probability: float = 0.005
    stop_share: float = 0.1
    structured_share: float = 0.04

    @property
    def uncached_nominal(self) -> float:
        return max(self.input_tokens * 0.9 * (1 - self.prefix_hit), 1.0)

    def sample_shape(self, rng: random.Random, radix_cache: bool = True) -> RequestShape:
        prompt = max(1, round(self.input_tokens * rng.uniform(0.8, 1.0)))
        completion = max(2, round(self.output_tokens * rng.uniform(0.7, 1.0)))
        hit = min(max(rng.gauss(self.prefix_hit, 0.03), 0.0), 0.99) if self.prefix_hit and radix_cache else 0.0
        aborted = rng.random() < self.abort_probability
        reason = "abort" if aborted else ("stop" if rng.random() < self.stop_share else "length")
        return RequestShape(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=int(prompt * hit),
            streaming=rng.random() < self.streaming_share,
            finish_reason=reason,
            abort_fraction=rng.uniform(0.05, 0.9) if aborted else 1.0,
            structured=rng.random() < self.structured_share,
        )

    def prefill_seconds(self, rng: random.Random, uncached: int, factor: float = 1.0) -> float:
        size = 0.15 + 0.85 * uncached / self.uncached_nominal
        return self.ttft_nominal * size * rng.lognormvariate(0.0, TTFT_SIGMA) * factor

    def accept_sample(self, rng: random.Random) -> float:
        if not self.accept_length:
            return 0.0
        return min(max(self.accept_length * rng.lognormvariate(0.0, ACCEPT_SIGMA), 1.0), float(self.draft_tokens))

    def base_tpot(self, rng: random.Random, accept: float = 0.0) -> float:
        """One request's TPOT at the reference batch with nothing else going on (its own draw)."""
        spec = self.accept_length / accept if accept and self.accept_length else 1.0
        return self.tpot_median * spec * rng.lognormvariate(0.0, TPOT_SIGMA)

    def kv_transfer(self, rng: random.Random, prompt_tokens: int) -> tuple[float, float]:
        """(seconds, MB) to move one request's KV cache from prefill to decode."""
        mb = prompt_tokens * KV_MB_PER_TOKEN
        gbps = KV_GBPS_MEDIAN * rng.lognormvariate(0.0, 0.2)
        return 0.002 + mb / 1024.0 / gbps, mb

    def expected_decode_seconds(self) -> float:
        return (self.output_tokens * 0.85 - 1) * self.tpot_median


def _tpot_median(dep: Deployment) -> float:
    if dep.tpot_target_seconds:
        return dep.tpot_target_seconds * TPOT_MEDIAN_SHARE
    if dep.baseline and dep.baseline.tpot_mean_seconds:
        return dep.baseline.tpot_mean_seconds
    if dep.itl_target_seconds:
        return dep.itl_target_seconds * TPOT_MEDIAN_SHARE
    return 0.05 * TPOT_MEDIAN_SHARE


def _ttft_nominal(dep: Deployment, input_tokens: int, hit: float) -> float:
    if dep.ttft_target_seconds:
        return dep.ttft_target_seconds * 0.45
    if dep.baseline and dep.baseline.ttft_mean_seconds:
        return dep.baseline.ttft_mean_seconds
    return 0.05 + input_tokens * 0.9 * (1 - hit) / PREFILL_TOKENS_PER_SECOND


def _accept_length(spec: ServerSpec | None) -> tuple[float, int]:
    if spec is None or not spec.speculative_algorithm:
        return 0.0, 0
    drafts = max(spec.speculative_num_draft_tokens, 2)
    return round(1.0 + 0.6 * (drafts - 1), 3), drafts


def build_model(dep: Deployment, servers: list[ServerSpec], rate: float | None = None) -> LatencyModel:
    input_tokens = dep.input_tokens or DEFAULT_INPUT
    output_tokens = dep.output_tokens or DEFAULT_OUTPUT
    hit = dep.prefix_cache_hit or 0.0
    decoders = [s for s in servers if s.role in ("server", "decode")]
    accept, drafts = _accept_length(decoders[0] if decoders else None)
    model = LatencyModel(
        tpot_median=_tpot_median(dep),
        ttft_nominal=_ttft_nominal(dep, input_tokens, hit),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        prefix_hit=hit,
        accept_length=accept,
        draft_tokens=drafts,
        arrival_rate=1.0,
    )
    if rate is None:
        rate = nominal_rate(model, servers, recipe_concurrency(dep))
    return LatencyModel(**{**model.__dict__, "arrival_rate": rate})


def decode_slots(spec: ServerSpec) -> list[int]:
    """Running-request slots of each DP rank (max_running_requests is split across ranks)."""
    dp = max(spec.dp_size, 1)
    return [max(1, spec.max_running_requests // dp)] * dp


def prefill_slots(spec: ServerSpec) -> list[int]:
    dp = max(spec.dp_size, 1)
    flags = spec.launch
    total = int(flags.get("max_running_requests", 0) or 0) or PREFILL_SLOTS_DEFAULT * dp
    return [max(1, total // dp)] * dp


def step_factor(decoding: int, reference: float, prefilling: int, slots: int) -> float:
    """Decode step time relative to the reference batch (one rank, right now)."""
    batch = (1.0 + REQUEST_STEP_COST * decoding) / (1.0 + REQUEST_STEP_COST * max(reference, 1.0))
    return batch * (1.0 + PREFILL_INTERFERENCE * prefilling / max(slots, 1))


def recipe_concurrency(dep: Deployment) -> int | None:
    """bench_serving's --max-concurrency in the recipe the deployment came from; else the one its measured
    baseline implies (Little's law: output throughput x seconds per request / output tokens); else None."""
    bench = dep.launch.get("bench") if isinstance(dep.launch, dict) else None
    value = bench.get("max_concurrency") if isinstance(bench, dict) else None
    try:
        if value:
            return int(value)
    except (TypeError, ValueError):
        pass
    base = dep.baseline
    if base and base.output_throughput_tokens_per_second and base.tpot_mean_seconds:
        out = dep.output_tokens or DEFAULT_OUTPUT
        per_request = (base.ttft_mean_seconds or 0.0) + out * base.tpot_mean_seconds
        return max(1, round(base.output_throughput_tokens_per_second * per_request / out))
    return None


def reference_batch(dep: Deployment, servers: list[ServerSpec], spec: ServerSpec) -> float:
    """Decode batch per rank at which the recipe measured TPOT: its concurrency spread over the decode
    ranks, else NOMINAL_LOAD of a rank's slots."""
    slots = decode_slots(spec)[0]
    conc = recipe_concurrency(dep)
    ranks = sum(len(decode_slots(s)) for s in servers if s.role in ("server", "decode"))
    ref = conc / ranks if conc and ranks else NOMINAL_LOAD * slots
    return min(max(ref, 1.0), float(slots))


def nominal_rate(model: LatencyModel, servers: list[ServerSpec], concurrency: int | None = None) -> float:
    """Synthetic arrival rate: the recipe's concurrency by Little's law, else one that keeps
    NOMINAL_LOAD of the binding resource busy."""
    ttft = model.ttft_nominal * (0.15 + 0.85 * 0.9)
    decode = model.expected_decode_seconds()
    if concurrency:
        return concurrency / (ttft + decode)
    limits = []
    unified = [s for s in servers if s.role == "server"]
    if unified:
        limits.append(sum(sum(decode_slots(s)) for s in unified) / (ttft + decode))
    decoders = [s for s in servers if s.role == "decode"]
    if decoders:
        limits.append(sum(sum(decode_slots(s)) for s in decoders) / (decode + model.tpot_median))
    prefills = [s for s in servers if s.role == "prefill"]
    if prefills:
        limits.append(sum(sum(prefill_slots(s)) for s in prefills) / ttft)
    return NOMINAL_LOAD * min(limits) if limits else 1.0


def lognormal_share_above(median: float, sigma: float, threshold: float) -> float:
    """P(X > threshold) for a lognormal with this median: what the healthy state violates."""
    z = math.log(threshold / median) / sigma
    return 0.5 * math.erfc(z / math.sqrt(2))
