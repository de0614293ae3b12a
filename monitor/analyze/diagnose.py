"""The verdict: which mechanism explains the incident, from demand and capacity signals, and how sure it is.

Serving is a queue (monitor.analyze.signals): demand (arrivals, prompt and output lengths, prefix-cache
hits) meets capacity (per-request decode speed, prefill time, spec accept length, KV cache per request,
accelerator health, PD transfers, failures). Running requests, KV usage, the queue, throughput and
utilisation follow from both by Little's law (in the system = arrivals x time in it): they are reported as
consequences, never as the cause.

Each signal is smoothed (a centred moving mean, ANALYSIS_SMOOTH_SECONDS), compared with its baseline level
(median) and counted as moved when it left the baseline band (3 baseline spreads) by at least its
threshold (analyze/tuning.py) for three steps running; events (restarts, targets down, failures,
retractions) count when they happen more than in the baseline. Which mechanism explains which is declared in
one table (monitor/analyze/causes.py) and read here in one generic pass: every mechanism whose own evidence
moved (and passed its gate) is a candidate; candidates are ordered by onset, those within the smoothing's
blur of the first by the table's order; one is explained only through a table entry of a candidate before it,
under that entry's test (TESTS: timing and size, each over the deployment's own data); the first unexplained
one is the cause and the other unexplained ones are named beside it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from monitor.analyze.causes import (
    ABORT_SIGNALS,
    ACCELERATOR_OVERHEAT,
    ACCELERATOR_UNHEALTHY,
    BY_MECHANISM,
    CAUSES,
    CLIENT_GIVE_UP,
    DECODE_SLOWDOWN,
    GATEWAY_ERRORS,
    HEALTHY,
    KV_CAPACITY,
    KV_TRANSFER_FAILURE,
    KV_TRANSFER_SLOWDOWN,
    OVERLOAD,
    PREFILL_SLOWDOWN,
    RESTART,
    SERVER_DOWN,
    SPEC_ACCEPT_DROP,
    STEADY_BREACH,
    THRESHOLDS,
    TITLES,
    UNEXPLAINED,
    Evidence,
)
from monitor.analyze.correlate import CHANGE_RUN, CHANGE_Z, median, spread
from monitor.analyze.giveup import GIVE_UP_MIN, give_up
from monitor.analyze.model import Dataset, Values
from monitor.analyze.signals import CAPACITY, CONSEQUENCE, DEMAND, EVENT, SYMPTOM, Signal, unheld
from monitor.analyze.sli import SliTrack
from monitor.analyze.steady import bad_shares, steady
from monitor.analyze.timeparse import iso
from monitor.analyze.tuning import (
    ANALYSIS_CONSEQUENCE_CHANGE,
    ANALYSIS_MIN_BASELINE_POINTS,
    ANALYSIS_POWER_RISE,
    ANALYSIS_SMOOTH_SECONDS,
    ANALYSIS_TRACE_SHARE,
)
from monitor.conventions.policy import ACCEL_TEMPERATURE_CELSIUS

# The mechanisms, their titles and the causal table live in monitor/analyze/causes.py; re-exported here, where
# the lab and the tests have always found them.
__all__ = ["ACCELERATOR_OVERHEAT", "ACCELERATOR_UNHEALTHY", "CLIENT_GIVE_UP", "DECODE_SLOWDOWN", "GATEWAY_ERRORS",
           "HEALTHY", "KV_CAPACITY", "KV_TRANSFER_FAILURE", "KV_TRANSFER_SLOWDOWN", "OVERLOAD", "PREFILL_SLOWDOWN",
           "RESTART", "SERVER_DOWN", "SPEC_ACCEPT_DROP", "STEADY_BREACH", "TITLES", "UNEXPLAINED", "Shift", "Verdict",
           "verdict"]
CONSEQUENCE_RATIO = ANALYSIS_CONSEQUENCE_CHANGE  # consequences worth naming pass this ratio


@dataclass(frozen=True)
class Shift:
    """One signal over the incident against its baseline."""

    signal: Signal
    baseline: float | None  # level (median of the smoothed baseline)
    incident: float | None  # level while it was off its band (or over the incident when it never left)
    changed_at: float | None  # first step of three off the band (None: never left it)
    moved: bool  # off its band by at least its threshold, in the direction that hurts
    events: float = 0.0  # events in the incident (event signals: value x step summed)
    seconds: float = 0.0  # how long a level event (targets down, chips unhealthy) lasted

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.incident is None or abs(self.baseline) < 1e-12:
            return None
        return self.incident / self.baseline

    def describe(self) -> str:
        """`per-request decode speed fell 2.0x (18.0 → 9.0 tokens/s)`."""
        s = self.signal
        if s.side == EVENT:
            if s.unit in ("targets", "chips"):
                return f"{s.label}: {self.incident or 0:.0f} for {self.seconds:.0f} s"
            if s.unit == "count":  # counted over a lookback by Prometheus: when, not how many
                return f"{s.label} seen"
            return f"{s.label}: {_count(self.events)}"
        b, i = self.baseline, self.incident
        if b is None or i is None:
            return f"{s.label}: no baseline"
        verb = "rose" if i > b else "fell"
        if THRESHOLDS.get(s.key, (0.0, s.unit == "°C"))[1]:
            amount = f"{'+' if i >= b else '−'}{_val(abs(i - b), s.unit)}"
        else:
            r = self.ratio
            amount = f"{max(r, 1 / r):.1f}x" if r and r > 0 else f"{'+' if i >= b else '−'}{_val(abs(i - b), s.unit)}"
        return f"{s.label} {verb} {amount} ({_val(b, s.unit)} → {_val(i, s.unit)})"

    def percent(self) -> str:
        r = self.ratio
        if r is None:
            return f"{self.signal.label} n/a"
        return f"{self.signal.label} {(r - 1) * 100:+.0f} %"


FIRST_LINE_WORDS = 25  # the verdict's first line, at most (#32 item 6)


@dataclass
class Verdict:
    mechanism: str
    confidence: str  # high | medium | low
    headline: str  # the report's first line
    cause: Shift | None
    candidates: list[tuple[str, Shift]]  # every mechanism whose evidence moved: the cause, the others no earlier
    # candidate explains (named beside it), then those one does
    shifts: dict[str, Shift]
    explained: dict[str, str] = dataclasses.field(default_factory=dict)  # mechanism -> the candidate explaining it

    @property
    def title(self) -> str:
        return TITLES[self.mechanism]

    @property
    def first_line(self) -> str:
        """What on-call reads first, in FIRST_LINE_WORDS words at most (#32 item 6): the mechanism, the
        confidence, when it began and how much its own signal moved. `headline` follows it with the rest (the
        demand, the consequences, what contributed, what breached)."""
        head = f"{_cap(self.title)} ({self.confidence} confidence)"
        c = self.cause
        if c is None:  # no incident, nothing found, a steady breach: the title says it; what breached follows
            breached = self.headline.rsplit("; ", 1)[-1].rstrip(".") if self.headline.endswith("breached.") else ""
            line = f"{head}: {breached}." if breached and len(breached.split()) <= 8 else f"{head}."
            return line
        for what in (c.describe(), c.percent() if c.signal.side != EVENT else c.signal.label):
            line = f"{head}{_when(c.changed_at)}: {what}."
            if len(line.split()) <= FIRST_LINE_WORDS:
                return line
        return f"{head}{_when(c.changed_at)}."

    def to_dict(self) -> dict[str, object]:
        def sh(s: Shift) -> dict[str, object]:
            return {"key": s.signal.key, "label": s.signal.label, "side": s.signal.side, "unit": s.signal.unit,
                    "baseline": s.baseline, "incident": s.incident, "ratio": s.ratio, "changed_at": s.changed_at,
                    "moved": s.moved, "events": s.events}

        return {"mechanism": self.mechanism, "title": self.title, "confidence": self.confidence,
                "first_line": self.first_line, "headline": self.headline, "cause": sh(self.cause) if self.cause else None,
                "candidates": [{"mechanism": m, "signal": s.signal.key, "changed_at": s.changed_at,
                                "explained_by": self.explained.get(m)} for m, s in self.candidates],
                "signals": {k: sh(s) for k, s in self.shifts.items()}}


def _val(v: float, unit: str) -> str:
    if unit == "ratio":
        return f"{v:.0%}"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 10 else f"{v:.1f} s"
    if unit == "°C":
        return f"{v:.0f} °C"
    return (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2g}" if abs(v) < 1 else f"{v:.1f}") + f" {unit}"


def _count(n: float) -> str:
    return f"{n:.0f} in the range" if n >= 1 else f"{n:.2g} in the range"


def smooth(vals: Values, half: int) -> Values:
    """Centred moving mean over 2*half+1 points (those with a value); None where none has one."""
    out: list[float | None] = []
    n = len(vals)
    for i in range(n):
        win = [v for v in vals[max(0, i - half):min(n, i + half + 1)] if v is not None]
        out.append(sum(win) / len(win) if win and vals[i] is not None else None)
    return tuple(out)


def smoothed(sig: Signal, half: int) -> Values:
    if sig.parts is not None:
        num, den = (smooth(p, half) for p in sig.parts)
        return tuple(None if a is None or b is None or b < sig.min_den else a / b for a, b in zip(num, den))
    return smooth(sig.values, half)


def _off(v: float, med: float, band: float, threshold: float, absolute: bool) -> int:
    """+1 / -1 when v is off the baseline by more than the band and the threshold, else 0."""
    if abs(v - med) <= band:
        return 0
    if absolute:
        return (1 if v > med else -1) if abs(v - med) >= threshold else 0
    if med <= 0:
        return 1 if v > 0 and med == 0 else 0
    r = v / med
    return 1 if r >= threshold else (-1 if r <= 1 / threshold else 0)


def dispersion(sig: Signal, base_idx: Sequence[int], dt: float) -> float:
    """How much burstier than Poisson a rate's baseline is (the variance of its per-step counts over their mean, 1
    at least): real clients come in bursts (sessions, retries, batch jobs), and a deployment's own baseline says by
    how much, where a Poisson floor alone would read its ordinary bursts as surges."""
    raw = [v for v in (sig.values[i] for i in base_idx) if v is not None]
    if len(raw) < 3:
        return 1.0
    m = sum(raw) / len(raw)
    var = sum((x - m) ** 2 for x in raw) / (len(raw) - 1)
    return max(1.0, var * dt / m) if m > 0 else 1.0


def level_shift(sig: Signal, times: Sequence[float], base_idx: Sequence[int], focus: range, half: int,
                threshold: float, absolute: bool = False) -> Shift:
    """A level signal's change over `focus` against the baseline, in the direction that hurts."""
    sm = smoothed(sig, half)
    focus = range(focus.start, max(focus.start, min(focus.stop, len(times) - half)))
    base = [v for v in (sm[i] for i in base_idx) if v is not None]
    if len(base) < 2:
        inc = [v for v in (sm[i] for i in focus) if v is not None]
        return Shift(sig, None, median(inc) if inc else None, None, False)
    med = median(base)
    band = CHANGE_Z * (spread(base) or 0.0)  # a flat baseline: any move past the threshold counts
    if sig.poisson and len(times) > 1:
        # Arrivals are Poisson: their mean over the smoothing's 2 x half + 1 steps swings by sqrt(rate / seconds)
        # on its own. A baseline of a few points can show less, and a burst at a low rate (0.4 req/s: +-22 % over
        # 50 s) then reads as a surge. A baseline that saw none bounds the rate by the rule of three over its span;
        # one burstier than Poisson widens it by its own dispersion.
        dt = times[1] - times[0]
        rate = max(med, RULE_OF_THREE / (len(base_idx) * dt))
        band = max(band, CHANGE_Z * math.sqrt(dispersion(sig, base_idx, dt) * rate / ((2 * half + 1) * dt)))
    run, start, changed = 0, None, None
    for i in focus:
        v = sm[i]
        side = _off(v, med, band, threshold, absolute) if v is not None else 0
        if side == sig.worse:
            run += 1
            start = i if run == 1 else start
            if run == CHANGE_RUN:
                changed = start
                break
        else:
            run = 0
    if changed is None:
        inc = [v for v in (sm[i] for i in focus) if v is not None]
        return Shift(sig, med, median(inc) if inc else None, None, False)
    # The level while it stayed off (gaps of two steps bridged).
    held, gap, last = [], 0, changed
    for i in range(changed, focus.stop):
        v = sm[i]
        if v is not None and _off(v, med, band, threshold, absolute) == sig.worse:
            held.append(v)
            gap, last = 0, i
        else:
            gap += 1
            if gap > 2:
                break
    level = median(held)
    # When: where the smoothed series crosses halfway from the baseline to the new level (for a step change
    # a centred mean crosses it at the step itself; the band is crossed earlier for a large change).
    mid = (med + level) / 2
    at = next((i for i in range(max(focus.start, changed - half), min(focus.stop, changed + 2 * half + 1))
               if sm[i] is not None and (sm[i] - mid) * sig.worse > 0), changed)  # type: ignore[operator]
    # How long it stayed off (to the range's end when it still was): what an effect of it may not outlast.
    return Shift(sig, med, level, times[at], True, seconds=max(times[last] - times[at], 0.0) + (times[1] - times[0]))


