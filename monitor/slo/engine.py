"""Per-deployment SLO engine: parsed scrapes in, DeploymentState out. No I/O.

Which servers feed which number is `conventions.SLI_ROLES` / `COUNTER_ROLES` by the role of the target
observed: a PD request is counted on the decode server that answers it, never again on its prefill
server. A gateway's merged /engine_metrics arrives here one worker at a time, each with the role its
`engine_type` names (`monitor.observations`). Load gauges come from every target.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from monitor.config import Deployment, Target
from monitor.conventions import (
    COUNTER_ROLES,
    COUNTERS,
    GAUGES,
    SIDECAR_WINDOWS,
    SLI_FAMILIES,
    SLI_ROLES,
)
from monitor.parse.exposition import Exposition, Sample, spell_value
from monitor.parse.families import HistogramSeries, group_histograms, histogram_warnings
from monitor.slo.accumulate import SeriesBook
from monitor.slo.histogram import Hist, merge
from monitor.slo.load import aggregate
from monitor.slo.state import DeploymentState, compute_sli_states, good_total
from monitor.slo.windows import BudgetPoint, Snapshot, SnapshotStore

RATE_WINDOW = 300.0


class DeploymentEngine:
    def __init__(self, deployment: Deployment, store: SnapshotStore | None = None) -> None:
        self.deployment = deployment
        self.store = store or SnapshotStore(long_horizon=float(deployment.period_seconds))
        self.book = SeriesBook()
        self._hist_keys: dict[str, set[tuple]] = {sli: set() for sli in SLI_FAMILIES}
        self._counter_keys: dict[str, set[tuple]] = {c: set() for c in COUNTERS}
        self._gauges: dict[str, tuple[str, dict[str, list[Sample]]]] = {}
        self.resets: dict[str, int] = {}
        self._observed: set[str] = set()  # targets with at least one scrape fed here
        self.warnings: dict[str, list[str]] = {}  # target id -> what its last scrape got wrong

    def observe(self, target: Target, expo: Exposition) -> int:
        """Feed one successful scrape of an SGLang server; returns counter resets detected.

        Every histogram is assembled (and a bad one raises HistogramError) before any accumulator
        changes, so a rejected scrape leaves the windows exactly as they were. What is wrong but
        usable (a _count off the +Inf bucket, no _sum, a NaN counter) is kept in `warnings[target]`.
        """
        tid = target.id
        born = tid in self._observed  # a series new on a target already scraped was created since
        resets = 0
        warnings: list[str] = []
        by_name: dict[str, list[Sample]] = {}
        for smp in expo.selected:  # one pass; each family below reads only its own samples
            by_name.setdefault(smp.name, []).append(smp)
        empty: list[Sample] = []
        hists: list[tuple[str, HistogramSeries]] = []
        for sli, family in SLI_FAMILIES.items():
            if target.role not in SLI_ROLES[sli]:
                continue  # e.g. a PD prefill server: its E2E covers its part of the request only
            own = [*by_name.get(family + "_bucket", empty), *by_name.get(family + "_sum", empty),
                   *by_name.get(family + "_count", empty)]
            if own:
                hists.extend((sli, series) for series in group_histograms(own, family))
        self._observed.add(tid)  # from here on nothing refuses the scrape
        for sli, series in hists:
            warnings.extend(histogram_warnings(series))
            key = (tid, series.family, series.labels)
            acc = self.book.hist(key)
            if acc.update(Hist(series.edges, series.cumulative, series.sum, series.count), born=born):
                resets += 1
            self._hist_keys[sli].add(key)
        for cname, family in COUNTERS.items():
            if target.role not in COUNTER_ROLES[cname]:
                continue
            for s in by_name.get(family, empty):
                if not (s.value >= 0 and s.value != float("inf")):
                    # NaN, Inf or negative is no count: skip it rather than poison the sum, and say so.
                    warnings.append(f"{family}{dict(s.labels)}: value {spell_value(s.value)} is not a count: skipped")
                    continue
                key = (tid, family, s.labels)
                if self.book.scalar(key).update(s.value, born=born):
                    resets += 1
                self._counter_keys[cname].add(key)
        gauges: dict[str, list[Sample]] = {}
        for metric, family in GAUGES.items():
            found = by_name.get(family)
            if found:
                gauges[metric] = found
        self._gauges[tid] = (target.role, gauges)
        self.warnings[tid] = warnings
        # A scrape with a reset also reports its new counts; count at most one reset per scrape.
        if resets:
            self.resets[tid] = self.resets.get(tid, 0) + 1
        return 1 if resets else 0

    def restore(self, snapshots: Iterable[Snapshot], book: SeriesBook | None) -> int:
        """Reload history recorded by an earlier run of the sidecar; returns snapshots loaded.

        The accumulator book carries each series' last raw value and reset offset, so the first
        scrape after a restart continues the adjusted (monotone) series instead of starting over.
        """
        n = 0
        for snap in snapshots:
            if self.store.latest() is not None and snap.ts <= self.store.latest().ts:  # type: ignore[union-attr]
                continue
            self.store.append(snap, BudgetPoint(snap.ts, self._good(snap.hists)))
            n += 1
        if book is not None:
            self.book = book
            self._observed |= {key[0] for key in (*book.hists, *book.scalars)}
            family_sli = {f: sli for sli, f in SLI_FAMILIES.items()}
            family_counter = {f: c for c, f in COUNTERS.items()}
            for key in book.hists:
                if key[1] in family_sli:
                    self._hist_keys[family_sli[key[1]]].add(key)
            for key in book.scalars:
                if key[1] in family_counter:
                    self._counter_keys[family_counter[key[1]]].add(key)
        return n

    def _good(self, hists: Mapping[str, Hist]) -> dict[str, tuple[float, float]]:
        good = {}
        for sli in self.deployment.slis:
            h = hists.get(sli)
            target = self.deployment.target_seconds(sli)
            if h is not None and target is not None:
                good[sli] = good_total(h, target)
        return good

    def target_down(self, target: Target) -> None:
        """Load gauges of a target that no longer answers are stale: drop them (histograms stay)."""
        self._gauges.pop(target.id, None)

    def _merged(self) -> tuple[dict[str, Hist], dict[str, float]]:
        hists: dict[str, Hist] = {}
        for sli, keys in self._hist_keys.items():
            adjusted = [h for h in (self.book.hists[k].adjusted() for k in keys) if h is not None]
            if adjusted:
                hists[sli] = merge(adjusted)
        counters: dict[str, float] = {}
        for cname, keys in self._counter_keys.items():
            vals = [v for v in (self.book.scalars[k].adjusted() for k in keys) if v is not None]
            if vals:
                counters[cname] = sum(vals)
        return hists, counters

    def snapshot(self, ts: float) -> float:
        """Record the deployment's merged state at `ts` (once per scrape cycle). Returns how far the
        history was moved back because `ts` is before the latest snapshot (the wall clock stepped
        back; 0.0 normally): see `SnapshotStore.append`."""
        hists, counters = self._merged()
        return self.store.append(Snapshot(ts, hists, counters), BudgetPoint(ts, self._good(hists)))

    def state(self, now: float, windows: Mapping[str, int] = SIDECAR_WINDOWS) -> DeploymentState:
        slis = compute_sli_states(self.deployment, self.store, now, windows)
        load = aggregate(self._gauges)
        return DeploymentState(self.deployment.name, now, slis, load, self._rates(now))

    def _rates(self, now: float) -> dict[str, float]:
        latest = self.store.latest()
        start = self.store.window_start(now, RATE_WINDOW)
        if latest is None or start is None or latest.ts <= start.ts:
            return {}
        span = latest.ts - start.ts
        # A counter missing from the window's start was born since (adjusted values start at 0 where a
        # series was first seen), as increase() counts it from its creation.
        return {name: max(value - start.counters.get(name, 0.0), 0.0) / span
                for name, value in latest.counters.items()}
