"""Where each figure of bench/RESULTS.md comes from: the commit and date it was measured at, and the code it
measures, so the suite can tell when a section is older than a change to that code (issue #33 item 4:
RESULTS.md said 0.43x Prometheus's CPU for weeks after the scrape had grown to 1.3x).

Every section of RESULTS.md opens with one stamp line written by `python -m bench --write-results`:

    Measured at commit 0123456789ab (2026-12-06 14:30 UTC), on monitor/parse, monitor/scrape, monitor/slo.

`stale()` names each section whose code changed in a commit after its stamp (or that was measured on
uncommitted code, or has no stamp): `tests/bench/test_results_fresh.py` fails on any.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOT_PATH = ("monitor/parse", "monitor/scrape", "monitor/slo")
# The code each benchmark measures: a change to any of it makes its section stale.
MEASURES: dict[str, tuple[str, ...]] = {
    # monitor/fetch.py: the live scrapes' HTTP reads (benchmarks 1, 2 and 2b scrape over loopback).
    "parse": (*HOT_PATH, "monitor/sidecar.py", "monitor/observations.py", "monitor/feeds.py", "monitor/fetch.py"),
    "fleet": (*HOT_PATH, "monitor/sidecar.py", "monitor/observations.py", "monitor/feeds.py", "monitor/export",
              "monitor/fetch.py"),
    "big": (*HOT_PATH, "monitor/sidecar.py", "monitor/fetch.py"),
    "detection": (*HOT_PATH, "monitor/emulate"),
    "leading": (*HOT_PATH, "monitor/emulate"),
    "emulator": ("monitor/emulate",),
    "growth": (*HOT_PATH, "monitor/record", "monitor/status_model.py", "monitor/export"),
    "metrics": ("monitor/slo", "monitor/export", "monitor/status_model.py"),
    "hot_path": (*HOT_PATH, "monitor/feeds.py"),
    "generate": ("monitor/generate", "monitor/escaping.py", "monitor/yaml_bounded.py", "monitor/promql.py",
                 "monitor/slo_plan.py", "monitor/config.py"),
    # The rules and scrape config it generates, and the pinned VictoriaMetrics and Prometheus 3 builds it runs.
    "victoriametrics": ("monitor/generate", "monitor/promql.py", "monitor/slo_plan.py", "monitor/config.py",
                        "tools/go_tools.sh"),
}
STAMP = re.compile(r"^Measured at commit ([0-9a-f]{7,40}(?:-dirty)?) \(([^)]*)\), on (.+)\.$", re.M)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def commit_of(paths: tuple[str, ...]) -> str:
    """HEAD, with `-dirty` when any of `paths` differs from it (a figure of code no commit holds)."""
    dirty = _git("status", "--porcelain", "--", *paths)
    return _git("rev-parse", "--short=12", "HEAD") + ("-dirty" if dirty else "")


def stamp(bench: str) -> str:
    return stamp_paths(MEASURES[bench])


def stamp_paths(paths: tuple[str, ...]) -> str:
    """The stamp line for a figure of the code at `paths` (docs/victoriametrics.md uses it too)."""
    return (f"Measured at commit {commit_of(paths)} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}), "
            f"on {', '.join(paths)}.")


def changes_since(commit: str, paths: tuple[str, ...]) -> list[str]:
    """The commits after `commit` (up to HEAD) that changed any of `paths`, newest first, as `sha subject`."""
    out = _git("log", "--format=%h %s", f"{commit}..HEAD", "--", *paths)
    return [line[:120] for line in out.splitlines()]


def sections(results: str) -> dict[str, str]:
    """Each `## ` section's title -> its text (the goals table and the reading notes are not measurements)."""
    out = {}
    for part in results.split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        if not title.startswith(("Goals", "How to read")):
            out[title] = body
    return out


def stale(results: str) -> list[str]:
    """What is wrong with the provenance of RESULTS.md's sections; empty when every section is current."""
    problems = []
    for title, body in sections(results).items():
        found = STAMP.search(body)
        if found is None:
            problems.append(f"'{title}': no 'Measured at commit ...' line: rerun it with `python -m bench --only ... "
                            f"--write-results`")
            continue
        commit, _, paths = found.groups()
        if commit.endswith("-dirty"):
            problems.append(f"'{title}': measured on uncommitted code ({commit}): commit, then rerun it")
            continue
        try:
            later = changes_since(commit, tuple(p.strip() for p in paths.split(",")))
        except subprocess.CalledProcessError as err:
            problems.append(f"'{title}': its commit {commit} is not in this clone's history ({err.stderr.strip()})")
            continue
        if later:
            problems.append(f"'{title}': measured at {commit}, but {len(later)} later commit(s) changed the code it "
                            f"measures ({paths}), the newest: {later[0]}")
    return problems