# Events SGLang also has in healthy serving (retractions): their baseline rate is bounded from above, not taken as
# 0, when the baseline saw none (`event_shift`). 3: the rule of three's 95 % upper bound on a Poisson count of 0.
BASELINE_RATE_EVENTS: Final = frozenset({"retractions"})
RULE_OF_THREE: Final = 3.0


def event_shift(sig: Signal, times: Sequence[float], base_idx: Sequence[int], focus: range, step: float) -> Shift:
    """Events happened in the incident (more than the baseline's rate allows)."""
    base = [v for v in (sig.values[i] for i in base_idx) if v is not None]
    top = max(base, default=0.0)
    rate = sum(base) / len(base) if base else 0.0
    inc = [(i, v) for i, v in ((i, sig.values[i]) for i in focus) if v is not None]
    per_step = sig.unit in ("count", "targets", "chips")  # counts per step or levels, not rates
    total = sum(v for _, v in inc) * (1.0 if per_step else step)
    level = max((v for _, v in inc), default=0.0)
    first = next((times[i] for i, v in inc if v > top + 1e-9), None)
    if sig.unit in ("targets", "chips"):  # a level: how many at most, and for how long
        steps = sum(1 for _, v in inc if v > top + 1e-9)
        moved = first is not None and steps >= 2
        return Shift(sig, rate, level, first if moved else None, moved, level, steps * step)
    expected = rate * len(inc) * (1.0 if per_step else step)
    if sig.key in BASELINE_RATE_EVENTS and base:
        # SGLang retracts requests in healthy long decodes too: a baseline that saw none bounds their rate by the
        # rule of three (3 events over its span, 95 %), not by 0, so one retraction under a surge is no lost KV
        # capacity; a pool that shrank retracts many more (#32 item 2: scaled by the baseline, not the emulator).
        span = len(base) * (1.0 if per_step else step)
        expected = max(expected, RULE_OF_THREE / span * len(inc) * (1.0 if per_step else step))
    moved = first is not None and total >= 1.0 - 1e-9 and total > 3 * expected
    mean = sum(v for _, v in inc) / len(inc) if inc else None
    return Shift(sig, rate, mean, first if moved else None, moved, total)


