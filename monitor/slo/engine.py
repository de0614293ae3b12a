"""Per-deployment SLO engine: parsed scrapes in, DeploymentState out. No I/O.

Which servers feed which number is `monitor.feeds` (an SLI record's roles, `COUNTER_ROLES`) by the role of the
target observed: a PD request is counted on the decode server that answers it, never again on its prefill
server. A gateway's merged /engine_metrics arrives here one worker at a time, each with the role its
`engine_type` names (`monitor.observations`). Load gauges come from every target. A gateway's own listener
feeds the availability SLI's two counters (which of its series count is its version's:
`monitor.parse.gateway.availability_samples`), and on smg 1.13 its answers and those whose client left first
(`client_closed_samples`), whatever the deployment's objectives.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from itertools import groupby

from monitor.config import Deployment, Target
from monitor.conventions.names import (
    AVAILABILITY_SLI,
    COUNTER_MATCHERS,
    COUNTERS,
    GATEWAY_ANSWERED,
    GATEWAY_CLIENT_CLOSED,
    GATEWAY_FAILED,
    GATEWAY_REQUESTS,
    GAUGES,
    SHARED_FAMILY_COUNTERS,
    TPOT_LEADING_WINDOW,
    retired_key,
)
from monitor.conventions.policy import SERIES_EXPIRY_SECONDS, SIDECAR_WINDOWS
from monitor.conventions.slis import COUNTER_ROLES, SLI_FAMILIES, SLI_RECORDS
from monitor.conventions.units import parse_duration
from monitor.feeds import feed, sli_reading
from monitor.parse.exposition import Exposition, Labels, Sample, spell_value
from monitor.parse.families import MEAN_ONLY_EDGES, HistogramSeries, group_histograms, histogram_warnings
from monitor.parse.gateway import availability_samples, client_closed_samples, detect_gateway, matches
from monitor.slo.accumulate import HistAccumulator, ScalarAccumulator, SeriesBook, update_pair
from monitor.slo.histogram import Hist, common_edges, merge, project
from monitor.slo.leading import HOLD_SECONDS, held_since, leading_tpot, with_hold
from monitor.slo.load import aggregate, per_dp_rank
from monitor.slo.state import (
    DeploymentState,
    availability_good_total,
    compute_availability,
    compute_client_gone,
    compute_sli_states,
    good_total,
)
from monitor.slo.windows import BudgetPoint, Snapshot, SnapshotStore

RATE_WINDOW = 300.0
_NAME = operator.itemgetter(0)  # a Sample's name
LEADING_WINDOW = float(parse_duration(TPOT_LEADING_WINDOW))
LAYOUT_NOTE_SECONDS = float(max(SIDECAR_WINDOWS.values()))  # a layout change is said while a window spans it
EXPIRY_SWEEP_SECONDS = 60.0  # how often absent series are looked for (a pass over every accumulator)
# Label churn (new series every scrape, old ones never back) would hold SERIES_EXPIRY_SECONDS (6 h) of dead series:
# at a sweep, a target's series absent from its latest scrape are retired at once when they outnumber the series
# it exposes CHURN_FACTOR times over (and CHURN_MIN_SERIES at least). Workers leaving a gateway's merge, or a
# relaunch with other labels, leave a few times the present ones absent at most, so they keep the full expiry.
CHURN_FACTOR = 4
CHURN_MIN_SERIES = 1000


# (counter, label set) -> whether the set's series counts in the counter (COUNTER_MATCHERS): label sets are the
# same tuple objects scrape after scrape (the parser's cache), so each is matched once. Bounded like that cache.
_COUNTS_IN: dict[tuple[str, Labels], bool] = {}
_COUNTS_IN_MAX = 50_000


def _counts_in(counter: str, labels: Labels, only: tuple) -> bool:
    key = (counter, labels)
    got = _COUNTS_IN.get(key)
    if got is None:
        if len(_COUNTS_IN) >= _COUNTS_IN_MAX:
            _COUNTS_IN.clear()
        got = _COUNTS_IN[key] = matches(labels, only)
    return got


def layout_note(family: str, old: tuple[float, ...], new: tuple[float, ...]) -> str:
    """What a target's warnings say after its server was relaunched with other bucket edges."""
    added = ", ".join(f"{e:g}" for e in new if e not in old) or "none"
    removed = ", ".join(f"{e:g}" for e in old if e not in new) or "none"
    return (f"{family}: bucket layout changed (edges added: {added}; removed: {removed}): counted from here on "
            f"the new edges; windows reaching back before the change read its earlier part interpolated")



