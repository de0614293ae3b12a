"""The "Optimal Configuration" sections of a recipe page.

A section is a title line followed by a `Model: … Cards: … Deploy Mode: … Dataset: … TPOT: …`
line, then its commands. Sections are matched to table rows by that line, never by position:
the real page orders them differently from its table, and repeats the bare titles at its end
(a table of contents), which must not be read as sections.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

META_KEYS = ("Model", "Hardware", "Cards", "Deploy Mode", "Quantization", "Dataset", "Format", "TPOT", "TTFT")
_META_START = re.compile(r"^\s*Model:\s*\S")
_META_KEY = re.compile(r"\b(" + "|".join(re.escape(k) for k in META_KEYS) + r"):\s*")


@dataclass(frozen=True)
class Section:
    title: str
    title_line: int  # 1-based
    meta_line: int
    meta: dict[str, str]
    body_start: int  # 1-based, first line after the meta line
    body: list[str]


def parse_meta(text: str) -> dict[str, str]:
    """`Model: A Hardware: B C Cards: 16` -> {"Model": "A", "Hardware": "B C", "Cards": "16"}."""
    parts = _META_KEY.split(text.strip())
    # split() yields ['', key1, value1, key2, value2, ...]
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def find_sections(lines: list[str], stop_lines: set[str]) -> tuple[list[Section], list[int]]:
    """Sections in page order, plus the line numbers of repeated titles (table of contents).

    `stop_lines` are headings (table group names, "Optimal Configuration") that end a section.
    """
    starts: list[tuple[int, int]] = []  # (title index, meta index), 0-based
    for i, line in enumerate(lines):
        if _META_START.match(line):
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            starts.append((j if j >= 0 else i, i))
    titles = {lines[t].strip() for t, m in starts if t != m}
    stops = titles | {s.strip() for s in stop_lines if s.strip()}
    sections: list[Section] = []
    repeats: list[int] = []
    for k, (t, m) in enumerate(starts):
        limit = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        end = limit
        for j in range(m + 1, limit):
            if lines[j].strip() in stops:
                end = j
                break
        title = lines[t].strip() if t != m else ""
        sections.append(Section(title, t + 1, m + 1, parse_meta(lines[m]), m + 2, lines[m + 1:end]))
    start_lines = {t for t, _ in starts}
    for i, line in enumerate(lines):
        if line.strip() in titles and i not in start_lines:
            repeats.append(i + 1)
    return sections, repeats
