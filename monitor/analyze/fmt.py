"""Numbers and tables shared by the Markdown and HTML renderers (plain strings, no markup)."""

from __future__ import annotations

from monitor.analyze.correlate import Candidate
from monitor.analyze.report import Report, SliReport
from monitor.analyze.timeparse import iso

TOP_RANKED = 10


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f} ms"


def num(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def zs(z: float) -> str:
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
    cause = s.likely_cause
    if cause is not None:
        text += (f" Likely cause: {cause.label} ({timing(cause, rep)}, Spearman {cause.r_at_lag:+.2f}, "
                 f"z {zs(cause.z)}).")
    return text


SCORE_TEXT = ("Score = |Spearman at the best lag| × |z|/(|z|+3) × timing, where the lag (±12 steps) maximises the "
              "rank correlation with the SLI's per-step bad ratio, z is the change of the series' mean during the "
              "breach against its baseline median in baseline spreads (1.4826·MAD), and timing is 1 when the series "
              "left its baseline band at or before the breach onset (0.5 when after: more likely a consequence). "
              "The highest-scoring series that moved first is the likely cause.")
