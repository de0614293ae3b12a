"""Report -> one self-contained HTML file: inline CSS, plots as base64 PNG data URIs, no external resources."""

from __future__ import annotations

import base64
from html import escape

from monitor.analyze import fmt
from monitor.analyze.report import Report
from monitor.analyze.timeparse import iso

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1080px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .6em 0 1em; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } tr.cause td { background: #fff4e5; font-weight: 600; }
img { max-width: 100%; display: block; margin: .6em 0; border: 1px solid #eee; }
.verdict { font-size: 1.15em; font-weight: 600; padding: .6em .8em; border-left: 5px solid #c60;
           background: #fff4e5; } .verdict.high { border-color: #b00; } .verdict.low { border-color: #999; }
.meta { color: #555; } .summary li { margin: .3em 0; } .method { color: #444; font-size: 13px; }
"""


def _table(head: list[str], rows: list[list[str]], highlight: int | None = None) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    cause = ' class="cause"'
    body = "".join(
        f"<tr{cause if i == highlight else ''}>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
        for i, row in enumerate(rows))
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def render(rep: Report, plots: dict[str, bytes]) -> str:
    v = rep.verdict
    parts = [f"<h1>SLO incident analysis: {escape(rep.deployment)}</h1>",
             f'<p class="verdict {escape(v.confidence)}">{escape(v.first_line)}</p>',
             f'<p class="details">{escape(v.headline)}</p>',
             '<h2>Evidence</h2><ul class="evidence">'
             + "".join(f"<li>{escape(line)}</li>" for line in fmt.evidence(rep)) + "</ul>",
             f'<p class="meta">Range {escape(iso(rep.t1))} → {escape(iso(rep.t2))} ({rep.t2 - rep.t1:.0f} s), '
             f"baseline {escape(iso(rep.baseline.start))} → {escape(iso(rep.baseline.end))}. "
             f"Source: {escape(rep.dataset.source)}; step {rep.step:g} s; SLI short window {rep.window:g} s.</p>"]
    primary = rep.primary
    if primary is not None:
        items = "".join(f"<li>{escape(fmt.summary(rep, s))}</li>"
                        for s in rep.ordered)
        parts.append(f'<h2>Summary</h2><ul class="summary">{items}</ul>')
    for s in rep.ordered:
        parts.append(f"<h2>{escape(s.sli.upper())}</h2>")
        if s.episodes:
            parts.append("<h3>Breach timeline</h3>" + _table(fmt.EPISODE_HEAD, fmt.episode_rows(rep, s)))
        if s.track.spec.latency:
            parts.append("<h3>Percentiles</h3>" + _table(fmt.PCT_HEAD, fmt.percentile_rows(s)))
        for suffix, title in (("sli", "SLI against its target"), ("burn", "burn rate")):
            name = f"{s.sli}-{suffix}.png"
            if name in plots:
                parts.append(_img(plots[name], f"{s.sli} {title}"))
        if s.episodes and s.ranking:
            cause = s.first_mover
            hl = s.ranking.index(cause) if cause is not None and s.ranking.index(cause) < fmt.TOP_RANKED else None
            parts.append(f"<h3>What moved with it (against the per-step {escape(s.correlated_with)})</h3>"
                         + _table(fmt.RANK_HEAD, fmt.rank_rows(rep, s), hl))
            if f"{s.sli}-movers.png" in plots:
                parts.append(_img(plots[f"{s.sli}-movers.png"], f"{s.sli} top co-moving series"))
    parts.append(f'<h2>Method</h2><p class="method">{escape(fmt.VERDICT_TEXT)}</p>'
                 f'<p class="method">{escape(fmt.SCORE_TEXT)}</p>')
    if rep.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in rep.notes) + "</ul>")
    title = escape(f"SLO analysis: {rep.deployment}")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")
