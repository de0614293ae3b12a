"""`--from/--to` values: RFC3339, unix seconds, `now`, or relative (`-2h`, `now-90m`)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from monitor.conventions.units import parse_duration

_RELATIVE = re.compile(r"^(?:now)?\s*([+-])\s*(\d+[smhdw])$")


def parse_time(text: str, now: float) -> float:
    """Unix seconds for a time given as RFC3339, unix seconds, `now` or `-2h`/`now-2h`/`now+5m`."""
    t = text.strip()
    if t == "now":
        return now
    m = _RELATIVE.match(t)
    if m:
        seconds = parse_duration(m.group(2))
        return now - seconds if m.group(1) == "-" else now + seconds
    try:
        return float(t)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(t.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a time: {text!r} (expected RFC3339 like 2025-01-31T14:00:00Z, unix seconds, "
                         "`now`, or relative like -2h / now-30m)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)  # a time without zone is read as UTC, like Prometheus does
    return dt.timestamp()


def iso(ts: float) -> str:
    """2025-01-31T14:00:05Z (seconds; sub-second parts only where they exist)."""
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        text += f".{dt.microsecond // 1000:03d}"
    return text + "Z"