def decrease_note(family: str, labels: Labels, fell: float) -> str:
    """A counter that went down without a restart (`monitor.slo.accumulate`): what the target's status says."""
    return (f"{family}{dict(labels)} went down by {spell_value(fell)} without dropping toward 0: not read as a "
            f"restart (that would count its whole value again); {DECREASE_NOTE_END}")


DECREASE_NOTE_END = "held until it grows past where it was"

class DeploymentEngine:
    def __init__(self, deployment: Deployment, store: SnapshotStore | None = None) -> None:
        self.deployment = deployment
        self.store = store or SnapshotStore(long_horizon=float(deployment.period_seconds))
        self.book = SeriesBook()
        self._hist_keys: dict[str, set[tuple]] = {sli: set() for sli in SLI_FAMILIES}
        # The SLIs whose histogram is read as a mean only (`feeds.sli_reading`): their _sum and _count series
        # accumulate as counters (keys: (target, family_sum | family_count, labels)), a snapshot holds their
        # merged mean as a one-bucket histogram (MEAN_ONLY_EDGES).
        self._mean_slis = frozenset(sli for sli in SLI_FAMILIES if sli_reading(deployment, sli) == "mean")
        self._mean_keys: dict[str, set[tuple]] = {sli: set() for sli in self._mean_slis}
        # Series whose first scrape here starts counting at 0 although their target was scraped before: a
        # histogram an earlier run recorded as a mean only and read whole now (`restore`).
        self._unborn: set[tuple] = set()
        self.restore_notes: list[str] = []  # what `restore` could not carry over, said once at start
        # Which roles' series count for each SLI and counter (the generator's selectors use the same feeds).
        self._sli_feeds = {s.key: feed(deployment, s.roles) for s in SLI_RECORDS}
        self._counter_feeds = {c: feed(deployment, COUNTER_ROLES[c]) for c in COUNTERS}
        self._counter_keys: dict[str, set[tuple]] = {c: set() for c in COUNTERS}
        # The gateway's series by what they count: (target, family, labels) counting the availability SLI's
        # requests and failed requests, and the answers and the client-closed answers (smg 1.13).
        self._gateway_keys: dict[str, set[tuple]] = {GATEWAY_REQUESTS: set(), GATEWAY_FAILED: set(),
                                                     GATEWAY_ANSWERED: set(), GATEWAY_CLIENT_CLOSED: set()}
        # A gateway that counts clients that left was scraped: before its first answer it has answered 0 (smg
        # creates a series at its first count), which is not "not measured".
        self._counts_client_closed = False
        # target id -> (role, metric -> value per DP rank): plain floats, not the scrape's samples, so the
        # garbage collector has nothing to walk here (400 targets x 320 scheduler gauges otherwise).
        self._gauges: dict[str, tuple[str, dict[str, list[float]]]] = {}
        self.resets: dict[str, int] = {}
        self._restarted_at: dict[str, float] = {}  # per target, when its counters last restarted
        self.churned: dict[str, int] = {}  # per target, series retired early for label churn, not yet reported
        self._observed: dict[str, float] = {}  # target id -> its last scrape fed here
        self.warnings: dict[str, list[str]] = {}  # target id -> what its last scrape got wrong
        # target id -> (when, what): its latest change of bucket edges, said while a window reaches back over it
        self._layout_notes: dict[str, tuple[float, str]] = {}
        self._now = 0.0  # the latest snapshot's time: a scrape's when none is given
        self._swept = 0.0
        # Since when the leading TPOT signal has been over the target at every snapshot (None: not over at the
        # latest): the hold SLOTPOTLeadingWarning waits, evaluated once per scrape cycle as a rule group is.
        self.tpot_over_since: float | None = None

    def observe(self, target: Target, expo: Exposition, ts: float | None = None) -> int:
        """Feed one successful scrape (taken at `ts`) of an SGLang server; returns counter resets detected.

        Every histogram is assembled (and a bad one raises HistogramError) before any accumulator
        changes, so a rejected scrape leaves the windows exactly as they were. What is wrong but
        usable (a _count off the +Inf bucket, no _sum, a NaN counter) is kept in `warnings[target]`.
        """
        tid = target.id
        now = self._now if ts is None else ts
        born = tid in self._observed  # a series new on a target already scraped was created since
        resets = 0
        warnings: list[str] = []
        by_name: dict[str, list[Sample]] = {}
        # One pass; each family below reads only its own samples. A name's samples mostly come in runs (a
        # gauge's ranks, a histogram read as a mean), so runs are grouped in C, not sample by sample.
        for name, run in groupby(expo.selected, _NAME):
            found = by_name.get(name)
            if found is None:
                by_name[name] = list(run)
            else:
                found.extend(run)
        empty: list[Sample] = []
        hists: list[tuple[str, HistogramSeries]] = []
        means: list[tuple[str, str, Labels, float, float]] = []  # (sli, family, labels, _sum, _count)
        for sli, family in SLI_FAMILIES.items():
            if not self._sli_feeds[sli].counts(target.role):
                continue  # e.g. a PD prefill server: its E2E covers its part of the request only
            if sli in self._mean_slis:
                means += self._mean_series(sli, family, by_name.get(family + "_sum", empty),
                                           by_name.get(family + "_count", empty), warnings)
                continue
            own = [*by_name.get(family + "_bucket", empty), *by_name.get(family + "_sum", empty),
                   *by_name.get(family + "_count", empty)]
            if own:
                hists.extend((sli, series) for series in group_histograms(own, family))
        self._observed[tid] = now  # from here on nothing refuses the scrape
        # Decreases held as no restart, this scrape (a mean's _sum and _count together: one series).
        # Each with when its series was seen before this scrape, and the note that says it.
        held: list[tuple[tuple[HistAccumulator | ScalarAccumulator, ...], float, str]] = []
        for sli, series in hists:
            warnings.extend(histogram_warnings(series))
            key = (tid, series.family, series.labels)
            acc = self.book.hist(key)
            before = acc.seen
            acc.seen = now
            if acc.last_raw is not None and acc.last_raw.edges != series.edges:
                self._layout_notes[tid] = (now, layout_note(series.family, acc.last_raw.edges, series.edges))
            first = born and not (self._unborn and key in self._unborn)
            if acc.update(Hist(series.edges, series.cumulative, series.sum, series.count), born=first):
                resets += 1
            elif acc.decreased:
                held.append(((acc,), before, decrease_note(series.family, series.labels, acc.decreased)))
            if self._unborn:  # only after a restore that changed the read (rare): no set lookup per series otherwise
                self._unborn.discard(key)
            self._hist_keys[sli].add(key)
        for sli, family, labels, total, count in means:
            keys = (tid, family + "_sum", labels), (tid, family + "_count", labels)
            accs = self.book.scalar(keys[0]), self.book.scalar(keys[1])
            before = accs[1].seen
            for a in accs:
                a.seen = now
            if update_pair(*accs, total, count, born=born):
                resets += 1
            elif accs[1].decreased or accs[0].decreased:
                held.append((accs, before, decrease_note(family, labels, accs[1].decreased)))
            self._mean_keys[sli].update(keys)
        for cname, family in COUNTERS.items():
            if not self._counter_feeds[cname].counts(target.role):
                continue
            only = COUNTER_MATCHERS.get(cname)
            for s in by_name.get(family, empty):
                if only and not _counts_in(cname, s.labels, only):
                    continue
                if not (s.value >= 0 and s.value != float("inf")):
                    # NaN, Inf or negative is no count: skip it rather than poison the sum, and say so.
                    warnings.append(f"{family}{dict(s.labels)}: value {spell_value(s.value)} is not a count: skipped")
                    continue
                key = (tid, family, s.labels)
                sacc = self.book.scalar(key)
                before = sacc.seen
                sacc.seen = now
                if sacc.update(s.value, born=born):
                    resets += 1
                elif sacc.decreased:
                    held.append(((sacc,), before, decrease_note(family, s.labels, sacc.decreased)))
                self._counter_keys[cname].add(key)
        gauges: dict[str, list[float]] = {}
        for metric, family in GAUGES.items():
            found = by_name.get(family)
            if found:
                gauges[metric] = list(per_dp_rank(found).values())
        self._gauges[tid] = (target.role, gauges)
        note = self._layout_notes.get(tid)
        if note is not None:
            if now - note[0] <= LAYOUT_NOTE_SECONDS:
                warnings.append(note[1])
            else:
                del self._layout_notes[tid]
        if held:
            # One process, one restart: when a series of this scrape fell toward 0, or several fell at once (counters
            # that count different things go down together only when their process starts again), every one that
            # fell restarted, however little it fell (a small counter's new value may be over half its old one); so
            # did one not seen since its target last restarted (SGLang creates a counter at its first event).
            every = bool(resets) or len(held) > 1
            restarted = self._restarted_at.get(tid, -math.inf)
            for accs, before, note in held:
                if every or before < restarted:
                    for acc in accs:
                        acc.restart_instead()
                    resets += 1
                else:
                    warnings.append(note)
        if resets:
            self._restarted_at[tid] = now
        self.warnings[tid] = warnings
        # A scrape with a reset also reports its new counts; count at most one reset per scrape.
        if resets:
            self.resets[tid] = self.resets.get(tid, 0) + 1
        return 1 if resets else 0

    @staticmethod
    def _mean_series(sli: str, family: str, sums: list[Sample], counts: list[Sample],
                     warnings: list[str]) -> list[tuple[str, str, Labels, float, float]]:
        """(sli, family, labels, _sum, _count) of each series of a histogram read as a mean. A series without
        a finite, non-negative pair is left out and said (its mean would poison the merged one)."""
        total = {s.labels: s.value for s in sums}
        out = []
        for s in counts:
            v = total.get(s.labels)
            if v is None or not (v >= 0 and v != math.inf) or not (s.value >= 0 and s.value != math.inf):
                shown = "no _sum" if v is None else f"_sum {spell_value(v)}, _count {spell_value(s.value)}"
                warnings.append(f"{family}{dict(s.labels)}: {shown}: no mean reported (series left out)")
                continue
            out.append((sli, family, s.labels, v, s.value))
        return out

    def observe_gateway(self, target: Target, expo: Exposition, ts: float | None = None) -> int:
        """Feed one successful scrape of a gateway's listener (source router); returns counter resets.

        Its requests and failed requests feed the availability SLI when the deployment has one. Either way,
        a gateway that is not the version the config says is flagged in `warnings[target]`: the SLI and the
        generated rules would read the other version's counters."""
        tid = target.id
        warnings: list[str] = []
        seen = detect_gateway(expo.selected)
        if seen is not None and seen != self.deployment.gateway:
            warnings.append(f"this gateway is {seen}, the config says {self.deployment.gateway}: set `gateway: "
                            f"{seen}` on the router targets (the availability SLI and the generated rules read "
                            f"each version's own counters)")
        self.warnings[tid] = warnings
        kinds = self._gateway_kinds(expo.selected)
        self._counts_client_closed = self._counts_client_closed or any(k == GATEWAY_ANSWERED for k, _ in kinds)
        if not kinds:
            return 0
        now = self._now if ts is None else ts
        born = tid in self._observed
        self._observed[tid] = now
        resets = 0
        updated: set[tuple] = set()
        for kind, samples in kinds:
            for s in samples:
                if not (s.value >= 0 and s.value != float("inf")):
                    warnings.append(f"{s.name}{dict(s.labels)}: value {spell_value(s.value)} is not a count: skipped")
                    continue
                key = (tid, s.name, s.labels)
                if key not in updated:  # a series can count in several kinds (a 5xx: request, failure): one update
                    updated.add(key)
                    sacc = self.book.scalar(key)
                    sacc.seen = now
                    if sacc.update(s.value, born=born):
                        resets += 1
                    elif sacc.decreased:
                        warnings.append(decrease_note(s.name, s.labels, sacc.decreased))
                self._gateway_keys[kind].add(key)
        if resets:
            self.resets[tid] = self.resets.get(tid, 0) + 1
        return 1 if resets else 0

    def _gateway_kinds(self, samples: list[Sample]) -> list[tuple[str, list[Sample]]]:
        """Which of the sidecar's gateway counters `samples` feed: the answers and those whose client left first
        (where the gateway tells them apart), and the availability SLI's two (when the deployment has one)."""
        kinds: list[tuple[str, list[Sample]]] = []
        closed = client_closed_samples(samples, self.deployment.gateway)
        if closed is not None:
            kinds += [(GATEWAY_ANSWERED, closed[0]), (GATEWAY_CLIENT_CLOSED, closed[1])]
        if self.deployment.availability_objective is not None:
            total, bad = availability_samples(samples, self.deployment.gateway)
            kinds += [(GATEWAY_REQUESTS, total), (GATEWAY_FAILED, bad)]
        return kinds

    def restore(self, snapshots: Iterable[Snapshot], book: SeriesBook | None) -> int:
        """Reload history recorded by an earlier run of the sidecar; returns snapshots loaded.

        The accumulator book carries each series' last raw value and reset offset, so the first
        scrape after a restart continues the adjusted (monotone) series instead of starting over.
        """
        n = 0
        regrown: set[str] = set()
        for snap in snapshots:
            if self.store.latest() is not None and snap.ts <= self.store.latest().ts:  # type: ignore[union-attr]
                continue
            snap, dropped = self._as_read_now(snap)
            regrown |= dropped
            self.store.append(snap, BudgetPoint(snap.ts, self._good(snap)))
            n += 1
        if book is not None:
            regrown |= self._book_as_read_now(book)
            self.book = book
            # Series recorded without the time they were last seen count as seen at the last snapshot.
            latest = self.store.latest()
            floor = latest.ts if latest is not None else 0.0
            for acc in (*book.hists.values(), *book.scalars.values()):
                acc.seen = max(acc.seen, floor)
            for key, acc in (*book.hists.items(), *book.scalars.items()):
                self._observed[key[0]] = max(self._observed.get(key[0], 0.0), acc.seen)
            family_sli = {f: sli for sli, f in SLI_FAMILIES.items()}
            for key in book.hists:
                if key[1] in family_sli:
                    self._hist_keys[family_sli[key[1]]].add(key)
            mean_of = {f"{SLI_FAMILIES[sli]}{part}": sli for sli in self._mean_slis for part in ("_sum", "_count")}
            for key in book.scalars:
                if key[1] in mean_of:
                    self._mean_keys[mean_of[key[1]]].add(key)
                    continue
                counters = [c for c, f in COUNTERS.items()
                            if f == key[1] and matches(key[2], COUNTER_MATCHERS.get(c, ()))]
                for cname in counters:
                    self._counter_keys[cname].add(key)
                if not counters and key[1] not in COUNTERS.values():  # a gateway series: which counters it feeds
                    for kind, found in self._gateway_kinds([Sample(key[1], key[2], 0.0)]):
                        if found:
                            self._gateway_keys[kind].add(key)
        self.restore_notes = [f"{sli}: the recording holds it as a mean only (no target for it then): its windows "
                              f"and error budget count from the first scrape after this start" for sli in sorted(regrown)]
        return n

    def _as_read_now(self, snap: Snapshot) -> tuple[Snapshot, set[str]]:
        """A recorded snapshot as this config reads each SLI (`feeds.sli_reading`): one read as a mean only now
        keeps its mean (exact from any layout); one read whole now but recorded as a mean only has no
        distribution to window on, so it is left out, as before its first event. Returns the SLIs left out."""
        hists, dropped = dict(snap.hists), set()
        for sli, h in snap.hists.items():
            if sli not in SLI_FAMILIES:
                continue
            if sli in self._mean_slis:
                if h.edges != MEAN_ONLY_EDGES:
                    hists[sli] = project(h, MEAN_ONLY_EDGES)
            elif h.edges == MEAN_ONLY_EDGES:
                del hists[sli]
                dropped.add(sli)
        return (snap if hists == snap.hists else snap._replace(hists=hists)), dropped

    def _book_as_read_now(self, book: SeriesBook) -> set[str]:
        """The same for a recorded accumulator book: a histogram read as a mean only now continues as its _sum
        and _count counters; one read whole now but recorded as those counters starts again, at 0 on its first
        scrape (`_unborn`: what it counted before left the windows with the snapshots that held it)."""
        family_sli = {f: sli for sli, f in SLI_FAMILIES.items()}
        part_sli = {f"{f}{part}": (sli, f) for f, sli in family_sli.items() for part in ("_sum", "_count")}
        dropped: set[str] = set()
        for key, acc in list(book.hists.items()):
            sli = family_sli.get(key[1])
            if sli in self._mean_slis:
                del book.hists[key]
                raw, off = acc.last_raw, acc.offset
                if raw is None:
                    continue
                for part, pick in (("_sum", lambda h: h.sum), ("_count", lambda h: h.count)):
                    book.scalars[(key[0], key[1] + part, key[2])] = ScalarAccumulator(
                        pick(raw), 0.0 if off is None else pick(off), acc.resets, acc.seen)
        for key in list(book.scalars):
            found = part_sli.get(key[1])
            if found is not None and found[0] not in self._mean_slis:
                del book.scalars[key]
                self._unborn.add((key[0], found[1], key[2]))
                dropped.add(found[0])
        for family, h in list(book.retired_hists.items()):
            sli = family_sli.get(family)
            if sli in self._mean_slis:
                del book.retired_hists[family]
                for part, value in (("_sum", h.sum), ("_count", h.count)):
                    book.retired_scalars[family + part] = book.retired_scalars.get(family + part, 0.0) + value
        for name in list(book.retired_scalars):
            found = part_sli.get(name)
            if found is not None and found[0] not in self._mean_slis:
                del book.retired_scalars[name]
        return dropped

    def _good(self, snap: Snapshot) -> dict[str, tuple[float, float]]:
        good = {}
        for sli in self.deployment.slis:
            h = snap.hists.get(sli)
            target = self.deployment.target_seconds(sli)
            if h is not None and target is not None:
                good[sli] = good_total(h, target)
        available = availability_good_total(snap.counters)
        if available is not None and self.deployment.availability_objective is not None:
            good[AVAILABILITY_SLI] = available
        return good

    def target_down(self, target: Target) -> None:
        """Load gauges of a target that no longer answers are stale: drop them (histograms stay)."""
        self._gauges.pop(target.id, None)

    def _merged(self) -> tuple[dict[str, Hist], dict[str, float]]:
        hists: dict[str, Hist] = {}
        for sli, keys in self._hist_keys.items():
            adjusted = [h for h in (self.book.hists[k].adjusted() for k in keys) if h is not None]
            retired = self.book.retired_hists.get(SLI_FAMILIES[sli])
            if retired is not None:
                # Read on the live series' edges: series retired before a relaunch with other buckets must not
                # narrow the merge to the edges both layouts share.
                adjusted.append(project(retired, common_edges(adjusted)) if adjusted else retired)
            if adjusted:
                hists[sli] = merge(adjusted)
        for sli, keys in self._mean_keys.items():
            family = SLI_FAMILIES[sli]
            parts: dict[str, float] = {}
            for key in keys:
                value = self.book.scalars[key].adjusted()
                if value is not None:
                    parts[key[1]] = parts.get(key[1], 0.0) + value
            for name in (family + "_sum", family + "_count"):
                if name in self.book.retired_scalars:
                    parts[name] = parts.get(name, 0.0) + self.book.retired_scalars[name]
            if parts:
                total, count = parts.get(family + "_sum", 0.0), parts.get(family + "_count", 0.0)
                hists[sli] = Hist(MEAN_ONLY_EDGES, (count,), total, count)
        counters: dict[str, float] = {}
        for cname, keys in self._counter_keys.items():
            vals = [v for v in (self.book.scalars[k].adjusted() for k in keys) if v is not None]
            if retired_key(cname) in self.book.retired_scalars:
                vals.append(self.book.retired_scalars[retired_key(cname)])
            if vals:
                counters[cname] = sum(vals)
        retired = self.book.retired_scalars
        for kind, part in ((GATEWAY_REQUESTS, GATEWAY_FAILED), (GATEWAY_ANSWERED, GATEWAY_CLIENT_CLOSED)):
            whole = [v for v in (self.book.scalars[k].adjusted() for k in self._gateway_keys[kind])
                     if v is not None] + ([retired[kind]] if kind in retired else [])
            if whole or (kind == GATEWAY_ANSWERED and self._counts_client_closed):
                # the part counts 0 until the gateway creates its series (its first failure, 499)
                counters[kind] = sum(whole)
                counters[part] = retired.get(part, 0.0) + sum(
                    v for v in (self.book.scalars[k].adjusted() for k in self._gateway_keys[part]) if v is not None)
        return hists, counters

    def snapshot(self, ts: float, clock_step: float = 0.0) -> float:
        """Record the deployment's merged state at `ts` (once per scrape cycle). Returns how far the
        history was moved because `ts` is before the latest snapshot (the wall clock stepped back:
        see `SnapshotStore.append`) or because the caller measured the wall clock step forward by
        `clock_step` seconds more than the time that passed (0.0 normally)."""
        hists, counters = self._merged()
        snap = Snapshot(ts, hists, counters)
        forward = self.store.step_forward(clock_step) if clock_step > 0 else 0.0
        moved = forward + self.store.append(snap, BudgetPoint(ts, self._good(snap)))
        if not self._now:  # scrapes fed without a time before the first snapshot were taken now
            for acc in (*self.book.hists.values(), *self.book.scalars.values()):
                acc.seen = acc.seen or ts
            for tid, last in self._observed.items():
                self._observed[tid] = last or ts
        if moved:  # the clock stepped back and the history with it: so do the times series were last seen
            for acc in (*self.book.hists.values(), *self.book.scalars.values()):
                acc.seen += moved
            self._observed = {tid: last + moved for tid, last in self._observed.items()}
            self._swept += moved
            if self.tpot_over_since is not None:
                self.tpot_over_since += moved
        self._now = ts
        target = self.deployment.tpot_target_seconds
        if target is not None:
            lead = leading_tpot(self.store, aggregate(self._gauges), ts, LEADING_WINDOW, target)
            self.tpot_over_since = held_since(self.tpot_over_since, lead.over_target, ts)
        if ts - self._swept >= EXPIRY_SWEEP_SECONDS:
            self._swept = ts
            self.expire(ts - SERIES_EXPIRY_SECONDS)
        return moved

    def expire(self, before: float) -> None:
        """Retire the series not scraped since `before` (merged values unchanged, see SeriesBook.expire),
        and forget the targets not scraped since: one that comes back is a first scrape again, whose
        series start counting at 0 there."""
        # A gateway series counts by its labels (one series can be a request and a failure), not by its
        # family: it retires into the availability counters' own totals, not its family's.
        churn = self._churning()
        for key in churn:
            self.churned[key[0]] = self.churned.get(key[0], 0) + 1
        gateway = {key for keys in self._gateway_keys.values() for key in keys
                   if key in self.book.scalars and (self.book.scalars[key].seen < before or key in churn)}
        for kind, keys in self._gateway_keys.items():
            for key in gateway & keys:
                value = self.book.scalars[key].adjusted()
                if value is not None:
                    self.book.retired_scalars[kind] = self.book.retired_scalars.get(kind, 0.0) + value
                keys.discard(key)
        for key in gateway:
            del self.book.scalars[key]
        # Likewise a counter sharing its family with another (a stage's _sum): it retires into its own total.
        for cname in SHARED_FAMILY_COUNTERS:
            keys = self._counter_keys[cname]
            for key in [k for k in keys if k in self.book.scalars and (self.book.scalars[k].seen < before or k in churn)]:
                value = self.book.scalars.pop(key).adjusted()
                if value is not None:
                    self.book.retired_scalars[cname] = self.book.retired_scalars.get(cname, 0.0) + value
                keys.discard(key)
        for key in self.book.expire(before, churn):
            for keys in (*self._hist_keys.values(), *self._counter_keys.values(), *self._mean_keys.values()):
                keys.discard(key)
        for tid in [t for t, last in self._observed.items() if last < before]:
            del self._observed[tid]
            self.warnings.pop(tid, None)
            self._gauges.pop(tid, None)

    def _churning(self) -> set[tuple]:
        """The book's series to retire now for label churn (see CHURN_FACTOR): per target, those absent from its
        latest scrape when they outnumber the present ones CHURN_FACTOR times and CHURN_MIN_SERIES at least."""
        present: dict[str, int] = {}
        absent: dict[str, list[tuple]] = {}
        for key, acc in (*self.book.hists.items(), *self.book.scalars.items()):
            if acc.seen >= self._observed.get(key[0], 0.0):
                present[key[0]] = present.get(key[0], 0) + 1
            else:
                absent.setdefault(key[0], []).append(key)
        out: set[tuple] = set()
        for tid, keys in absent.items():
            if len(keys) > max(CHURN_FACTOR * present.get(tid, 0), CHURN_MIN_SERIES):
                out.update(keys)
        return out

    def state(self, now: float, windows: Mapping[str, int] = SIDECAR_WINDOWS) -> DeploymentState:
        slis = compute_sli_states(self.deployment, self.store, now, windows)
        load = aggregate(self._gauges)
        target = self.deployment.tpot_target_seconds
        leading = None if target is None else with_hold(
            leading_tpot(self.store, load, now, LEADING_WINDOW, target), self.tpot_over_since, now, HOLD_SECONDS)
        return DeploymentState(self.deployment.name, now, slis, load, self._rates(now), leading,
                               compute_availability(self.deployment, self.store, now, windows),
                               compute_client_gone(self.store, now, windows))

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
