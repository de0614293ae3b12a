"""Statistics and rendering: medians with interquartile ranges, one Markdown table per benchmark."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default); the only value for a single sample."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def iqr(values: Sequence[float]) -> tuple[float, float]:
    return quantile(values, 0.25), quantile(values, 0.75)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def ms_iqr(values: Sequence[float]) -> str:
    """`12.3 [11.9–12.8]` ms: median [q1–q3]."""
    if not values:
        return "–"
    lo, hi = iqr(values)
    return f"{ms(median(values))} [{ms(lo)}–{ms(hi)}]"


def ratio(a: float, b: float) -> str:
    if not b or a != a or b != b:
        return "–"
    return f"{a / b:.2f}x"


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])
