"""How large a recording grows: rows kept per deployment under thinning and retention. Pure."""

from __future__ import annotations

from collections.abc import Sequence


def rows_kept(retain_seconds: float, interval_seconds: float, thin: Sequence[tuple[float, float]]) -> float:
    """Rows one deployment holds once the recording is `retain_seconds` old: every tick up to the first
    (age, step) of `thin`, then one per step of each tier (never more often than the ticks)."""
    edges = [0.0, *(min(age, retain_seconds) for age, _ in thin), retain_seconds]
    steps = [interval_seconds, *(max(step, interval_seconds) for _, step in thin)]
    return sum(max(hi - lo, 0.0) / step for lo, hi, step in zip(edges, edges[1:], steps))


def expected_bytes(row_bytes: float, deployments: int, rows: float) -> float:
    """The recording's size once full: its rows (SQLite's pages hold them with a few % more; measured in
    docs/recording.md)."""
    return row_bytes * deployments * rows