def half_width(step: float, window: float) -> int:
    """Points each side of the centred mean: ANALYSIS_SMOOTH_SECONDS, never more than half the SLI window."""
    return max(1, round(min(ANALYSIS_SMOOTH_SECONDS, window / 2) / step / 2))


def shifts(signals: dict[str, Signal], times: Sequence[float], base_idx: Sequence[int], focus: range,
           step: float, half: int) -> dict[str, Shift]:
    th = THRESHOLDS
    out = {}
    for key, sig in signals.items():
        if sig.side == EVENT:
            out[key] = event_shift(sig, times, base_idx, focus, step)
        else:
            t, absolute = th.get(key, (CONSEQUENCE_RATIO, False))
            out[key] = level_shift(sig, times, base_idx, focus, half, t, absolute)
    t = out.get("temperature")
    # The chip's own slowdown temperature where its telemetry reports one (NVML, DCGM), else the alert's.
    limit = ACCEL_TEMPERATURE_CELSIUS if t is None or t.signal.ceiling is None else t.signal.ceiling
    if t is not None and not t.moved and t.incident is not None and t.baseline is not None and \
            t.baseline < limit <= t.incident and t.incident - t.baseline >= 5:
        # Crossing the throttle temperature counts whatever the rise.
        out["temperature"] = level_shift(signals["temperature"], times, base_idx, focus, half, 5.0, True)
    t = out.get("temperature")
    if t is not None and t.moved and _warming_is_load(signals, t, times, base_idx, focus, half, led=True):
        out["temperature"] = Shift(t.signal, t.baseline, t.incident, None, False)
    return out


def _warming_is_load(signals: dict[str, Signal], t: Shift, times: Sequence[float], base_idx: Sequence[int],
                     focus: range, half: int, *, led: bool) -> bool:
    """A chip's warming that its power explains: load, not heat. A chip warms when it works harder, and then its
    power rises first (the die's heat lags the power it draws); an overheating one (cooling, fans, ambient) warms
    first and throttles. `led`: a warming that moved must also have been led by a power rise (or come with it,
    within the smoothing's reach: a centred mean of 2 x half + 1 points dates a step to +-half points); a faint
    one (a trace) needs only the bound. A die's rise above its inlet air is proportional to its power
    (`_warming_per_power`); a throttled chip holds requests longer, and Little's law then raises its power by a
    little too, far short of its warming. False for a signal that is no temperature."""
    if t.signal.unit != "°C" or "power" not in signals:
        return False
    p = level_shift(signals["power"], times, base_idx, focus, half, ANALYSIS_POWER_RISE)
    if led and not (p.moved and p.changed_at is not None and t.changed_at is not None and
                    p.changed_at <= t.changed_at + half * (times[1] - times[0])):
        return False
    return _power_explains(signals, t, p, focus, half)


def _power_explains(signals: dict[str, Signal], t: Shift, p: Shift, focus: range, half: int) -> bool:
    """The warming is no more than the power drawn while the chip was warm (at least halfway to its new level)
    accounts for (`_warming_per_power`), against the baseline's power: not the level power first moved to, which
    on a noisy wall-clock series can be a bump before the rise."""
    if t.baseline is None or t.incident is None or not p.baseline:
        return False
    rise = t.incident - t.baseline
    temp_sm, power_sm = smoothed(t.signal, half), smoothed(signals["power"], half)
    warm = [w for c, w in ((temp_sm[i], power_sm[i]) for i in focus)
            if c is not None and w is not None and c - t.baseline >= rise / 2]
    return bool(warm) and rise <= _warming_per_power(t.baseline, p.baseline) * (median(warm) - p.baseline)


