"""What moved with the SLI: correlation, lead/lag and change against the baseline, ranked.

For every candidate series x and the SLI's per-step bad ratio y (the share of the events finished
in each step that missed the target; per-step mean latency when that never varies), over the
baseline plus the incident:

  - Pearson and Spearman correlation at lag 0;
  - lag: the shift k (in steps, |k| <= MAX_LAG_STEPS) that maximises |Spearman(x[t-k], y[t])|;
    k > 0 means x moved first;
  - change: z = (mean over the incident - median over the baseline) / baseline spread (1.4826 MAD,
    else the standard deviation; no z at all against a baseline that never varied), and the ratio of
    the means.
    "The incident" here is the breach (from one short window before its onset to its end) when there
    is one, else the whole analysed range;
  - changed_at: the first step from the start of the incident where x sat more than 3 baseline
    spreads off its baseline median for three steps running.

score = |Spearman at the best lag| * |z| / (|z| + 3) (1 or 0 without a z: changed or not) * timing, timing = 1 when x changed at or
before the breach onset (or, when it never left its baseline band, when it leads: k >= 0), else
0.5: a series that moved after the SLI did is more likely a consequence than the cause. The top
series that moved first is reported as the first mover: a correlate, not a verdict (monitor.analyze.diagnose
names the mechanism).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from monitor.analyze.model import Series, Values

MAX_LAG_STEPS = 12
Z0 = 3.0
CHANGE_Z = 3.0
CHANGE_RUN = 3  # steps in a row off the baseline band before a series counts as changed
MIN_POINTS = 6


@dataclass(frozen=True)
class Candidate:
    key: str
    label: str
    group: str
    unit: str
    pearson: float | None
    spearman: float | None
    lag_steps: int
    lag_seconds: float
    r_at_lag: float
    baseline_mean: float | None
    incident_mean: float | None
    z: float | None  # None: no baseline spread to measure it in
    ratio: float | None
    changed_at: float | None
    lead_seconds: float | None  # onset - changed_at (> 0: moved before the breach)
    timing: float
    score: float

    @property
    def moved_first(self) -> bool:
        return self.timing == 1.0


def _pairs(x: Sequence[float | None], y: Sequence[float | None]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for a, b in zip(x, y):
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
            xs.append(a)
            ys.append(b)
    return xs, ys


def pearson(x: Sequence[float | None], y: Sequence[float | None]) -> float | None:
    xs, ys = _pairs(x, y)
    n = len(xs)
    if n < MIN_POINTS:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(xs, ys))
    sxx = sum((a - mx) ** 2 for a in xs)
    syy = sum((b - my) ** 2 for b in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def ranks(values: Sequence[float]) -> list[float]:
    """Average ranks (ties share the mean of their positions), as Spearman needs."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0
        i = j + 1
    return out


def spearman(x: Sequence[float | None], y: Sequence[float | None]) -> float | None:
    xs, ys = _pairs(x, y)
    if len(xs) < MIN_POINTS:
        return None
    return pearson(ranks(xs), ranks(ys))


def shifted(x: Sequence[float | None], k: int) -> list[float | None]:
    """x delayed by k steps: out[t] = x[t-k] (k may be negative)."""
    n = len(x)
    return [x[t - k] if 0 <= t - k < n else None for t in range(n)]


def best_lag(x: Sequence[float | None], y: Sequence[float | None], max_lag: int = MAX_LAG_STEPS) -> tuple[int, float]:
    """(k, r): the shift with the largest |Spearman|; ties go to the smallest |k|, then to k > 0."""
    best = (0, 0.0)
    for k in sorted(range(-max_lag, max_lag + 1), key=lambda k: (abs(k), -k)):
        r = spearman(shifted(x, k), y)
        if r is not None and abs(r) > abs(best[1]) + 1e-9:
            best = (k, r)
    return best


def median(v: Sequence[float]) -> float:
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def spread(base: list[float]) -> float | None:
    """Baseline spread: 1.4826 MAD, else the standard deviation; None when the baseline never varied (a z
    against it would be a division by zero dressed up as a number)."""
    med = median(base)
    mad = 1.4826 * median([abs(v - med) for v in base])
    if mad <= 0 and len(base) > 1:
        m = sum(base) / len(base)
        mad = math.sqrt(sum((v - m) ** 2 for v in base) / (len(base) - 1))
    return mad if mad > 1e-12 else None


def change(values: Values, times: Sequence[float], base_idx: Sequence[int], inc_idx: range
           ) -> tuple[float | None, float | None, float | None, float | None, float | None]:
    """(z, ratio, baseline mean, incident mean, changed_at) of one series. z is None against a baseline
    with fewer than MIN_POINTS values or none that differ: there is no spread to measure a change in."""
    base = [values[i] for i in base_idx if values[i] is not None]
    inc = [values[i] for i in inc_idx if values[i] is not None]
    if len(base) < 2 or not inc:
        return None, None, None, None, None
    med, sc = median(base), spread(base)  # type: ignore[arg-type]
    bm, im = sum(base) / len(base), sum(inc) / len(inc)  # type: ignore[arg-type]
    z = (im - med) / sc if sc is not None and len(base) >= MIN_POINTS else None
    ratio = im / bm if bm else None
    # Off the band: 3 spreads, or for a flat baseline any move of more than 1 % of its level.
    band = CHANGE_Z * sc if sc is not None else max(0.01 * abs(med), 1e-9)
    changed_at = None
    run = 0
    for i in inc_idx:
        v = values[i]
        run = run + 1 if v is not None and abs(v - med) > band else 0
        if run == CHANGE_RUN:
            changed_at = times[i - CHANGE_RUN + 1]
            break
    return z, ratio, bm, im, changed_at


def rank(series: Sequence[Series], y: Values, times: Sequence[float], base_idx: Sequence[int], inc_idx: range,
         corr_idx: range, onset: float | None, step: float, max_lag: int = MAX_LAG_STEPS) -> list[Candidate]:
    """Candidates sorted by score (highest first); flat or too-short series are left out.

    base_idx: the baseline; inc_idx: the incident (for the change); corr_idx: the points correlated."""
    lo, hi = corr_idx.start, corr_idx.stop
    yw = list(y[lo:hi])
    out = []
    for s in series:
        xw = list(s.values[lo:hi])
        r0 = spearman(xw, yw)
        if r0 is None:
            continue  # flat or missing: it cannot have moved with anything
        k, rk = best_lag(xw, yw, min(max_lag, max(1, len(xw) // 4)))
        z, ratio, bm, im, changed_at = change(s.values, times, base_idx, inc_idx)
        lead = onset - changed_at if onset is not None and changed_at is not None else None
        timing = (1.0 if lead >= 0 else 0.5) if lead is not None else (1.0 if k >= 0 else 0.5)
        # Without a baseline spread the size of the change is whether it changed at all.
        size = abs(z) / (abs(z) + Z0) if z is not None else (1.0 if changed_at is not None else 0.0)
        score = abs(rk) * size * timing
        out.append(Candidate(s.key, s.label, s.group, s.unit, pearson(xw, yw), r0, k, k * step, rk, bm, im, z,
                             ratio, changed_at, lead, timing, score))
    out.sort(key=lambda c: (-c.score, c.key))
    return out
