"""Units on the wire: Prometheus durations and the `le` spelling of bucket edges."""

from __future__ import annotations

import re


def format_le(edge: float) -> str:
    """The `le` string prometheus_client writes for a bucket edge (`0.1`, `1.0`, `+Inf`)."""
    if edge == float("inf"):
        return "+Inf"
    return repr(float(edge))


_DURATION_UNITS = (("y", 31536000.0), ("w", 604800.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0),
                   ("ms", 0.001))
# Prometheus's own grammar (model.ParseDuration): units largest first, each at most once. The API renders
# configured durations this way (`90s` comes back as `1m30s`, half a second as `500ms`).
_DURATION_RE = re.compile("".join(rf"(?:(\d+){u}(?!s))?" if u == "m" else rf"(?:(\d+){u})?" for u, _ in _DURATION_UNITS))


def parse_prometheus_duration(text: str) -> float:
    """Any Prometheus duration (`30d`, `1m30s`, `500ms`) to seconds."""
    m = _DURATION_RE.fullmatch(text.strip())
    if not text.strip() or m is None or not any(m.groups()):
        raise ValueError(f"not a duration like 30d, 6h, 5m, 90s or 1m30s: {text!r}")
    return sum(int(g) * size for g, (_, size) in zip(m.groups(), _DURATION_UNITS) if g)


def parse_duration(text: str) -> int:
    """A whole-second Prometheus duration (`30d`, `6h`, `5m`, `90s`, `1h30m`) to seconds."""
    seconds = parse_prometheus_duration(text)
    if seconds != int(seconds):
        raise ValueError(f"not a whole number of seconds: {text!r}")
    return int(seconds)


def format_duration(seconds: float) -> str:
    """Seconds to the shortest exact Prometheus duration string."""
    s = int(round(seconds))
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{max(s, 1)}s"
