"""The baseline every comparison is made against, checked before anything is compared with it.

By default the span before --from as long as the analysed range. A baseline is only as good as its data:
a deployment (or its scraping) that started inside it, a stretch with no traffic yet, scrape gaps, or a
counter first seen inside it (born there: its earlier history is not zero, it is unknown) make part of
it unusable. Those parts are dropped and said; the first window after traffic began is dropped as
warm-up (running requests, KV usage and the windowed SLIs are still filling). When too little is left,
the healthy start of the analysed range (before the first breach, less one window) stands in; when that
is too short as well the baseline is marked untrusted and the report says to pass `--baseline T1..T2`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.analyze.model import Dataset
from monitor.analyze.timeparse import iso
from monitor.analyze.tuning import ANALYSIS_MIN_BASELINE_POINTS, ANALYSIS_MIN_BASELINE_SECONDS

# A baseline taken inside the analysed range (its healthy start): trusted to compare with, but never the reason
# for a "high confidence" verdict: with no breach to end it, it spans the whole range and nothing in it can move.
IN_RANGE = "start of the range"
# The series whose presence says the deployment was scraped and whose value says it had traffic.
PRESENCE = ("rate.requests_total",)


@dataclass(frozen=True)
class Baseline:
    start: float
    end: float
    indices: tuple[int, ...]  # grid points used (gaps, warm-up and pre-traffic steps left out)
    trusted: bool
    source: str  # "before the range" | "given" | "start of the range"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "start_iso": iso(self.start), "end_iso": iso(self.end),
                "points": len(self.indices), "trusted": self.trusted, "source": self.source, "notes": self.notes}


def _in(ds: Dataset, lo: float, hi: float) -> list[int]:
    return [i for i, t in enumerate(ds.times) if lo + 1e-6 < t <= hi + 1e-6]


def _presence(ds: Dataset) -> tuple[float | None, ...]:
    """Per step: None without data, else how much traffic (finished requests, or SLI events)."""
    for key in PRESENCE:
        if key in ds.series:
            return ds.series[key].values
    for hs in ds.hists.values():  # the SLI histograms' events per step
        if any(h is not None for h in hs):
            return tuple(None if h is None else (h.total - p.total if p is not None else None)
                         for p, h in zip((None, *hs[:-1]), hs))
    return tuple(None for _ in ds.times)


def first_data(ds: Dataset) -> float | None:
    """The time of the first step with scrape data, or None when there is none."""
    return next((t for t, v in zip(ds.times, _presence(ds)) if v is not None), None)


def _born(ds: Dataset, pres: tuple[float | None, ...]) -> int | None:
    """The index of the data's first step where the data begins after the dataset's start (the deployment, or its
    scraping, is younger than the span read), else None."""
    first = next((i for i, v in enumerate(pres) if v is not None), None)
    return first if first is not None and first > 0 else None


def warmup_end(ds: Dataset, window: float) -> float | None:
    """Where the warm-up after the deployment's first traffic ends (one window after it), or None when the data
    began before the span read: breaches inside it are the windowed SLIs filling, not the deployment's state."""
    pres = _presence(ds)
    born = _born(ds, pres)
    if born is None:
        return None
    busy = next((i for i in range(born, len(pres)) if (pres[i] or 0.0) > 0), None)
    return None if busy is None else ds.times[busy] + window


def usable(ds: Dataset, lo: float, hi: float, window: float) -> tuple[list[int], list[str]]:
    """The grid points of (lo, hi] a baseline can use, and what was dropped and why."""
    idx = _in(ds, lo, hi)
    notes: list[str] = []
    if not idx:
        return [], [f"no data between {iso(lo)} and {iso(hi)}"]
    pres = _presence(ds)
    have = [i for i in idx if pres[i] is not None]
    if not have:
        return [], [f"no scrape data between {iso(lo)} and {iso(hi)}"]
    born = _born(ds, pres)  # the data began at this span's start or inside it: the deployment began here
    young = born is not None and ds.times[born] >= lo - 1e-6
    started_inside = ds.times[have[0]] > ds.times[idx[0]] + ds.step + 1e-6 or young
    if started_inside:
        notes.append(f"no data before {iso(ds.times[have[0]])}: the deployment or its scraping started inside the "
                     f"baseline")
    busy = [i for i in have if (pres[i] or 0.0) > 0]
    if not busy:
        return [], notes + [f"no traffic between {iso(lo)} and {iso(hi)}"]
    warm = ds.times[busy[0]] + window
    if busy[0] > have[0] or started_inside:
        notes.append(f"traffic began at {iso(ds.times[busy[0]])}: the first {window:g} s after it are warm-up and "
                     f"left out")
        have = [i for i in have if ds.times[i] > warm - 1e-6]
    gaps = [i for i in idx if i > have[0] and pres[i] is None] if have else []
    if gaps:
        notes.append(f"scrape gaps: {len(gaps) * ds.step:g} s without data in the baseline (from "
                     f"{iso(ds.times[gaps[0]])}), left out")
    for key, s in sorted(ds.series.items()):
        if not key.startswith("rate."):
            continue
        first = next((i for i in idx if s.values[i] is not None), None)
        if first is not None and have and first > have[0] and ds.times[first] > ds.times[idx[0]] + ds.step:
            notes.append(f"{s.label}: counter first seen at {iso(ds.times[first])}, inside the baseline (born there; "
                         f"compared from then on)")
    return have, notes


