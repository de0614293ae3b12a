"""One line of SGLang's `--export-metrics-to-file` log -> one request with its latencies and verdict.

Format (SGLang 0.5.23, `observability/request_metrics_exporter.py`): one JSON object per line,
`{"request_parameters": "<json string>", **meta_info}`. The meta_info fields used here:
  first_token_latency  TTFT in seconds (absent when no token came back)
  e2e_latency          seconds from receipt to the finishing batch
  completion_tokens    output tokens (int)
  queue_time           seconds from the scheduler's waiting queue to the first forward
  finish_reason        {"type": "stop"|"length"|"abort", ...}
  request_finished_ts  wall-clock finish (unix seconds); response_sent_to_client_ts as fallback
  decode_throughput    tokens/s of the decode phase (only when defined)

TPOT follows `bench_serving` and SGLang's own TPOT histogram: (e2e - ttft) / (completion_tokens - 1),
which is exact because both latencies share the server's receipt time. `decode_throughput` is only a
fallback: its definition changed between SGLang versions (completion_tokens / decode time in some,
(completion_tokens - 1) / decode time in others, and a scheduler-side window for non-streaming
requests in newer ones), so 1/decode_throughput is not always the TPOT the histogram saw.

Which SLIs a line is judged on follows the SLI records (`conventions.slis`, those with `request_log=True`): each
record's measure has one reading here (`READINGS`: its value on a line, and whether SGLang's histogram observed
the request), never a branch on an SLI's key. A measure a line carries but this module cannot read is refused
at import.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from monitor.conventions.slis import (
    E2E_LATENCY,
    FIRST_TOKEN_LATENCY,
    MEASURES,
    OUTPUT_TOKEN_LATENCY,
    QUEUE_WAIT,
    REQUEST_FAILED,
    REQUEST_SLIS,
    SLI_RECORDS,
    Measure,
)

SUCCESS_TYPES = frozenset({"stop", "length"})
FAILED: Final = REQUEST_FAILED  # what a request that did not succeed missed (instead of its latency SLIs)


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
    queue_time: float | None = None

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


def _lenient_num(obj: Mapping[str, Any], key: str) -> float | None:
    """A field no judged SLI reads: a bad value is left out, never the reason a line is dropped."""
    try:
        return _num(obj, key)
    except RecordError:
        return None


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
        queue_time=_num(obj, "queue_time") if "queue_time" in JUDGED_FIELDS else _lenient_num(obj, "queue_time"),
    )


def parse_line(text: str) -> RequestRecord:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise RecordError(f"not JSON: {err.msg} at column {err.colno}") from None
    return parse_record(obj)


@dataclass(frozen=True)
class Reading:
    """How a request-log line gives one measure (`conventions.slis.Measure`)."""

    value: Callable[[RequestRecord], float | None]
    # Would SGLang's histogram of the measure have observed the request? (tokenizer_manager semantics: the
    # population the histogram's good ratio is over, for comparing the two sources like with like)
    observed: Callable[[RequestRecord], bool]


READINGS: Final[dict[Measure, Reading]] = {
    FIRST_TOKEN_LATENCY: Reading(lambda r: r.ttft, lambda r: r.ttft is not None and r.finish_type != "abort"),
    OUTPUT_TOKEN_LATENCY: Reading(lambda r: r.tpot,
                                  lambda r: r.success and r.completion_tokens > 1 and r.tpot is not None),
    E2E_LATENCY: Reading(lambda r: r.e2e, lambda r: r.e2e is not None),  # every finished request
    QUEUE_WAIT: Reading(lambda r: r.queue_time, lambda r: r.queue_time is not None),  # every forwarded one
}


def check_readings(readings: Mapping[Measure, Reading]) -> dict[str, Reading]:
    """The reading of every SLI record with `request_log=True`, by SLI; refuses (at import) a measure that a line
    carries (`Measure.log_fields`) and this module cannot read, rather than a KeyError on the first line."""
    unread = [m.name for m in MEASURES if m.log_fields and m not in readings]
    unread += [f"{s.measure.name} (SLI {s.key!r}, request_log=True)" for s in SLI_RECORDS
               if s.request_log and s.measure not in readings and s.measure.name not in unread]
    if unread:
        raise ValueError("request log: no reading in monitor/requestlog/records.py READINGS for the measure(s) "
                         + ", ".join(unread))
    return {s.key: readings[s.measure] for s in SLI_RECORDS if s.request_log}


JUDGED: Final = check_readings(READINGS)
# The line fields some judged SLI is computed from: only these make a line malformed when they are not numbers.
JUDGED_FIELDS: Final = frozenset(f for r in SLI_RECORDS if r.request_log for f in r.measure.log_fields)


def latency(rec: RequestRecord, sli: str) -> float | None:
    return JUDGED[sli].value(rec)


@dataclass(frozen=True, slots=True)
class Verdict:
    good: bool  # succeeded and met every SLO of the deployment (goodput)
    missed: frozenset[str]  # the request-log SLIs it missed (of REQUEST_SLIS), or {FAILED} alone
    # Per SLI: None when the request is outside the population SGLang's histogram observes,
    # else whether it met the target (for comparing the two sources like with like).
    sli_good: dict[str, bool | None]


def histogram_population(rec: RequestRecord, sli: str) -> bool:
    """Would SGLang's histogram for this SLI have observed the request? (its measure's reading)"""
    return JUDGED[sli].observed(rec)


def evaluate(rec: RequestRecord, targets: Mapping[str, float]) -> Verdict:
    """Goodput verdict (DistServe / bench_serving --goodput): good = success and every latency <= target.

    Latency SLOs are judged on successful requests only (bench_serving skips failed ones); a failed
    request misses `failed` alone. A missing latency on a successful request counts as a miss: the
    request cannot be shown to have met it.
    """
    missed: set[str] = set()
    if not rec.success:
        missed.add(FAILED)
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
    """The deployment's targets a request log can judge (`{sli: seconds}` for each set one of REQUEST_SLIS)."""
    return {s: float(t) for s in REQUEST_SLIS if (t := targets.get(s)) is not None}
