"""A clone of the project runs on its own: nothing it ships reads the team's `../shared` folder."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("monitor", "tests", "bench", "examples", "deploy", "docs", ".ci")
SHARED_PATH = re.compile(r"\.\./shared|/work/shared|parents\[\d\]\s*/\s*\"\.\.\"\s*/\s*\"shared\"")


def test_no_code_test_benchmark_or_doc_points_at_the_shared_folder():
    offenders = []
    for top in SHIPPED:
        for path in (ROOT / top).rglob("*"):
            if not path.is_file() or path.suffix not in {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ""}:
                continue
            if path == Path(__file__):
                continue  # provenance notes too: they cite public sources, never a folder of this machine
            text = path.read_text(encoding="utf-8", errors="replace")
            offenders += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(text.splitlines(), 1)
                          if SHARED_PATH.search(line)]
    for name in ("README.md", "Makefile", "pyproject.toml", "docker-compose.yml", "Dockerfile"):
        text = (ROOT / name).read_text(encoding="utf-8")
        offenders += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if SHARED_PATH.search(line)]
    assert not offenders, f"these read ../shared, which a clone does not have: {offenders}"


def test_every_real_fixture_the_tests_name_is_committed():
    from tests import conftest

    paths = [v for k, v in vars(conftest).items() if isinstance(v, Path) and k.isupper() and k != "ROOT"]
    assert paths and all(p.exists() for p in paths), [str(p) for p in paths if not p.exists()]