def choose_baseline(ds: Dataset, t1: float, t2: float, window: float,
                    breaches: Sequence[tuple[float, float | None, bool]] = (),
                    requested: tuple[float, float] | None = None, fault: float | None = None) -> Baseline:
    """`breaches`: (onset, end or None while it lasts, main) of the SLIs' breaches, `main` for the one that spent
    most of its SLI's budget (the incident the report is about). The healthy start of the range ends a window
    before the first main one: a busy deployment's brief breaches before it are how it was. One that began inside
    the warm-up after the deployment's first traffic is its windows filling when it ended there, and the
    deployment's state from its start when it outlasted it.
    `fault`: the first fault event in the range (a server down that breached nothing yet): it ends the healthy
    start too."""
    need = max(ANALYSIS_MIN_BASELINE_POINTS * ds.step, ANALYSIS_MIN_BASELINE_SECONDS)
    if requested is not None:
        lo, hi = requested
        idx, notes = usable(ds, lo, hi, window)
        ok = len(idx) * ds.step >= need
        if not ok:
            notes.append(f"the given baseline has {len(idx) * ds.step:g} s of usable data (want {need:g} s): "
                         "comparisons with it are not trusted")
        return Baseline(lo, hi, tuple(idx), ok, "given", notes)
    span = t2 - t1
    lo, hi = t1 - span, t1
    idx, notes = usable(ds, lo, hi, window)
    if len(idx) * ds.step >= need:
        if notes:
            notes.append(f"baseline: {len(idx) * ds.step:g} s of {span:g} s before --from are usable "
                         f"({iso(ds.times[idx[0]])} → {iso(hi)})")
        return Baseline(ds.times[idx[0]] - ds.step, hi, tuple(idx), True, "before the range", notes)
    # Too little before the range: the healthy start of the range itself, up to one window before the breach.
    # With no breach to end it, only as much as a baseline needs, after what was usable before --from: the whole
    # range would leave nothing to compare with it (a restart or a surge that breached nothing read as "no
    # incident", #32 item 6).
    warm = warmup_end(ds, window)
    first_breach = min((o for o, _, main in breaches if main and (warm is None or o > warm)), default=None)
    chronic = warm is not None and any(o <= warm and (end is None or end > warm) for o, end, _ in breaches)
    first_onset = min((o for o in (first_breach, fault) if o is not None), default=None)
    if first_onset is not None:
        alt_hi = first_onset - window
        alt, alt_notes = usable(ds, t1, alt_hi, window) if alt_hi > t1 else ([], [])
    else:
        both, alt_notes = usable(ds, lo, t2, window)
        before = [i for i in both if ds.times[i] <= t1 + 1e-6]
        more = max(0, math.ceil((need - len(before) * ds.step) / ds.step - 1e-9))
        alt = before + [i for i in both if ds.times[i] > t1 + 1e-6][:more]
        alt_hi = ds.times[alt[-1]] if alt else t1
    lost = (f"baseline before --from unusable ({len(idx) * ds.step:g} s of data, want {need:g} s"
            + (f": {'; '.join(notes)}" if notes else "") + ")")
    if len(alt) * ds.step >= need:
        return Baseline(ds.times[alt[0]] - ds.step, alt_hi, tuple(alt), True, IN_RANGE,
                        [lost + f"; compared with the healthy start of the range instead ({iso(ds.times[alt[0]])} → "
                                f"{iso(alt_hi)})", *alt_notes])
    if chronic:
        # Breaching from the deployment's first traffic on (a target that never held at this load): no healthy
        # start to find, and none is needed to ask what changed since; its first stretch after the warm-up stands
        # in as how it was.
        start, _ = usable(ds, t1, fault - ds.step if fault is not None else t2, window)
        first = start[:max(ANALYSIS_MIN_BASELINE_POINTS, math.ceil(need / ds.step - 1e-9))]
        if len(first) * ds.step >= need:
            end = ds.times[first[-1]]
            return Baseline(ds.times[first[0]] - ds.step, end, tuple(first), True, IN_RANGE,
                            [lost + f"; the SLIs breached from the deployment's first traffic on: its first "
                                    f"{len(first) * ds.step:g} s after the warm-up ({iso(ds.times[first[0]])} → "
                                    f"{iso(end)}) stand in as how it was"])
    best = idx if len(idx) >= len(alt) else alt
    return Baseline(ds.times[best[0]] - ds.step if best else lo, hi, tuple(best), False, "before the range",
                    [lost + "; no healthy stretch long enough in the range either: the verdict is uncertain; "
                            "pass --baseline T1..T2 (a healthy period)"])
