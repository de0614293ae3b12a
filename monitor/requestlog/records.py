"""One line of SGLang's `--export-metrics-to-file` log -> one request with its latencies and verdict.

Format (SGLang 0.5.23, `observability/request_metrics_exporter.py`): one JSON object per line,
`{"request_parameters": "<json string>", **meta_info}`. The meta_info fields used here:
  first_token_latency  TTFT in seconds (absent when no token came back)
  e2e_latency          seconds from receipt to the finishing batch
  completion_tokens    output tokens (int)
  finish_reason        {"type": "stop"|"length"|"abort", ...}
  request_finished_ts  wall-clock finish (unix seconds); response_sent_to_client_ts as fallback
  decode_throughput    tokens/s of the decode phase (only when defined)

TPOT follows `bench_serving` and SGLang's own TPOT histogram: (e2e - ttft) / (completion_tokens - 1),
which is exact because both latencies share the server's receipt time. `decode_throughput` is only a
fallback: its definition changed between SGLang versions (completion_tokens / decode time in some,
(completion_tokens - 1) / decode time in others, and a scheduler-side window for non-streaming
requests in newer ones), so 1/decode_throughput is not always the TPOT the histogram saw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from monitor.conventions.slis import REQUEST_SLIS

SUCCESS_TYPES = frozenset({"stop", "length"})


class RecordError(ValueError):
    """A line that is not a usable request record; the message says which field is wrong."""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    rid: str | None
    finished_ts: float
    ttft: float | None
    e2e: float | None
    tpot: float | None  # None only when it cannot be computed for a request with > 1 output token
    completion_tokens: int
    finish_type: str | None

    @property
    def success(self) -> bool:
        return self.finish_type in SUCCESS_TYPES


def _num(obj: Mapping[str, Any], key: str) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RecordError(f"`{key}` must be a finite number, got {v!r}")
    return float(v)


def _finish_type(obj: Mapping[str, Any]) -> str | None:
    reason = obj.get("finish_reason")
    if reason is None:
        return None
    if isinstance(reason, dict):
        t = reason.get("type")
        return t if isinstance(t, str) else None
    if isinstance(reason, str):  # OpenAI-style plain strings, seen in some forks
        return reason
    raise RecordError(f"`finish_reason` must be an object with `type`, got {reason!r}")


def request_tpot(e2e: float | None, ttft: float | None, completion_tokens: int,
                 decode_throughput: float | None) -> float | None:
    """bench_serving's TPOT: 0 for <= 1 output token (it counts as met), else the decode time per token."""
    if completion_tokens <= 1:
        return 0.0
    if e2e is not None and ttft is not None:
        return max(e2e - ttft, 0.0) / (completion_tokens - 1)
    if decode_throughput:
        return 1.0 / decode_throughput
    return None


def parse_record(obj: Any) -> RequestRecord:
    if not isinstance(obj, dict):
        raise RecordError(f"expected a JSON object, got {type(obj).__name__}")
    ttft = _num(obj, "first_token_latency")
    e2e = _num(obj, "e2e_latency")
    tokens = obj.get("completion_tokens", 0)
    if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or tokens < 0:
        raise RecordError(f"`completion_tokens` must be a non-negative integer, got {tokens!r}")
    finished = _num(obj, "request_finished_ts")
    if finished is None:
        finished = _num(obj, "response_sent_to_client_ts")
    if finished is None:
        received = _num(obj, "request_received_ts")
        if received is not None and e2e is not None:
            finished = received + e2e
    if finished is None:
        raise RecordError("no finish time (`request_finished_ts`, `response_sent_to_client_ts` or "
                          "`request_received_ts` + `e2e_latency`)")
    rid = obj.get("id", obj.get("rid"))
    return RequestRecord(
        rid=str(rid) if rid is not None else None,
        finished_ts=finished,
        ttft=ttft,
        e2e=e2e,
        tpot=request_tpot(e2e, ttft, int(tokens), _num(obj, "decode_throughput")),
        completion_tokens=int(tokens),
        finish_type=_finish_type(obj),
    )


def parse_line(text: str) -> RequestRecord:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise RecordError(f"not JSON: {err.msg} at column {err.colno}") from None
    return parse_record(obj)


def latency(rec: RequestRecord, sli: str) -> float | None:
    return {"ttft": rec.ttft, "tpot": rec.tpot, "e2e": rec.e2e}[sli]


@dataclass(frozen=True, slots=True)
class Verdict:
    good: bool  # succeeded and met every SLO of the deployment (goodput)
    missed: frozenset[str]  # subset of {"ttft", "tpot", "e2e", "failed"}
    # Per SLI: None when the request is outside the population SGLang's histogram observes,
    # else whether it met the target (for comparing the two sources like with like).
    sli_good: dict[str, bool | None]


def histogram_population(rec: RequestRecord, sli: str) -> bool:
    """Would SGLang's histogram for this SLI have observed the request? (tokenizer_manager semantics)"""
    if sli == "ttft":
        return rec.ttft is not None and rec.finish_type != "abort"
    if sli == "tpot":
        return rec.success and rec.completion_tokens > 1 and rec.tpot is not None
    return rec.e2e is not None  # e2e: every finished request


def evaluate(rec: RequestRecord, targets: Mapping[str, float]) -> Verdict:
    """Goodput verdict (DistServe / bench_serving --goodput): good = success and every latency <= target.

    Latency SLOs are judged on successful requests only (bench_serving skips failed ones); a failed
    request misses `failed` alone. A missing latency on a successful request counts as a miss: the
    request cannot be shown to have met it.
    """
    missed: set[str] = set()
    if not rec.success:
        missed.add("failed")
    else:
        for sli, target in targets.items():
            v = latency(rec, sli)
            if v is None or v > target:
                missed.add(sli)
    sli_good: dict[str, bool | None] = {}
    for sli, target in targets.items():
        v = latency(rec, sli)
        sli_good[sli] = (v <= target) if (v is not None and histogram_population(rec, sli)) else None
    return Verdict(good=not missed, missed=frozenset(missed), sli_good=sli_good)


def request_targets(targets: Mapping[str, float | None]) -> dict[str, float]:
    """The deployment's targets a request log can judge (`{sli: seconds}` for ttft/tpot/e2e set)."""
    return {s: float(t) for s in REQUEST_SLIS if (t := targets.get(s)) is not None}
