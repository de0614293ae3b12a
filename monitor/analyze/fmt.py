"""Numbers and tables shared by the Markdown and HTML renderers (plain strings, no markup)."""

from __future__ import annotations

import math

from monitor.analyze.correlate import Candidate
from monitor.analyze.report import Report, SliReport
from monitor.analyze.timeparse import iso
from monitor.conventions.policy import REGRESSION_FACTOR

TOP_RANKED = 10


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f} ms"


def num(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def zs(z: float | None) -> str:
    if z is None:
        return "- (flat baseline)"
    return "≫100" if z > 100 else ("≪-100" if z < -100 else f"{z:+.1f}")


def rel(t: float, rep: Report) -> str:
    """`14:05:10Z (+70 s)`: clock time and offset from --from."""
    return f"{iso(t)[11:]} (+{t - rep.t1:.0f} s)" if t >= rep.t1 else f"{iso(t)[11:]} ({t - rep.t1:.0f} s)"


def episode_rows(rep: Report, s: SliReport) -> list[list[str]]:
    rows = []
    for e in s.episodes:
        end = rel(e.end, rep) if e.end is not None else "still out at --to"
        dur = f"{e.duration:.0f} s" if e.duration is not None else f"≥ {rep.t2 - e.start:.0f} s"
        rows.append([("≤ " if e.started_before else "") + rel(e.start, rep), end, dur, rel(e.onset, rep),
                     f"{e.peak_burn:.1f}x at {rel(e.peak_burn_at, rep)}", f"{e.budget_spent:.2%}",
                     f"{e.bad_events:,.0f} / {e.events:,.0f}"])
    return rows


EPISODE_HEAD = ["left objective", "re-entered", "duration", "bad events began", "peak burn rate",
                "budget spent", "bad / events"]
PCT_HEAD = ["", "events", "p50", "p90", "p99", "mean"]
RANK_HEAD = ["#", "series", "score", "Spearman", "Pearson", "best lag", "r at lag", "z vs baseline", "ratio",
             "changed at", "timing"]


def percentile_rows(s: SliReport) -> list[list[str]]:
    c = s.comparison
    rows = []
    for name, st in (("incident", c.incident), ("baseline (before)", c.baseline)):
        if st is None:
            rows.append([name, "0", "-", "-", "-", "-"])
        else:
            rows.append([name, f"{st.events:,.0f}", ms(st.p50), ms(st.p90), ms(st.p99), ms(st.mean)])
    rows.append(["incident / baseline", "", *(f"{r:.2f}x" if r else "-" for r in
                                              (c.ratio("p50"), c.ratio("p90"), c.ratio("p99"), c.ratio("mean")))])
    if c.recipe_mean:
        rows.append(["recipe baseline (mean)", "", "", "", "", f"{ms(c.recipe_mean)} (incident {c.recipe_ratio:.2f}x)"
                     if c.recipe_ratio else ms(c.recipe_mean)])
    return rows


def timing(c: Candidate, rep: Report) -> str:
    if c.lead_seconds is not None:
        return f"moved {c.lead_seconds:.0f} s before the breach" if c.lead_seconds > 0 else (
            "moved with the breach" if c.lead_seconds == 0 else f"moved {-c.lead_seconds:.0f} s after the breach")
    return "leads" if c.lag_steps > 0 else ("in step" if c.lag_steps == 0 else "lags")


def rank_rows(rep: Report, s: SliReport) -> list[list[str]]:
    rows = []
    for i, c in enumerate(s.ranking[:TOP_RANKED], 1):
        rows.append([str(i), c.label, f"{c.score:.2f}", num(c.spearman), num(c.pearson), f"{c.lag_seconds:+g} s",
                     num(c.r_at_lag), zs(c.z), f"{c.ratio:.2f}x" if c.ratio is not None else "-",
                     rel(c.changed_at, rep) if c.changed_at is not None else "-", timing(c, rep)])
    return rows


def summary(rep: Report, s: SliReport) -> str:
    spec = s.track.spec
    head = (f"{s.sli.upper()} (target {spec.target * 1000:g} ms, objective {spec.objective:.2%}): " if spec.latency
            else f"{s.sli.upper()} (requests meeting every target, objective {spec.objective:.2%}): ")
    if not s.episodes:
        return head + f"stayed within its objective over the {s.track.window:g} s window; budget spent {s.budget_spent:.3%}."
    main = s.main_episode
    assert main is not None
    end = f"re-entered at {rel(main.end, rep)}" if main.end is not None else "was still out at --to"
    text = (head + f"left its objective at {rel(main.start, rep)} and {end}; peak burn rate {main.peak_burn:.1f}x; "
            f"{s.budget_spent:.2%} of the {rep.dataset.period_seconds / 86400:g}-day error budget spent in the range.")
    return text


def _ms_change(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    return f"{ms(b)} → {ms(a)}" + (f" ({a / b:.1f}x)" if b > 0 and a / b >= 1.1 or b > 0 and a / b <= 0.9 else "")


def evidence(rep: Report) -> list[str]:
    """What the verdict rests on, one line each: the baseline, the SLIs against it and the recipe, the PD
    stages of TTFT, the speculative accept length against TPOT, and every candidate mechanism."""
    v, out = rep.verdict, []
    b = rep.baseline
    out.append(f"Baseline: {iso(b.start)} → {iso(b.end)} ({b.source}; {len(b.indices)} steps"
               + (f"; {'; '.join(b.notes)}" if b.notes else "") + ")"
               + ("" if b.trusted else " — NOT trusted: the verdict is uncertain"))
    for s in rep.ordered:
        c = s.comparison
        if not s.track.spec.latency or c.incident is None:
            continue
        base = c.baseline.mean if c.baseline else None
        line = (f"{s.sli.upper()} mean {ms(c.incident.mean)} over the range: "
                + (f"{c.ratio('mean') or 0:.1f}x its baseline ({ms(base)})" if base else "no baseline events"))
        if c.recipe_mean:
            line += f", {c.recipe_ratio or 0:.1f}x the recipe's {ms(c.recipe_mean)}"
            if base and base / c.recipe_mean >= REGRESSION_FACTOR:
                line += (f" (its healthy baseline is already {base / c.recipe_mean:.1f}x the recipe: compare the "
                         "deployment with its recipe too, not only with itself)")
        line += f"; target {ms(s.track.spec.target)}, p99 {ms(c.incident.p99)}"
        out.append(line)
    stages = [sh for k, sh in v.shifts.items() if k.startswith("pd.")]
    if stages:
        parts = [f"{sh.signal.label} {_ms_change(sh.incident, sh.baseline)}" for sh in stages]
        grew = max(stages, key=lambda sh: (sh.incident or 0) - (sh.baseline or 0))
        out.append("PD TTFT by stage (baseline → incident): " + "; ".join(parts)
                   + f"; most added: {grew.signal.label}")
    acc, tpot = v.shifts.get("accept_length"), v.shifts.get("tpot_mean")
    if acc is not None and acc.baseline and acc.incident and tpot is not None and tpot.ratio:
        fell, rose = acc.baseline / acc.incident, tpot.ratio
        # At an unchanged step time TPOT scales with 1/accept length: the drop alone would give `fell`.
        share = math.log(fell) / math.log(rose) if rose > 1.05 and fell > 1.0 else None
        out.append(f"Speculative decoding: accept length {acc.baseline:.2f} → {acc.incident:.2f} tokens per step "
                   f"({fell:.1f}x fewer); TPOT mean {ms(tpot.baseline)} → {ms(tpot.incident)} ({rose:.1f}x). At an "
                   "unchanged step time TPOT scales with 1/accept length"
                   + (f": the drop explains {min(share, 1.0):.0%} of the TPOT rise (in log terms)"
                      + ("" if share < 1.5 else "; TPOT rose less than the drop alone would make it")
                      if share is not None and fell > 1.05 else ": the accept length does not explain a TPOT rise"))
    for mech, sh in v.candidates[1:]:
        out.append(f"Also moved: {sh.describe()}{' at ' + iso(sh.changed_at)[11:] if sh.changed_at else ''} "
                   f"({mech.replace('_', ' ')}; {'later' if v.cause and sh.changed_at and v.cause.changed_at and sh.changed_at > v.cause.changed_at else 'with it'}: read as part of the same incident, not its cause)")
    return out


VERDICT_TEXT = ("The verdict separates demand (arrival rate, prompt and output lengths, prefix-cache hit rate) from "
                "capacity (per-request decode speed = gen_throughput / running requests, ITL, prefill time, spec "
                "accept length, KV cache per request and retractions, accelerator temperature and health, PD "
                "transfer time and failures, gateway errors). Each signal, smoothed, is compared with its baseline "
                "level; it counts as moved when it left its baseline band by its threshold for three steps. The "
                "mechanism whose evidence moved first is the cause; running requests, queue, KV usage, throughput "
                "and utilisation follow by Little's law (running = arrivals × duration) and are named only as "
                "consequences. Confidence is high when the cause moved clearly (twice its threshold, or an event) "
                "before every consequence against a trusted baseline.")
SCORE_TEXT = ("Score = |Spearman at the best lag| × |z|/(|z|+3) × timing, where the lag (±12 steps) maximises the "
              "rank correlation with the SLI's per-step bad ratio, z is the change of the series' mean during the "
              "breach against its baseline median in baseline spreads (1.4826·MAD), and timing is 1 when the series "
              "left its baseline band at or before the breach onset (0.5 when after: more likely a consequence). "
              "These are correlates, listed as evidence: the verdict above names the mechanism.")
