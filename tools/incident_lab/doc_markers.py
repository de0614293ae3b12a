"""A generated section of a document, kept between two marker lines."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path


def read_between(path: Path, begin: str, end: str) -> str | None:
    found = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(end), path.read_text(encoding="utf-8"), re.S)
    return found.group(1) if found else None


def write_between(path: Path, begin: str, end: str, text: str, place: Callable[[str, str], str]) -> bool:
    """Put `text` between the markers, or, when they are missing, where `place(doc, block)` puts the marked
    block; True if the file changed."""
    doc = path.read_text(encoding="utf-8")
    block = f"{begin}\n{text}{end}"
    if begin in doc and end in doc:
        new = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    else:
        new = place(doc, block)
    if new != doc:
        path.write_text(new, encoding="utf-8")
    return new != doc
