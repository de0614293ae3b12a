"""Is an SLI target a bucket edge of SGLang's default histograms, and which flag makes it one?"""

from __future__ import annotations

from monitor.conventions.slis import SLI_BY_KEY


def is_edge(target: float, edges: tuple[float, ...] | list[float]) -> bool:
    return any(abs(target - e) <= 1e-9 for e in edges)


def with_edge(target: float, edges: tuple[float, ...] | list[float]) -> list[float]:
    """The default list with the target inserted (a good ratio is then exact, not interpolated)."""
    return sorted({*edges, round(target, 9)})


def format_edge(edge: float) -> str:
    return f"{edge:g}"


def flag_for(sli: str, edges: list[float]) -> str:
    return f"{SLI_BY_KEY[sli].bucket_flag} " + " ".join(format_edge(e) for e in edges)


def tpot_advice(target: float) -> tuple[list[float], str] | None:
    """(recommended TPOT/ITL edges, flag) when `target` is not a default TPOT bucket edge."""
    defaults = SLI_BY_KEY["tpot"].buckets
    if is_edge(target, defaults):
        return None
    edges = with_edge(target, defaults)
    return edges, flag_for("tpot", edges)
