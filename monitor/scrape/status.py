"""What the sidecar knows about each target's health (exported and shown in /api/v1/status)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TargetStatus:
    deployment: str
    target_id: str
    role: str
    source: str
    url: str | None
    up: bool = False
    placeholder: bool = False
    last_error: str | None = None
    last_scrape_ts: float | None = None
    last_success_ts: float | None = None
    duration_seconds: float = 0.0
    samples: int = 0
    bytes: int = 0
    scrapes: int = 0
    errors: int = 0
    resets: int = 0
    retired_early: int = 0  # series retired before their expiry for label churn (monitor.slo.engine.CHURN_FACTOR)
    retired_early_said: float | None = None  # when that was last logged
    format: str | None = None
    detail: dict[str, float] = field(default_factory=dict)  # e.g. router worker health summary
    # What the last successful scrape got wrong but could still be used (e.g. a _count off the
    # +Inf bucket, a missing _sum): the target is up, its numbers need a second look.
    warnings: list[str] = field(default_factory=list)

    def record_failure(self, ts: float, error: str, duration: float) -> None:
        self.up = False
        self.last_error = error
        self.last_scrape_ts = ts
        self.duration_seconds = duration
        self.scrapes += 1
        self.errors += 1
        self.warnings = []

    def record_success(self, ts: float, duration: float, samples: int, size: int, fmt: str | None,
                       warnings: list[str] | None = None) -> None:
        self.up = True
        self.warnings = list(warnings or ())
        self.last_error = None
        self.last_scrape_ts = ts
        self.last_success_ts = ts
        self.duration_seconds = duration
        self.samples = samples
        self.bytes = size
        self.format = fmt
        self.scrapes += 1
