"""Pure functions over cumulative histograms (Prometheus classic-bucket semantics)."""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Hist(NamedTuple):
    """Cumulative buckets; `edges` ascending, last is +Inf; `cumulative[i]` counts <= edges[i]."""

    edges: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    @property
    def total(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0


EMPTY = Hist((math.inf,), (0.0,), 0.0, 0.0)
_EDGES: dict[tuple[float, ...], tuple[float, ...]] = {}


def compact(h: Hist) -> Hist:
    """The same histogram, cheap to keep for hours: one shared edges tuple per bucket layout and
    counts in a float array (8 bytes a bucket instead of a boxed float and a pointer)."""
    edges = _EDGES.setdefault(h.edges, h.edges)
    return Hist(edges, array("d", h.cumulative), h.sum, h.count)  # type: ignore[arg-type]


def common_edges(hists: Sequence[Hist]) -> tuple[float, ...]:
    """Edges every histogram has: the only ones at which a sum is exact."""
    if not hists:
        return (math.inf,)
    common = set(hists[0].edges)
    for h in hists[1:]:
        common &= set(h.edges)
    return tuple(sorted(common))


def at_edges(h: Hist, edges: tuple[float, ...]) -> tuple[float, ...]:
    index = {e: i for i, e in enumerate(h.edges)}
    return tuple(h.cumulative[index[e]] for e in edges)


def project(h: Hist, edges: tuple[float, ...], how: str = "interp") -> Hist:
    """`h` read at other bucket edges: exact where `h` has the edge; elsewhere interpolated linearly inside
    `h`'s bucket as `good_ratio` does (from (0, 0) below the first edge, flat beyond the last finite one), or
    its `floor` / `ceil` (the cumulative count at the next lower / higher edge of `h`: the bounds). Used when
    a server was relaunched with other `--bucket-*` edges: what its old process counted is carried on the
    new edges, so later windows are exact on them. Linear in `h`: projecting a difference is the
    difference of the projections."""
    if h.edges == edges:
        return h
    own = h.edges
    cum = h.cumulative
    out = []
    for e in edges:
        i = bisect.bisect_left(own, e)  # own[i] is the first edge >= e
        if i < len(own) and own[i] == e:
            out.append(cum[i])
            continue
        below = cum[i - 1] if i > 0 else 0.0
        if i >= len(own) or own[i] == math.inf or how == "floor":
            out.append(h.total if e == math.inf else below)
        elif how == "ceil":
            out.append(cum[i])
        else:
            lower_edge = own[i - 1] if i > 0 else 0.0
            out.append(below + (cum[i] - below) * (e - lower_edge) / (own[i] - lower_edge))
    return Hist(tuple(edges), tuple(out), h.sum, h.count)


def merge(hists: Iterable[Hist]) -> Hist:
    """Sum histograms (servers, ranks, label sets) on their common edges. One series without a
    sum (NaN) makes the merged sum NaN: a mean over part of the counts would be wrong."""
    hs = [h for h in hists if h.edges]
    if not hs:
        return EMPTY
    if all(h.edges == hs[0].edges for h in hs):
        edges = hs[0].edges
        cum = [0.0] * len(edges)
        for h in hs:
            for i, v in enumerate(h.cumulative):
                cum[i] += v
        return Hist(edges, tuple(cum), sum(h.sum for h in hs), sum(h.count for h in hs))
    edges = common_edges(hs)
    cum = [0.0] * len(edges)
    for h in hs:
        for i, v in enumerate(at_edges(h, edges)):
            cum[i] += v
    return Hist(edges, tuple(cum), sum(h.sum for h in hs), sum(h.count for h in hs))


def delta(new: Hist, old: Hist | None, how: str = "interp") -> Hist:
    """new - old on new's edges. Callers pass reset-adjusted (monotone) histograms. When the layout changed
    in between (a relaunch with other buckets), `old` is projected onto the new edges (`project`, `how`):
    exact on the edges both have, interpolated (or bounded, with floor/ceil) on the others."""
    if old is None:
        return new
    if new.edges != old.edges:
        old = project(old, new.edges, how)
    cum = tuple(max(a - b, 0.0) for a, b in zip(new.cumulative, old.cumulative))
    return Hist(new.edges, cum, max(new.sum - old.sum, 0.0), max(new.count - old.count, 0.0))


def quantile(q: float, h: Hist) -> float | None:
    """`histogram_quantile` as Prometheus computes it; None when the histogram is empty."""
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    total = h.total
    if not total > 0 or len(h.edges) < 2:  # `not >`: a NaN total has no quantile either
        return None
    rank = q * total
    i = next((j for j, cum in enumerate(h.cumulative) if cum >= rank), len(h.cumulative) - 1)
    if h.edges[i] == math.inf:
        return h.edges[-2]  # the +Inf bucket returns the highest finite bound
    upper = h.edges[i]
    if i == 0:
        lower, below = (0.0 if upper > 0 else upper), 0.0
    else:
        lower, below = h.edges[i - 1], h.cumulative[i - 1]
    in_bucket = h.cumulative[i] - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def mean(h: Hist) -> float | None:
    if not h.count > 0 or math.isnan(h.sum):
        return None
    return h.sum / h.count


class GoodRatio(NamedTuple):
    """Share of events at or under the target. `exact` when the target is a bucket edge."""

    value: float
    lower: float
    upper: float
    exact: bool
    events: float


def good_ratio(h: Hist, target: float) -> GoodRatio | None:
    """Share of observations <= target; interpolated (and bounded) off the bucket edges."""
    total = h.total
    if not total > 0:  # empty, or NaN: no ratio
        return None
    edges = h.edges
    i = len(edges) - 1
    for j, e in enumerate(edges):
        if math.isclose(e, target, rel_tol=1e-9, abs_tol=1e-12):
            r = h.cumulative[j] / total
            return GoodRatio(r, r, r, True, total)
        if e > target:
            i = j
            break
    # target lies inside (lower_edge, e]; e may be +Inf.
    upper_cum = h.cumulative[i]
    lower_edge = edges[i - 1] if i > 0 else 0.0
    lower_cum = h.cumulative[i - 1] if i > 0 else 0.0
    if edges[i] == math.inf:
        value = lower_cum  # no upper edge to interpolate toward: stay conservative
    else:
        frac = (target - lower_edge) / (edges[i] - lower_edge)
        value = lower_cum + (upper_cum - lower_cum) * frac
    return GoodRatio(value / total, lower_cum / total, upper_cum / total, False, total)


def is_edge(edges: Iterable[float], target: float) -> bool:
    return any(math.isclose(e, target, rel_tol=1e-9, abs_tol=1e-12) for e in edges)


def suggest_edges(defaults: Sequence[float], target: float) -> list[float]:
    """The default bucket list with the target inserted (what `--bucket-*` should be)."""
    edges = sorted({*(float(e) for e in defaults), float(target)})
    return edges
