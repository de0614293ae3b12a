"""Request-log test helpers: records in SGLang's `--export-metrics-to-file` format, written by hand."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from monitor.config import Config

HOUR = "20250102_03"


def rec(rid: str, finished: float, *, ttft: float = 0.5, e2e: float = 2.0, tokens: int = 51,
        finish: str = "stop") -> dict[str, Any]:
    """One line the way FileRequestMetricsExporter writes it (field names of SGLang 0.5.23)."""
    reason: dict[str, Any] = {"type": finish}
    if finish == "abort":
        reason.update(message="Client disconnected", status_code=499)
    out: dict[str, Any] = {
        "request_parameters": json.dumps({"rid": rid, "stream": True}),
        "id": rid, "finish_reason": reason, "prompt_tokens": 100, "completion_tokens": tokens,
        "cached_tokens": 0, "e2e_latency": e2e, "queue_time": 0.01,
        "request_received_ts": finished - e2e, "request_finished_ts": finished,
        "response_sent_to_client_ts": finished,
    }
    if ttft is not None:
        out["first_token_latency"] = ttft
    return out


def line(r: dict[str, Any]) -> str:
    return json.dumps(r) + "\n"


def name_for(hour: str) -> str:
    return f"sglang-request-metrics-{hour}.log"


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def hour_start(hour: str) -> float:
    return time.mktime(time.strptime(hour, "%Y%m%d_%H"))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    return d


def config_for(log_dir: Path, **slo: Any) -> Config:
    dep = {"name": "dep", "ttft_target_seconds": 1.0, "tpot_target_seconds": 0.04, **slo,
           "targets": [{"role": "request-log", "path": str(log_dir), "name": "log"}]}
    return Config.model_validate({"deployments": [dep]})