def _warming_per_power(t_base: float, p_base: float) -> float:
    """The most degrees a chip's power can explain per watt (#32 item 2): a die's rise above its inlet air is
    proportional to its power, and no inlet is colder than 0 degC, so at most t_base / p_base degrees per watt;
    generous to load, from the chip's own baseline. Before, a fixed 25 degC inlet (the emulator's) stood in for
    the hall's air, and a chip at 40 degC whose power doubled read overheating. A slope fitted to the
    baseline's own (power, temperature) points was tried and dropped: the die's thermal lag smooths the power's
    swings, so the fit sees a fraction of the steady-state slope, and the grid read load rises as overheating."""
    return max(t_base, 0.0) / p_base if p_base > 0 else 0.0


def traces(signals: dict[str, Signal], times: Sequence[float], base_idx: Sequence[int], focus: range,
           half: int, sh: dict[str, Shift]) -> list[Shift]:
    """Demand and capacity signals that left their baseline's noise band the way that hurts, by at least
    ANALYSIS_TRACE_SHARE of their threshold, without counting as moved: a weak incident's footprint (a 1.3x
    prefill slowdown under a 1.5x threshold), too faint to name, too large to call nothing."""
    out = []
    for key, (th, absolute) in THRESHOLDS.items():
        sig, done = signals.get(key), sh.get(key)
        if sig is None or sig.side not in (DEMAND, CAPACITY) or done is None or done.moved:
            continue
        faint = th * ANALYSIS_TRACE_SHARE if absolute else th ** ANALYSIS_TRACE_SHARE
        s = level_shift(sig, times, base_idx, focus, half, faint, absolute)
        if not s.moved or sig.inferred:  # an estimate's faint move is no footprint (a slower engine makes it)
            continue
        if _warming_is_load(signals, s, times, base_idx, focus, half, led=False):
            continue  # a chip that warmed no more than its power explains worked harder: load, not heat
        out.append(s)
    return out


@dataclass(frozen=True)
class Context:
    """What the table's tests and gates read: the shifts, the signals and where the baseline and range are."""

    sh: dict[str, Shift]
    signals: dict[str, Signal]
    base_idx: Sequence[int]
    focus: range
    half: int
    step: float  # seconds between grid points
    tie: float  # the smoothing's blur in seconds: onsets closer than this are "together"


@dataclass(frozen=True)
class Candidate:
    mechanism: str
    shift: Shift  # its own signal that moved first
    order: int  # its row in CAUSES (the more specific, the lower)

    @property
    def onset(self) -> float:
        return self.shift.changed_at if self.shift.changed_at is not None else math.inf


def _served(c: Context, s: Shift) -> bool:
    """A measured signal always counts; an inferred arrival rise (finished + the change in the system, which a
    slower engine also raises by holding requests longer) only when more work was served from about its onset:
    finished requests or generated tokens per second rose with it."""
    if not s.signal.inferred or s.changed_at is None:
        return True
    at = s.changed_at
    return any(k in c.sh and c.sh[k].moved and (c.sh[k].ratio or 0) > 1 and c.sh[k].changed_at is not None
               and at - c.tie <= c.sh[k].changed_at <= at + 2 * c.tie for k in ("finished", "throughput"))


def _unheld(c: Context, s: Shift) -> bool:
    """KV no running request holds counts as a pool that lost tokens only past what the requests in prefill hold:
    each holds its prompt's KV outside the running batch, and by Little's law there are arrivals x prefill time of
    them, so a slower prefill or more arrivals hold more there (each about what a running request held through the
    baseline). What is left must reach the signal's own threshold. This reads both levels whether or not they moved
    (a prefill 1.3x slower on a busy server holds a tenth of the pool more) and before the prefill time itself, which
    is measured only as each prefill ends."""
    pre, kv, arr = c.sh.get("prefill_time"), c.sh.get("kv_per_running"), c.sh.get("arrivals")
    rise = (s.incident or 0.0) - (s.baseline or 0.0)
    extra = 0.0
    if pre is not None and kv is not None and arr is not None and kv.baseline is not None:
        levels = (pre.baseline, pre.incident, arr.baseline, arr.incident)
        if all(x is not None for x in levels):
            w0, w1, l0, l1 = levels
            extra = max(l1 * w1 - l0 * w0, 0.0) * kv.baseline  # type: ignore[operator]
    return rise > extra + _slack(s)


def _fallback(c: Context, s: Shift, own: Sequence[Evidence] = ()) -> bool:
    """Read only when none of the mechanism's other own signals has a baseline to compare with."""
    return not any(e.key != s.signal.key and e.key in c.sh and c.sh[e.key].baseline is not None for e in own)


def _always(c: Context, s: Shift, own: Sequence[Evidence] = ()) -> bool:
    return True


def _paced(c: Context, s: Shift, own: Sequence[Evidence] = ()) -> bool:
    """A slower decode step counts as the engine's own only where the batch did not lead it: running requests that
    rose first, by more than the slowdown itself grows them (Little's law) and by as much as makes the step this
    much slower on this deployment (`_swing_batch`), are the load's own swing (a busy server's Poisson bursts),
    and the slower step is theirs. A slowdown of the engine leads the batch it grows. Only by the speed per batch
    size measured on this deployment's baseline: the physical bound that stands in without one explains, it does
    not dismiss."""
    run = c.sh.get("running")
    led = run is not None and run.moved and run.changed_at is not None and s.changed_at is not None \
        and run.changed_at < s.changed_at
    return not (led and _swing_batch(c, s, fitted=True))


# A gate is a test of whether the signal is read (READ: "fallback", only without ITL) and a test of size that may
# dismiss a move (SIZE: the load's swing makes it); both must pass.
READ_GATES: Final = {"fallback": _fallback}
# A move a size test dismissed: a second incident of that kind inside the swing's reach passes it too, so it keeps
# the verdict from "high", as one the table explained away does (`_ambiguous`).
SIZE_GATES: Final = {"paced": _paced, "fallback": _paced}


def _gate(name: str) -> Callable[..., bool]:
    read, size = READ_GATES.get(name, _always), SIZE_GATES.get(name, _always)
    return lambda c, s, own=(): read(c, s, own) and size(c, s, own)


GATES: Final = {"served": lambda c, s, own: _served(c, s), "unheld": lambda c, s, own: _unheld(c, s),
                 "fallback": _gate("fallback"), "paced": _gate("paced")}


