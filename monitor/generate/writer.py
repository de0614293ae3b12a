"""Write generated files, or compare them with what is on disk (`--check`)."""

from __future__ import annotations

import difflib
from pathlib import Path

from monitor.generate.build import OWNED_DIRS


def write(files: dict[str, str], out: Path) -> list[str]:
    """Write every file whose content changed; remove stale files in the owned directories."""
    changed = []
    for rel, text in files.items():
        path = out / rel
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        changed.append(rel)
    for rel in stale(files, out):
        (out / rel).unlink()
        changed.append(f"{rel} (removed)")
    return changed


def stale(files: dict[str, str], out: Path) -> list[str]:
    """Files under the generated directories that the generator would not produce."""
    found = []
    for top in OWNED_DIRS:
        root = out / top
        if root.is_dir():
            found += [p.relative_to(out).as_posix() for p in root.rglob("*") if p.is_file()]
    return sorted(rel for rel in found if rel not in files)


def check(files: dict[str, str], out: Path, context: int = 2) -> list[str]:
    """One problem line (plus a short diff) per file that differs, is missing, or should not exist."""
    problems = []
    for rel, text in files.items():
        path = out / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
            continue
        current = path.read_text(encoding="utf-8")
        if current != text:
            diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), "committed", "generated",
                                             n=context, lineterm=""))
            shown = "\n".join("    " + line for line in diff[:20])
            problems.append(f"{rel}: differs\n{shown}")
    problems += [f"{rel}: not generated (should not be there)" for rel in stale(files, out)]
    return problems
