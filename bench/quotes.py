"""Figures the README and docs/ quote from bench/RESULTS.md, filled in by a generator so none can go stale unseen.

A quote is inline, between two HTML comments that Markdown does not show:

    the sidecar's CPU per scrape is <!-- results: 1. CPU per scrape vs Prometheus 2.42, fixture x 32 DP (anchor) -->
    0.25x [0.24–0.27]<!-- /results --> of Prometheus 2.42's

The key is the start of a goal line of RESULTS.md's goals table; the text between is that line's `measured`
cell, with the commit of the run (`python -m bench.quotes` rewrites every quote; `make bench` runs it after
writing RESULTS.md; `tests/bench/test_results_fresh.py` fails when a quote differs from RESULTS.md or names no
goal line).
"""

from __future__ import annotations

import re
from pathlib import Path

from bench.provenance import ROOT

RESULTS = ROOT / "bench" / "RESULTS.md"
QUOTE = re.compile(r"<!-- results: (.+?) -->(.*?)<!-- /results -->", re.S)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def goals(results: str) -> dict[str, str]:
    """Goal text -> its measured cell, from the goals table at the top of RESULTS.md."""
    out = {}
    for line in results.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and cells[0] not in ("goal", "") and not set(cells[0]) <= {"-"}:
            out[cells[0]] = cells[1]
    return out


def measured(key: str, table: dict[str, str]) -> str:
    found = [goal for goal in table if goal.startswith(key)]
    if not found:
        raise KeyError(f"no goal line of {RESULTS.name} starts with {key!r}")
    return table[found[0]]


def rendered(doc: str, table: dict[str, str]) -> str:
    """`doc` with every quote's text replaced by what RESULTS.md says now."""
    return QUOTE.sub(lambda m: f"<!-- results: {m.group(1)} -->{measured(m.group(1), table)}<!-- /results -->", doc)


def drifted() -> list[str]:
    """The documents whose quotes differ from RESULTS.md (or name no goal line): what the test reports."""
    table = goals(RESULTS.read_text(encoding="utf-8"))
    out = []
    for path in documents():
        doc = path.read_text(encoding="utf-8")
        try:
            if rendered(doc, table) != doc:
                out.append(f"{path.relative_to(ROOT)}: a quote differs from {RESULTS.name} (run `python -m bench.quotes`)")
        except KeyError as err:
            out.append(f"{path.relative_to(ROOT)}: {err.args[0]}")
    return out


def main() -> int:
    table = goals(RESULTS.read_text(encoding="utf-8"))
    for path in documents():
        doc = path.read_text(encoding="utf-8")
        new = rendered(doc, table)
        if new != doc:
            path.write_text(new, encoding="utf-8")
            print(f"updated the quotes in {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
