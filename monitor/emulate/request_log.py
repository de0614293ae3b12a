"""Ground truth: one JSON line per finished request, in SGLang's `--export-metrics-to-file` format.

SGLang's FileRequestMetricsExporter writes `{"request_parameters": "<json>", **meta_info}` per request
to `<dir>/sglang-request-metrics-YYYYmmdd_HH.log` (hour of the write). meta_info carries
`first_token_latency` (TTFT), `e2e_latency`, `queue_time`, `decode_throughput` (= 1/TPOT, only when
TPOT is defined), token counts, `finish_reason` and wall-clock `request_*_ts` timestamps.
Each emulated server that answers clients writes into its own sub-directory `<dir>/<server-name>/`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any


def file_name(wall: float) -> str:
    return "sglang-request-metrics-" + time.strftime("%Y%m%d_%H", time.localtime(wall)) + ".log"


def record(*, rid: str, streaming: bool, max_new_tokens: int, finish_reason: str, prompt_tokens: int,
           completion_tokens: int, cached_tokens: int, received_wall: float, first_token_latency: float | None,
           e2e_latency: float, queue_time: float, tpot: float | None,
           abort: tuple[str, int] = ("Client disconnected", 499)) -> dict[str, Any]:
    params = {"rid": rid, "stream": streaming, "sampling_params": {"max_new_tokens": max_new_tokens},
              "log_metrics": True}
    if finish_reason == "length":
        reason: dict[str, Any] = {"type": "length", "length": completion_tokens}
    elif finish_reason == "stop":
        reason = {"type": "stop", "matched": 2}
    else:
        reason = {"type": "abort", "message": abort[0], "status_code": abort[1]}
    out: dict[str, Any] = {
        "request_parameters": json.dumps(params),
        "id": rid,
        "finish_reason": reason,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
        "e2e_latency": e2e_latency,
        "queue_time": queue_time,
        "request_received_ts": received_wall,
        "request_finished_ts": received_wall + e2e_latency,
        "response_sent_to_client_ts": received_wall + e2e_latency,
    }
    if first_token_latency is not None:
        out["first_token_latency"] = first_token_latency
    if tpot:
        out["decode_throughput"] = 1.0 / tpot
    return out


class RequestLog:
    """Appends records for one server, switching files on the hour like SGLang does."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._name: str | None = None
        self._fh: IO[str] | None = None

    def write(self, rec: dict[str, Any]) -> None:
        name = file_name(rec["request_finished_ts"])
        if name != self._name:
            self.close()
            self._fh = open(self.directory / name, "a", encoding="utf-8")  # noqa: SIM115 - kept open
            self._name = name
        assert self._fh is not None
        self._fh.write(json.dumps(rec) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = None
        self._name = None


def read_records(directory: str | Path) -> list[dict[str, Any]]:
    """Every record under `directory` (recursively), oldest file first."""
    out = []
    for path in sorted(Path(directory).rglob("sglang-request-metrics-*.log")):
        with open(path, encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out