def _dismissed(c: Context) -> list[Shift]:
    """Own signals of a mechanism that moved past their threshold, were read, and a size gate dismissed."""
    return [c.sh[e.key] for cause in CAUSES for e in cause.own
            if e.gate in SIZE_GATES and e.key in c.sh and c.sh[e.key].moved and c.sh[e.key].changed_at is not None
            and READ_GATES.get(e.gate, _always)(c, c.sh[e.key], cause.own)
            and not SIZE_GATES[e.gate](c, c.sh[e.key], cause.own)]


def _after(c: Context, lead: Candidate, other: Candidate) -> bool:
    return other.onset >= lead.onset - c.tie


def _soon(c: Context, lead: Candidate, other: Candidate) -> bool:
    """While the mover lasted (a server down for a while) or within two blurs after it."""
    return lead.onset - c.tie <= other.onset <= lead.onset + lead.shift.seconds + 2 * c.tie


def _slowdown(s: Shift) -> float:
    """How many times slower: a latency's ratio, a speed's inverse."""
    r = s.ratio
    if not r or r <= 0:
        return 1.0
    return r if s.signal.worse > 0 else 1 / r


def _level(c: Context, key: str) -> tuple[float, float] | None:
    """(baseline level, level over the range) of a consequence signal."""
    s = c.sh.get(key)
    if s is None or s.baseline is None or s.incident is None:
        return None
    return s.baseline, s.incident


def batch_slowdown(c: Context, key: str, fitted: bool = False) -> float | None:
    """How much slower each decode step is at the range's running requests than at the baseline's, by this
    deployment's own speed per batch size: the baseline's smoothed (running, step time) points fitted by least
    squares, the slope's upper 95 % bound taken (generous to load), never below 0 nor above proportional (a step
    is the weights read once plus each request's KV: at most as much slower as the batch is bigger). Step time is
    ITL, or the inverse of per-request decode speed. None without a running-requests level, and with `fitted`
    where nothing could be fitted (a bound to explain a move by, never one to dismiss it with)."""
    run = _level(c, "running")
    sig = c.signals.get(key)
    if run is None or sig is None or run[0] <= 0:
        return None
    rs, ys = smoothed(c.signals["running"], c.half), smoothed(sig, c.half)
    inv = sig.worse < 0  # a speed: its inverse is the step time
    pts = [(rs[i], (1 / ys[i] if inv else ys[i])) for i in c.base_idx
           if rs[i] is not None and ys[i] is not None and (ys[i] > 0 or not inv)]  # type: ignore[operator]
    grow = max(run[1] / run[0], 1.0)
    if len(pts) < 6:
        return None if fitted else grow
    xs, zs = [p[0] for p in pts], [p[1] for p in pts]
    mx, mz = sum(xs) / len(xs), sum(zs) / len(zs)
    sxx = sum((x - mx) ** 2 for x in xs)
    if mz <= 0:
        return None if fitted else grow
    if sxx <= 1e-12:
        return None if fitted else grow  # the batch never varied: nothing to fit, the physical bound stands
    b = sum((x - mx) * (z - mz) for x, z in zip(xs, zs)) / sxx
    resid = sum((z - mz - b * (x - mx)) ** 2 for x, z in zip(xs, zs)) / max(len(xs) - 2, 1)
    upper = b + t975(len(xs) - 2) * math.sqrt(resid / sxx)
    per_request = min(max(upper, 0.0), mz / mx if mx > 0 else 0.0)  # proportional at most
    return max(1.0, (mz + per_request * (run[1] - mx)) / mz)


def t975(dof: int) -> float:
    """Student's t at 97.5 % for `dof` degrees of freedom (Cornish-Fisher from the normal's 1.96, within 2 % of the
    table from 4 on; 1 to 3 from the table): a slope fitted on a short baseline's few points is that much less sure
    than the normal's 1.96 says."""
    if dof < 4:
        return (12.71, 12.71, 4.30, 3.18)[max(dof, 0)]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)


def _batch(c: Context, lead: Candidate, other: Candidate) -> bool:
    """After, and no slower than the grown batch makes each step (by one decode threshold)."""
    return _after(c, lead, other) and _batch_size(c, other.shift, _slack(other.shift))


def _batch_size(c: Context, s: Shift, slack: float = 1.0, fitted: bool = False) -> bool:
    grown = batch_slowdown(c, s.signal.key, fitted)
    return grown is not None and _slowdown(s) <= grown * slack


def _work_size(c: Context, s: Shift) -> bool:
    """No slower than the prefill work arriving grew (arrivals x prompt length)."""
    grow = 1.0
    for key in ("arrivals", "prompt_len"):
        lv = _level(c, key)
        if lv is not None and lv[0] > 0:
            grow *= max(lv[1] / lv[0], 1.0)
    return _slowdown(s) <= grow


def _work(c: Context, lead: Candidate, other: Candidate) -> bool:
    """After, no slower than the prefill work arriving grew (arrivals x prompt length), and not for longer: a
    chunked prefill is slower while the prefills beside it are more, so it cannot outlast the demand that
    moved it by more than the smoothing's blur (a resent backlog is a burst; a slowdown that stays is its own)."""
    if not _after(c, lead, other):
        return False
    if lead.shift.seconds and other.onset + other.shift.seconds > lead.onset + lead.shift.seconds + 2 * c.tie:
        return False
    return _work_size(c, other.shift)


def _slack(s: Shift) -> float:
    """One of the signal's own thresholds: what its noise may add before a size test says "more"."""
    return THRESHOLDS.get(s.signal.key, (CONSEQUENCE_RATIO, False))[0]


def _bounded(c: Context, lead: Candidate, other: Candidate) -> bool:
    """After, and no slower than the mover's own move (a step made of a slower part slows at most as much)."""
    return _after(c, lead, other) and _slowdown(other.shift) <= _slowdown(lead.shift) * _slack(other.shift)


def _same(c: Context, lead: Candidate, other: Candidate) -> bool:
    """After, and no slower than the mover's other phases (a throttle slows every phase alike): compared with the
    slowest of the other phase signals it can move that moved; with none of them moved, after is enough."""
    if not _after(c, lead, other):
        return False
    keys = {e.key for mv in BY_MECHANISM[lead.mechanism].moves for e in BY_MECHANISM[mv.mechanism].own
            if mv.test == "same"} - {e.key for e in BY_MECHANISM[other.mechanism].own}
    phases = [_slowdown(c.sh[k]) for k in keys if k in c.sh and c.sh[k].moved]
    return not phases or _slowdown(other.shift) <= max(phases) * _slack(other.shift)


