"""Values as recipe pages write them: `20ms`, `5604.54 ms`, `3.5K+1.5K`, `1080p_30+256`, `PD Mixed`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from monitor.config import Mode

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|sec|seconds|us|µs)?\s*$", re.IGNORECASE)
_COUNT = re.compile(r"^([0-9]*\.?[0-9]+)([KkMm]?)$")
# Named video/image resolutions the page uses in dataset labels (`1080p_30+256`).
RESOLUTIONS = {"480p": "854x480", "720p": "1280x720", "1080p": "1920x1080", "1440p": "2560x1440", "4k": "3840x2160"}


def parse_seconds(text: str) -> float | None:
    """`20ms` -> 0.02; `1.5s` -> 1.5; a bare number is milliseconds (how the tables write TPOT)."""
    m = _DURATION.match(text)
    if not m:
        return None
    value = float(m.group(1))
    unit = (m.group(2) or "ms").lower()
    scale = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0, "us": 1e-6, "µs": 1e-6}[unit]
    return round(value * scale, 9)


def token_counts(text: str) -> tuple[int, ...]:
    """`3.5K` -> (3500, 3584): pages write K for both 1000 and 1024, so both readings are kept."""
    m = _COUNT.match(text.strip())
    if not m:
        return ()
    value, unit = float(m.group(1)), m.group(2).lower()
    if not unit:
        return (int(value),)
    exp = {"k": 1, "m": 2}[unit]
    return tuple(dict.fromkeys((round(value * 1000**exp), round(value * 1024**exp))))


def parse_mode(text: str) -> Mode | None:
    t = re.sub(r"[\s_-]+", " ", text.strip().lower())
    if t in ("pd mixed", "mixed", "pd-mixed", "colocated", "aggregated"):
        return "pd-mixed"
    if t.startswith("pd disagg") or t in ("disaggregated", "pd-disaggregated", "pd separation"):
        return "pd-disaggregated"
    return None


@dataclass(frozen=True)
class DatasetShape:
    text: str
    input_tokens: tuple[int, ...]  # candidate readings, see token_counts
    output_tokens: tuple[int, ...]
    prefix_cache_hit: float | None = None
    image_resolution: str | None = None


_TEXT = re.compile(r"^(?P<inp>[0-9.]+[KkMm]?)\s*\+\s*(?P<out>[0-9.]+[KkMm]?)(?P<rest>.*)$")
_IMAGE_PAREN = re.compile(r"^(?P<res>\d+x\d+)\s*\((?P<inp>[0-9.]+[KkMm]?)\)\s*\+\s*(?P<out>[0-9.]+[KkMm]?)$", re.I)
_IMAGE_NAMED = re.compile(r"^(?P<res>\d+[pP]|4[kK])_(?P<inp>[0-9.]+[KkMm]?)\s*\+\s*(?P<out>[0-9.]+[KkMm]?)$")
_PREFIX = re.compile(r"\(\s*([0-9.]+)\s*%\s*prefix[- ]cache hit(?: rate)?\s*\)", re.I)


def parse_dataset(text: str) -> DatasetShape | None:
    """The table's Dataset cell; None when it is in none of the forms we know."""
    t = text.strip()
    for pattern in (_IMAGE_PAREN, _IMAGE_NAMED):
        m = pattern.match(t)
        if m:
            res = m.group("res").lower()
            return DatasetShape(t, token_counts(m.group("inp")), token_counts(m.group("out")),
                                image_resolution=RESOLUTIONS.get(res, res))
    m = _TEXT.match(t)
    if not m:
        return None
    rest = m.group("rest").strip()
    hit = None
    if rest:
        pm = _PREFIX.fullmatch(rest)
        if not pm:
            return None
        hit = round(float(pm.group(1)) / 100, 6)
    return DatasetShape(t, token_counts(m.group("inp")), token_counts(m.group("out")), prefix_cache_hit=hit)


def close_to(value: int, candidates: tuple[int, ...], tolerance: float = 0.01) -> bool:
    return any(abs(value - c) <= max(1, tolerance * c) for c in candidates)


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return re.sub(r"-{2,}", "-", s) or "recipe"
