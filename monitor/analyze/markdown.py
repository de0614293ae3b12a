"""Report -> Markdown (plots referenced as files next to it)."""

from __future__ import annotations

from monitor.analyze import fmt
from monitor.analyze.report import Report
from monitor.analyze.timeparse import iso


def _table(head: list[str], rows: list[list[str]]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def render(rep: Report, plots: dict[str, bytes] | None = None, plot_dir: str = "plots") -> str:
    plots = plots or {}
    out = [f"# SLO incident analysis: {rep.deployment}\n",
           f"**Verdict: {rep.verdict.first_line}**\n",
           f"{rep.verdict.headline}\n",
           "## Evidence\n"] + [f"- {line}" for line in fmt.evidence(rep)] + [
           "",
           f"- range: {iso(rep.t1)} → {iso(rep.t2)} ({rep.t2 - rep.t1:.0f} s); baseline {iso(rep.baseline.start)} → "
           f"{iso(rep.baseline.end)}",
           f"- source: {rep.dataset.source}; step {rep.step:g} s; SLI short window {rep.window:g} s",
           ""]
    primary = rep.primary
    if primary is not None:
        out += ["## Summary\n"] + [f"- {fmt.summary(rep, s)}" for s in
                                    rep.ordered] + [""]
    for s in rep.ordered:
        out.append(f"## {s.sli.upper()}\n")
        out.append(fmt.summary(rep, s) + "\n")
        if s.episodes:
            out += ["### Breach timeline\n", _table(fmt.EPISODE_HEAD, fmt.episode_rows(rep, s))]
        if s.track.spec.latency:
            out += ["### Percentiles\n", _table(fmt.PCT_HEAD, fmt.percentile_rows(s))]
        for suffix, title in (("sli", "SLI against its target"), ("burn", "Burn rate")):
            name = f"{s.sli}-{suffix}.png"
            if name in plots:
                out.append(f"![{s.sli} {title}]({plot_dir}/{name})\n")
        if s.episodes and s.ranking:
            out += [f"### What moved with it (against the per-step {s.correlated_with})\n",
                    _table(fmt.RANK_HEAD, fmt.rank_rows(rep, s))]
            if f"{s.sli}-movers.png" in plots:
                out.append(f"![{s.sli} top co-moving series]({plot_dir}/{s.sli}-movers.png)\n")
    out += ["## Method\n", fmt.VERDICT_TEXT + "\n", fmt.SCORE_TEXT + "\n"]
    if rep.notes:
        out += ["## Notes\n"] + [f"- {n}" for n in rep.notes] + [""]
    return "\n".join(out)
