"""Whether aborted requests were abandoned at one age: a client's or a gateway's timeout. Pure.

SGLang 0.5.23 (managers/tokenizer_manager.py) counts `num_aborted_requests_total` when it sends the abort, and the
aborted request then finishes through `collect_metrics` like any other: its E2E latency, the age it was aborted
at, is observed in `e2e_request_latency_seconds`. Neither says why it was aborted, nor at what age alone. A
timeout leaves a shape that random hang-ups, failures and slowdowns do not:

- many aborts (GIVE_UP_MIN, and GIVE_UP_MIN_SHARE of the requests that finished);
- the incident's E2E observations pile into one bucket (or a few side by side: clients whose timeouts differ)
  beyond what the baseline's distribution puts there, by about as many as were aborted (GIVE_UP_SHARE to
  1 / GIVE_UP_SHARE of them: a slowdown moves every request, many more than it aborts). Only requests that would have ended above the bucket can move into it: a timeout
  inside the usual answers' own bucket (most requests aborted at about the age they would have finished at)
  piles up only the baseline's share above it, so that share caps what the pile must hold;
- and what piled there left the tail: the observations above the pile fell from the baseline's share by at least
  GIVE_UP_SHARE of the pile (where the baseline had any there: what the pile holds came from above it), and above
  each of its buckets the share is no more than the baseline's (a timeout only ever ends a request earlier; a
  slowdown makes the tail heavier). Before, the share above had to halve: clients whose timeouts straddle a
  bucket edge leave part of the pile above it.

Where the timeout's abort age falls inside the bucket most requests end in anyway, nothing piles: the aborted
requests stay in their bucket, only earlier in it. The histogram's `_sum` still sees it (`_inside`): the mean E2E fell
by more than its standard error allows (CHANGE_Z of them, the spread read from the baseline's buckets), by no more
than the aborts can make (each ends earlier by at most its bucket's width), while no bucket's share grew past its
noise, none went to a lower bucket as random hang-ups would, and none ended later. Anything that slows a request
raises the mean instead; the age read is the bucket where the baseline's share of requests older than it is the
share aborted (the requests a timeout cuts are those that would have run longer).

(A client that gives up at T is aborted ~2 s later: SGLang notices a gone client when it next writes to it.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from monitor.analyze.correlate import CHANGE_Z
from monitor.slo.histogram import Hist, delta

GIVE_UP_MIN: Final = 10.0  # aborted requests in the incident
GIVE_UP_MIN_SHARE: Final = 0.05  # of the E2E observations (requests finished) in the incident
GIVE_UP_SHARE: Final = 0.5  # the pile's excess observations against the aborts: from this share to its inverse
# A bucket beside the pile's peak is part of the pile while its excess is at least this share of the peak's: the
# clients of one timeout setting differ a little (retries, per-user settings) and straddle a bucket edge.
PILE_SIDE: Final = 0.25
# Above each of the pile's buckets the incident's share may exceed the baseline's by this factor and one point at most
# (counting noise): a request a timeout ends lands no later than it would have.
NO_LATER: Final = (1.2, 0.01)


@dataclass(frozen=True)
class GiveUp:
    """Aborts piled at one age: the E2E buckets (lo, hi] and how many more observations they had than usual."""

    lo: float
    hi: float
    excess: float
    aborted: float


def _steps(hs: Sequence[Hist | None], idx: Sequence[int] | range) -> tuple[list[float], float] | None:
    """Per-bucket (not cumulative) E2E observations of the steps `idx`, summed, and the sum of their ages (the
    histogram's `_sum`); None where the layout varies."""
    out: list[float] | None = None
    edges, total = None, 0.0
    for i in idx:
        if not 0 < i < len(hs):
            continue
        new, old = hs[i], hs[i - 1]
        if new is None or old is None or new.edges != old.edges or (edges is not None and new.edges != edges):
            continue
        edges = new.edges
        d = delta(new, old)
        cum = d.cumulative
        per = [cum[0], *(max(b - a, 0.0) for a, b in zip(cum, cum[1:]))]
        out = per if out is None else [a + b for a, b in zip(out, per)]
        total += d.sum
    return None if out is None else (out, total)


def _spread(per: Sequence[float], edges: Sequence[float]) -> float:
    """The standard deviation of the ages, each bucket's observations spread evenly over it (its middle, plus a
    uniform spread's width^2 / 12 within it; the +Inf bucket's at its lower edge: a bound that understates, never
    invents, a spread)."""
    lows = [0.0, *edges[:-1]]
    mids = [(lo + hi) / 2 if math.isfinite(hi) else lo for lo, hi in zip(lows, edges)]
    within = [(hi - lo) ** 2 / 12 if math.isfinite(hi) else 0.0 for lo, hi in zip(lows, edges)]
    n = sum(per)
    mean = sum(c * m for c, m in zip(per, mids)) / n
    return math.sqrt(sum(c * ((m - mean) ** 2 + w) for c, m, w in zip(per, mids, within)) / n)


def give_up(hs: Sequence[Hist | None], base_idx: Sequence[int], during: Sequence[int],
            aborted: float) -> GiveUp | None:
    """The bucket the E2E observations of the steps `during` (those with the aborts) piled into, when the pile
    is about the `aborted` requests of those steps and nothing waited longer; None otherwise (or without an
    E2E histogram, or a baseline with events)."""
    if aborted < GIVE_UP_MIN:
        return None
    got_base, got_inc = _steps(hs, base_idx), _steps(hs, during)
    if got_base is None or got_inc is None:
        return None
    (base, base_sum), (inc, inc_sum) = got_base, got_inc
    if len(base) != len(inc) or sum(base) <= 0 or sum(inc) <= 0:
        return None
    total_base, total_inc = sum(base), sum(inc)
    if aborted < GIVE_UP_MIN_SHARE * total_inc:
        return None
    edges = next(h.edges for h in (hs[i] for i in during) if h is not None)
    excess = [n - total_inc * b / total_base for n, b in zip(inc, base)]
    peak = max(range(len(excess)), key=excess.__getitem__)
    lo = hi = peak
    while lo > 0 and excess[lo - 1] > PILE_SIDE * excess[peak]:
        lo -= 1
    while hi + 1 < len(excess) and excess[hi + 1] > PILE_SIDE * excess[peak]:
        hi += 1
    pile = sum(excess[lo:hi + 1])
    # The share of each one's observations above bucket j, for every j.
    above_base = [sum(base[j + 1:]) / total_base for j in range(len(base))]
    above_inc = [sum(inc[j + 1:]) / total_inc for j in range(len(inc))]
    movable = min(aborted, total_inc * above_base[lo])  # aborts that could come from above lo
    factor, slack = NO_LATER
    if pile < GIVE_UP_SHARE * movable:  # nothing piled: the age may lie inside the usual answers' own bucket
        return _inside(base, inc, edges, aborted, excess, above_base, above_inc,
                       base_sum / total_base - inc_sum / total_inc)
    if pile > aborted / GIVE_UP_SHARE:
        return None
    if above_base[hi] > 0 and (above_base[hi] - above_inc[hi]) * total_inc < GIVE_UP_SHARE * pile:
        return None
    if any(above_inc[j] > factor * above_base[j] + slack for j in range(lo, hi + 1)):
        return None
    return GiveUp(edges[lo - 1] if lo else 0.0, edges[hi], pile, aborted)


def _inside(base: Sequence[float], inc: Sequence[float], edges: Sequence[float], aborted: float,
            excess: Sequence[float], above_base: Sequence[float], above_inc: Sequence[float],
            fell: float) -> GiveUp | None:
    """Aborts whose age lies inside the bucket the requests end in anyway (the module's docstring): the mean age
    fell (`fell`, seconds) as only requests cut short make it fall, and no bucket's share moved. `excess`,
    `above_base`, `above_inc`: per bucket, as `give_up` computed them. Pure."""
    total_base, total_inc = sum(base), sum(inc)
    factor, slack = NO_LATER
    if any(above_inc[j] > factor * above_base[j] + slack for j in range(len(base))):
        return None  # some requests ended later: not only cut short
    # No bucket gained past its counting noise (3 Poisson sigmas over what the baseline's share puts there): the
    # aborted requests stayed where they were, neither piled nor spread to earlier ages.
    if any(x > CHANGE_Z * math.sqrt(max(n - x, 1.0)) for n, x in zip(inc, excess)):
        return None
    se = _spread(base, edges) * math.sqrt(1 / total_inc + 1 / total_base)
    share = aborted / total_inc
    j = next((k for k, a in enumerate(above_base) if a < share), len(base) - 1)  # where the cut lies
    lo, hi = (edges[j - 1] if j else 0.0), edges[j]
    if fell <= CHANGE_Z * se or (math.isfinite(hi) and fell * total_inc > aborted * (hi - lo)):
        return None
    return GiveUp(lo, hi, 0.0, aborted)
