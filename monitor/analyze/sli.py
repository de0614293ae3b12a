"""Per-SLI series on the grid: the windowed SLI (good ratio, burn rate, quantiles) and the per-step
bad ratio that the correlation uses. Pure; histogram math from monitor.slo.histogram."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.analyze.model import Dataset, SliSpec, Values
from monitor.slo.histogram import Hist, delta, good_ratio, mean, quantile
from monitor.slo.state import burn_rate

LONG_WINDOW_FACTOR = 6  # 5m -> 30m: the short windows of the two page alerts (14.4x and 6x)


@dataclass(frozen=True)
class SliTrack:
    spec: SliSpec
    window: float
    long_window: float
    times: tuple[float, ...]
    good_ratio: Values  # over the trailing `window`
    burn: Values  # over the trailing `window`
    burn_long: Values  # over the trailing `long_window`
    p50: Values
    p90: Values
    p99: Values
    events_step: Values  # events that finished within each step
    bad_step: Values  # bad share of those events (None when there were none)
    mean_step: Values  # mean latency of those events


def _start_hist(hs: tuple[Hist | None, ...], i: int, back: int) -> Hist | None:
    """The histogram `back` points before i; the oldest one there is while history is shorter."""
    j = i - back
    if j >= 0 and hs[j] is not None:
        return hs[j]
    for k in range(max(j, 0), i):
        if hs[k] is not None:
            return hs[k]
    return None


def step_means(hs: tuple[Hist | None, ...]) -> Values:
    """Per step, the mean of the histogram's events in that step (None where a neighbour is missing)."""
    return (None, *(mean(delta(h, prev)) if h is not None and prev is not None else None
                    for prev, h in zip(hs, hs[1:]))) if hs else ()


def track(ds: Dataset, spec: SliSpec, window: float) -> SliTrack:
    hs = ds.hists.get(spec.sli) or tuple(None for _ in ds.times)
    w = max(1, round(window / ds.step))
    wl = w * LONG_WINDOW_FACTOR
    cols: dict[str, list[float | None]] = {k: [] for k in
                                            ("gr", "burn", "burn_long", "p50", "p90", "p99", "ev", "bad")}
    for i, h in enumerate(hs):
        if h is None:
            for col in cols.values():
                col.append(None)
            continue
        win = delta(h, _start_hist(hs, i, w)) if i else None
        gr = good_ratio(win, spec.target) if win is not None else None
        cols["gr"].append(gr.value if gr else None)
        cols["burn"].append(burn_rate(gr.value, spec.objective) if gr else None)
        long = delta(h, _start_hist(hs, i, wl)) if i else None
        grl = good_ratio(long, spec.target) if long is not None else None
        cols["burn_long"].append(burn_rate(grl.value, spec.objective) if grl else None)
        for q, key in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            cols[key].append(quantile(q, win) if win is not None and spec.latency else None)
        prev = hs[i - 1] if i else None
        st = delta(h, prev) if prev is not None else None
        sgr = good_ratio(st, spec.target) if st is not None else None
        cols["ev"].append(st.total if st is not None else None)
        cols["bad"].append(1.0 - sgr.value if sgr else None)
    means = step_means(hs) if spec.latency else tuple(None for _ in hs)
    return SliTrack(spec, w * ds.step, wl * ds.step, ds.times, *(tuple(cols[k]) for k in
                    ("gr", "burn", "burn_long", "p50", "p90", "p99", "ev", "bad")), means)