def _backlog(c: Context, lead: Candidate, other: Candidate) -> bool:
    """Soon, and the arrivals above the baseline's rate add up to no more than what that rate brought while the
    server was away, twice over (a resent backlog, by conservation; more is a surge)."""
    if not _soon(c, lead, other) or other.shift.baseline is None:
        return False
    base, sig = other.shift.baseline, other.shift.signal
    extra = sum(max((sig.values[i] or 0.0) - base, 0.0) * c.step for i in c.focus if sig.values[i] is not None)
    away = max(lead.shift.seconds, c.step)
    return extra <= 2 * base * away


def _per_event(c: Context, lead: Candidate, other: Candidate) -> bool:
    """Together (within the smoothing's blur), and no more events than the mover's: one failure aborts its
    request at once, so the aborts it explains begin with the failures; aborts that begin later are others'."""
    return abs(other.onset - lead.onset) <= c.tie and other.shift.events <= lead.shift.events


def _cold(c: Context, lead: Candidate, other: Candidate) -> bool:
    """Soon, and no slower than losing the baseline's prefix-cache hits makes a prefill (one threshold's slack)."""
    if not _soon(c, lead, other):
        return False
    hit = c.sh.get("cache_hit")
    h = hit.baseline if hit is not None and hit.baseline is not None else 0.0
    return _slowdown(other.shift) <= _slack(other.shift) / max(1.0 - min(h, 0.99), 0.01)


def _swing_batch(c: Context, s: Shift, fitted: bool = False) -> bool:
    """The batch's size test for a faint move no candidate leads, and only where the batch grew more than the move
    itself grows it: with demand flat, a step slower by s holds each request s times longer, so by Little's law
    the batch grows about s times on its own; a batch that grew no more than that is the slowdown's consequence,
    not the load's swing."""
    run = _level(c, "running")
    return run is not None and run[0] > 0 and run[1] / run[0] > _slowdown(s) and _batch_size(c, s, fitted=fitted)


# The tests of size alone, for a faint move that no candidate leads (`_load_explains`).
SIZE_TESTS: Final = {"batch": _swing_batch, "work": _work_size}
TESTS: Final = {"after": _after, "soon": _soon, "batch": _batch, "work": _work, "bounded": _bounded,
                "same": _same, "backlog": _backlog, "count": _per_event, "cold": _cold}


def _candidates(c: Context) -> list[Candidate]:
    """Every mechanism whose own signal moved (and passed its gate), ordered by onset; those within the blur of
    the first by the table's order."""
    found: list[Candidate] = []
    for order, cause in enumerate(CAUSES):
        moved = [c.sh[e.key] for e in cause.own if e.key in c.sh and c.sh[e.key].moved
                 and c.sh[e.key].changed_at is not None
                 and (not e.gate or GATES[e.gate](c, c.sh[e.key], cause.own))]
        if moved:
            found.append(Candidate(cause.mechanism, min(moved, key=lambda s: s.changed_at), order))  # type: ignore[arg-type, return-value]
    if not found:
        return []
    t0 = min(x.onset for x in found)
    return sorted(found, key=lambda x: (x.onset > t0 + c.tie, x.order if x.onset <= t0 + c.tie else 0, x.onset))


def explained_by(c: Context, cands: Sequence[Candidate], i: int) -> Candidate | None:
    """The candidate before `cands[i]` whose table entry moves its signal under a test that holds, if any."""
    other = cands[i]
    for lead in cands[:i]:
        for mv in BY_MECHANISM[lead.mechanism].moves:
            if mv.mechanism == other.mechanism and (not mv.signals or other.shift.signal.key in mv.signals) \
                    and TESTS[mv.test](c, lead, other):
                return lead
    return None


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _when(t: float | None) -> str:
    return f" at {iso(t)[11:]}" if t is not None else ""


def _demand_clause(sh: dict[str, Shift], overload: bool) -> str:
    demand = [s for s in sh.values() if s.signal.side == DEMAND]
    if overload:
        moved = sorted((s for s in demand if s.moved), key=lambda s: s.changed_at or 0)
        return "; ".join(f"{s.describe()}{_when(s.changed_at)}" for s in moved)
    parts = [s.percent() for s in demand if s.signal.key in ("arrivals", "prompt_len", "output_len")
             and s.ratio is not None]
    if not parts:
        return "demand not measured"
    arr = sh.get("arrivals")
    if arr is not None and arr.moved and arr.signal.inferred:  # a rise that no extra work served: requests held longer
        return (f"demand flat but for the inferred arrivals ({', '.join(parts)}; the arrival estimate rose with "
                "requests held longer, and no more work was served)")
    if arr is not None and arr.moved:
        return f"demand rose ({', '.join(parts)})"
    return f"demand flat ({', '.join(parts)})"


CONSEQUENCE_ORDER = ("running", "queued", "token_usage", "utilization", "power", "finished", "throughput",
                     "aborted")


def _consequences(sh: dict[str, Shift], cause: Shift | None, restates: frozenset[str] = frozenset(),
                  named: frozenset[str] = frozenset()) -> list[Shift]:
    """Consequences that moved (less those that restate the cause's own evidence), then capacity signals that moved
    and are neither the cause nor the evidence of a mechanism named beside it (`named`)."""
    out = [sh[k] for k in CONSEQUENCE_ORDER if k in sh and sh[k].moved and k not in restates]
    if cause is not None:
        out += [s for s in sh.values() if s.signal.side == CAPACITY and s.moved and s is not cause
                and s.signal.key not in named]
    return out


