"""What one scrape of one target produced: the wire type between the scrape loop and the state it feeds."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.config import Target
from monitor.parse.exposition import Exposition
from monitor.telemetry.model import TelemetryResult


@dataclass(frozen=True)
class ScrapeResult:
    deployment: str
    target: Target
    ts: float  # when the scrape started (wall clock)
    duration_seconds: float
    bytes: int = 0
    error: str | None = None  # set when the scrape failed: HTTP, timeout, size, malformed text
    exposition: Exposition | None = None  # SGLang, engine-metrics and router sources
    telemetry: TelemetryResult | None = None  # accelerator sources (their own up/error)
