"""Tables on a recipe page: tab-separated (the docs page as text) or Markdown pipe tables.

A deployment table has at least Model, Cards, Deploy Mode, Dataset and TPOT columns; a
`Metric | Value` table (the K3 PR's speed test) is returned separately as measured results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from monitor.recipes.errors import RecipeError

REQUIRED = ("Model", "Cards", "Deploy Mode", "Dataset", "TPOT")
_MD_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


@dataclass(frozen=True)
class Row:
    line: int
    cells: dict[str, str]
    group: str | None  # the heading above the table ("Low Latency", "High Throughput")

    def get(self, column: str) -> str | None:
        return self.cells.get(column)


@dataclass(frozen=True)
class Table:
    line: int
    header: list[str]
    rows: list[Row]
    group: str | None

    @property
    def is_deployments(self) -> bool:
        return all(c in self.header for c in REQUIRED)

    @property
    def is_metrics(self) -> bool:
        return [h.lower() for h in self.header] == ["metric", "value"]


def _cells(line: str) -> list[str] | None:
    text = line.strip()
    if text.startswith("|") and text.count("|") >= 2:
        return [c.strip() for c in text.strip("|").split("|")]
    if "\t" in text:
        return [c.strip() for c in text.split("\t")]
    return None


def _canonical(header: str) -> str:
    """Header spellings to one: `deploy mode` / `Deploy-Mode` -> `Deploy Mode`."""
    words = re.split(r"[\s_-]+", header.strip())
    name = " ".join(w.upper() if w.upper() in ("TPOT", "TTFT") else w.capitalize() for w in words if w)
    return {"Card": "Cards", "Mode": "Deploy Mode"}.get(name, name)


def find_tables(lines: list[str], source: str) -> list[Table]:
    tables: list[Table] = []
    i = 0
    while i < len(lines):
        header = _cells(lines[i])
        if not header or len(header) < 2:
            i += 1
            continue
        start = i
        group = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), None)
        if group is not None and _cells(group) is not None:
            group = None
        names = [_canonical(h) for h in header]
        rows: list[Row] = []
        i += 1
        while i < len(lines) and lines[i].strip():
            if _MD_SEPARATOR.match(lines[i].strip()):
                i += 1
                continue
            cells = _cells(lines[i])
            if cells is None:
                break
            if len(cells) != len(names):
                raise RecipeError(
                    source, i + 1, f"table row has {len(cells)} cells but the header (line {start + 1}) has "
                    f"{len(names)}: {' | '.join(cells)}"
                )
            rows.append(Row(i + 1, dict(zip(names, cells, strict=True)), group))
            i += 1
        table = Table(start + 1, names, rows, group)
        looks_like_recipe = "Model" in names and ("TPOT" in names or "Cards" in names)
        if looks_like_recipe and not table.is_deployments:
            missing = ", ".join(c for c in REQUIRED if c not in names)
            raise RecipeError(source, start + 1, f"recipe table lacks column(s) {missing}")
        if rows or table.is_deployments:
            tables.append(table)
    return tables
