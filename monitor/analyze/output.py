"""Write a finished Report: report.md (+ plots/*.png), report.html (self-contained), report.json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from monitor.analyze import fmt, html, markdown, plots
from monitor.analyze.report import Report


def _clean(x: Any) -> Any:
    """JSON has no NaN/Inf: null them (z of a series flat in its baseline can be huge, never infinite)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def previous_report(out_dir: str | Path) -> str | None:
    """What an earlier report in `out_dir` was of (deployment and range), which writing here replaces; None
    where there is none."""
    path = Path(out_dir) / "report.json"
    if not path.is_file():
        return None
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        return f"{old['deployment']} {old['from_iso']} .. {old['to_iso']}"
    except (ValueError, KeyError, TypeError, OSError):
        return "an earlier report"


def write_report(rep: Report, out_dir: str | Path) -> dict[str, Path]:
    """Write the report into `out_dir`; an earlier report there is replaced whole: its plots that this one
    does not have are removed, so none of another deployment's or range's is left beside it."""
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    pngs = plots.render_all(rep)
    for stale in (out / "plots").glob("*.png"):
        if stale.name not in pngs:
            stale.unlink()
    for name, data in pngs.items():
        (out / "plots" / name).write_bytes(data)
    paths = {"markdown": out / "report.md", "html": out / "report.html", "json": out / "report.json"}
    paths["markdown"].write_text(markdown.render(rep, pngs), encoding="utf-8")
    paths["html"].write_text(html.render(rep, pngs), encoding="utf-8")
    data = rep.to_dict()
    data["verdict"]["evidence"] = fmt.evidence(rep)
    paths["json"].write_text(json.dumps(_clean(data), indent=2) + "\n", encoding="utf-8")
    return paths