def verdict(ds: Dataset, tracks: dict[str, SliTrack], signals: dict[str, Signal], base_idx: Sequence[int],
            focus: range, breached: list[str], baseline_ok: bool, window: float, *,
            independent: bool = True) -> Verdict:
    """The mechanism behind the incident in `focus` (indices into ds.times), against `base_idx`; `signals`: what
    `signals.derive` gives for `ds` and `tracks`. A baseline that is not `independent` of the range (taken from
    inside it) caps the confidence at medium (#32 item 6)."""
    half = half_width(ds.step, window)
    kv = unheld(signals.get("kv_per_running"), base_idx)  # read against the baseline's own KV per request
    if kv is not None:
        signals = {**signals, kv.key: kv}
    sh = shifts(signals, ds.times, base_idx, focus, ds.step, half)
    dropped = _gate_give_up(ds, sh, base_idx, focus)
    tie = (half + 1) * ds.step  # smoothing blurs timing by this much: closer is "together", not "before"
    ctx = Context(sh, signals, base_idx, focus, half, ds.step, tie)
    ordered = _candidates(ctx)
    by = [explained_by(ctx, ordered, i) for i in range(len(ordered))]
    free = [x for x, e in zip(ordered, by) if e is None]  # what no earlier candidate explains
    cands = [(x.mechanism, x.shift) for x in free] + [(x.mechanism, x.shift) for x, e in zip(ordered, by) if e]
    explained = {x.mechanism: e.mechanism for x, e in zip(ordered, by) if e is not None}
    breach = f"{_join([b.upper() for b in breached])} breached" if breached else "every SLI within its objective"
    # Demand and capacity moves too faint to name: they keep "no incident" from being said with confidence.
    faint = [t for t in traces(signals, ds.times, base_idx, focus, half, sh) if not _load_explains(ctx, t)] \
        if not cands else []
    if not cands and breached and baseline_ok:
        queue = sh.get("queued")
        moved = [s for s in sh.values() if s.moved and s.signal.side == CONSEQUENCE]
        level = not _level_moved(signals, ds.times, base_idx, focus, half)
        # A trace is under the threshold that names a cause: it names none, so it no longer keeps a breach made
        # of waiting alone (or of nothing) from reading as the load's own spread; the first line still lists it.
        held = steady(bad_shares(tracks, breached, base_idx, focus), queue.baseline if queue else None,
                      bursts=not dropped and _waiting_only(moved), quiet=not moved and not dropped and level,
                      level_held=level)
        if held is not None:
            # Low: a weak incident (a slowdown of 1.3x on a busy server) can hide in the same noise.
            conf = "low"
            bursts = [t for t in faint if _arrival_burst(t)]
            others = [t for t in faint if not _arrival_burst(t)]
            burst = (f" ({_join([t.describe() for t in bursts])}: under the threshold that names an overload, the "
                     "bursts themselves)" if held.kind == "bursts" and bursts else "")
            if others:
                burst += (f"; {_join([t.describe() for t in others])}: under the threshold to name a cause, but past "
                          "the baseline's noise (a weak incident may hide here)")
            head = (f"{_cap(TITLES[STEADY_BREACH])} ({conf} confidence): {breach}, but nothing in demand or capacity "
                    f"changed ({_demand_clause(sh, False)}; capacity within its baseline); {held.describe()}{burst}. "
                    "A capacity-planning finding (add capacity or revisit the target), not an incident.")
            return Verdict(STEADY_BREACH, conf, head, None, [], sh)
    if not cands:
        mech = UNEXPLAINED if breached else HEALTHY
        moved = [s for s in sh.values() if s.moved and s.signal.side == CONSEQUENCE]
        # "No incident" is said with high confidence only when nothing left its noise band either: no faint
        # demand or capacity move, and no consequence that moved without a cause (more requests running or
        # more KV held is something happening, even when no SLI suffered yet).
        # Never "high": a range where nothing left its noise band cannot rule out an incident weaker than that
        # noise (the lab's weak slowdowns and timeouts read so), so "nothing happened" is said at medium at best.
        conf = "low" if breached or faint or moved or dropped else "medium"
        tail = (f"; only consequences moved ({_join([s.signal.label for s in moved])}): look outside the "
                "engine (clients, network) or widen the range" if moved and breached else
                f"; {_join([s.describe() for s in moved + dropped])} with no cause found" if moved or dropped
                else "")
        if faint:
            tail += (f"; {_join([s.describe() for s in faint])}: under the threshold to name a cause, but past "
                     "the baseline's noise (a weak incident may hide here)")
        # Without a trusted baseline nothing was compared: say so rather than "within its baseline".
        capacity = ("capacity within its baseline" if baseline_ok else
                    "no trusted baseline to compare demand and capacity with (pass --baseline)")
        head = (f"{_cap(TITLES[mech])} ({conf} confidence): {breach}; {_demand_clause(sh, False)}; "
                f"{capacity}{tail}.")
        return Verdict(mech, conf, head, None, [], sh)
    mech, cause = cands[0]
    named = frozenset(e.key for x in free[1:] for e in BY_MECHANISM[x.mechanism].own)
    conseq = _consequences(sh, cause, BY_MECHANISM[mech].restates, named)
    early = [s for s in conseq if s.changed_at is not None and cause.changed_at is not None
             and s.changed_at < cause.changed_at - tie]
    strong = cause.signal.side == EVENT or _strength(cause) >= 2.0
    own = {e.key for e in BY_MECHANISM[mech].own} | set(BY_MECHANISM[mech].explains) | {
        e.key for mv in BY_MECHANISM[mech].moves for e in BY_MECHANISM[mv.mechanism].own}
    faint_other = [t for t in traces(signals, ds.times, base_idx, focus, half, sh) if t.signal.key not in own]
    # Many aborts that piled at no one age (`dropped`): clients left for a reason the histogram could not read, and a
    # timeout of theirs may be a second incident; not "high" unless the cause itself explains aborts.
    unread = [s for s in dropped if s.events >= GIVE_UP_MIN and not ABORT_SIGNALS & own]
    dismissed = _dismissed(ctx)
    conf = "high" if strong and not early and baseline_ok and independent and not _ambiguous(free, explained, tie) \
        and not faint_other and not unread and not dismissed else ("low" if early and not strong else "medium")
    on_demand = cause.signal.side == DEMAND
    demand = _demand_clause(sh, on_demand)
    if on_demand:
        head = f"{_cap(TITLES[mech])} ({conf} confidence): {demand} -> {mech}"
    else:
        head = (f"{_cap(TITLES[mech])} ({conf} confidence): {demand}; "
                f"{cause.describe()}{_when(cause.changed_at)} -> {TITLES[mech]}")
    through = [s for s in conseq if s.signal.side == CAPACITY]
    if through:
        head += f" ({_join([s.describe() for s in through])})"
    rose = [s.signal.label for s in conseq if s.signal.side == CONSEQUENCE and s.incident is not None
            and s.baseline is not None and s.incident > s.baseline]
    if rose:
        head += f"; {_join(rose)} rose as a consequence (Little's law: running = arrivals × duration)"
    # Every other mechanism that moved on its own (no earlier one explains it through the table), in onset order.
    for other in sorted(free[1:], key=lambda x: x.onset):
        head += f"; with {TITLES[other.mechanism]} contributing ({other.shift.describe()}{_when(other.shift.changed_at)})"
    if explained:
        head += "; " + "; ".join(f"{TITLES[k]} explained by {TITLES[v]}" for k, v in explained.items())
    head += f"; {breach}."
    return Verdict(mech, conf, head, cause, cands, sh, explained)


# The consequences a busy server's own arrival bursts move with nothing else changed: requests waiting and running,
# the KV they hold, the chips' work on them, and a PD request's waits for a slot (queueing theory: at utilisation
# rho the number in the system varies as rho / (1 - rho)^2, more than a baseline of a minute or two shows).
WAITING: Final = frozenset({"queued", "running", "token_usage", "utilization", "power", "pd.bootstrap",
                            "pd.prefill_queue", "pd.decode_queue"})
WAITING_OR_LEFT: Final = WAITING | {"aborted"}  # and the requests whose clients left a long wait


def _waiting_only(moved: Sequence[Shift]) -> bool:
    """Some requests-in-the-system consequence moved, and nothing else did but aborts: a client that leaves a
    long wait is the queue's consequence too (SGLang aborts a request whose client went away)."""
    keys = {s.signal.key for s in moved}
    return bool(keys & WAITING) and keys <= WAITING_OR_LEFT


def _arrival_burst(t: Shift) -> bool:
    """A faint rise of the arrival rate: under the threshold that names an overload, it is the arrivals' own burst
    (Poisson arrivals swing past a short baseline's band now and then), which is what a "bursts" reading says."""
    return t.signal.poisson and t.signal.side == DEMAND and (t.ratio or 0) > 1


def _load_explains(c: Context, t: Shift) -> bool:
    """A faint capacity move the load's own swing accounts for, read from the table: the load (OVERLOAD) moves
    the mechanism owning the signal under a size test that holds on the deployment's own measures (a decode
    step no slower than the grown batch makes it, a prefill no slower than the prefill work arriving grew)."""
    owners = {cause.mechanism for cause in CAUSES if any(e.key == t.signal.key for e in cause.own)}
    return any(mv.mechanism in owners and mv.test in SIZE_TESTS and SIZE_TESTS[mv.test](c, t)
               for mv in BY_MECHANISM[OVERLOAD].moves)


def _ambiguous(free: Sequence[Candidate], explained: dict[str, str], tie: float) -> bool:
    """What keeps a strong cause from "high": (1) it is named alone while another mechanism's own signal moved
    and the table explained it away: that rests on the table's tests of timing and size, which a second incident
    of the explained kind passes too when it starts inside the first one's reach; (2) another mechanism moved on
    its own within the smoothing's blur of the cause: which one led is then the table's order, not the data."""
    if len(free) == 1 and explained:
        return True
    return any(abs(x.onset - free[0].onset) <= tie for x in free[1:])


def _level_moved(signals: dict[str, Signal], times: Sequence[float], base_idx: Sequence[int], focus: range,
                 half: int) -> bool:
    """An SLI's own mean (TPOT, TTFT) left its baseline's noise by a trace's share of a consequence's threshold:
    its whole level moved, not only its tail (a tail that breaches while the mean holds is the load's own spread;
    a mean 1.5x higher with nothing else moved is something the deployment does not expose)."""
    faint = CONSEQUENCE_RATIO ** ANALYSIS_TRACE_SHARE
    return any(level_shift(s, times, base_idx, focus, half, faint).moved for s in signals.values()
               if s.side == SYMPTOM)


def _gate_give_up(ds: Dataset, sh: dict[str, Shift], base_idx: Sequence[int], focus: range) -> list[Shift]:
    """Aborts count as clients giving up only when they piled at one age (monitor/analyze/giveup.py): the
    `gave_up` shift is relabelled with that age, or left as not moved. Returns the aborts that rose by
    ANALYSIS_TRACE_SHARE x GIVE_UP_MIN or more at no one age (something happened, even if not a timeout, or
    too few of them to read an age from: a trace, like a demand or capacity move under its threshold)."""
    left = sh.get("gave_up")
    if left is None or not left.moved:
        return []
    vals = left.signal.values
    top = max((vals[i] or 0.0 for i in base_idx), default=0.0)
    during = [i for i in focus if (vals[i] or 0.0) > top]  # the steps of the aborts, not the whole range
    hists, aborted = ds.hists.get("e2e") or (), sum((vals[i] or 0.0) * ds.step for i in during)
    age = give_up(hists, base_idx, during, aborted)
    if age is None and during:
        # Against how requests ended just before the aborts began, where the range holds enough of it: an earlier
        # incident (a slower prefill, a restart's cold cache) moved every request's E2E, and the pile a timeout
        # makes stands out from that, not from the baseline's.
        before = [i for i in focus if i < during[0]]
        if len(before) >= max(ANALYSIS_MIN_BASELINE_POINTS, len(base_idx) // 2):
            age = give_up(hists, before, during, aborted)
    if age is not None:
        sh["gave_up"] = dataclasses.replace(left, signal=dataclasses.replace(
            left.signal, label=f"requests aborted at {age.lo:g}–{age.hi:g} s of age"))
        return []
    sh["gave_up"] = dataclasses.replace(left, changed_at=None, moved=False)
    if left.events < ANALYSIS_TRACE_SHARE * GIVE_UP_MIN:
        return []
    how = "at no one age" if left.events >= GIVE_UP_MIN else "too few to read an age from"
    return [dataclasses.replace(left, signal=dataclasses.replace(left.signal, label=f"requests aborted ({how})"))]


def _strength(s: Shift) -> float:
    """How many thresholds the move is worth (2 = twice the threshold's distance)."""
    th, absolute = THRESHOLDS.get(s.signal.key, (CONSEQUENCE_RATIO, False))
    if s.baseline is None or s.incident is None:
        return 0.0
    if absolute:
        return abs(s.incident - s.baseline) / th if th else 0.0
    r = s.ratio
    if not r or r <= 0:
        return 0.0
    return abs(math.log(r)) / math.log(th) if th > 1 else 0.0
