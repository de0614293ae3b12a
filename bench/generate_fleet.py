"""Benchmark 8: `slo-monitor generate` for a fleet (issue #33 item 5): wall time, CPU and peak RSS of the real
command for N deployments (the embedded recipe's and examples/' deployments cycled, each renamed), and the
largest PrometheusRule object it writes (Kubernetes refuses objects over ~1.5 MiB).

Each run is its own process (`python -m monitor generate -c FLEET.yaml --out DIR`), so peak RSS is the
command's own; `rounds` runs per size, medians with [min–max].
"""

from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.table import markdown, median

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("examples/kimi-k2.6-ascend.yaml", "examples/minimal.yaml")
GOAL_SECONDS = 10.0
GOAL_OBJECT_BYTES = 1024 * 1024
GOAL_PREFIXES = ("8. generate",)
_DOCUMENT_START = re.compile(r"^---\n", re.M)


def fleet_config(n: int) -> dict[str, Any]:
    """N deployments: those of the shipped examples in turn, each with a name of its own."""
    base = [d for path in EXAMPLES for d in yaml.safe_load((ROOT / path).read_text())["deployments"]]
    return {"deployments": [{**base[i % len(base)], "name": f"fleet-{i:04d}"} for i in range(n)]}


def _run_once(config: Path, out: Path) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "monitor", "generate", "-c", str(config), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"generate failed: {proc.stderr[-2000:]}")
    rule = (out / "deploy" / "kubernetes" / "prometheusrule.yaml").read_text()
    docs = _DOCUMENT_START.split(rule)
    return {"wall": wall, "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "rss_mb": after.ru_maxrss / 1024, "objects": len(docs),
            "largest_object": max(len(d.encode()) for d in docs), "files": sum(1 for p in out.rglob("*") if p.is_file())}


def run(sizes: tuple[int, ...] = (50, 500), rounds: int = 3) -> dict[int, list[dict[str, float]]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-generate-"))
    try:
        out: dict[int, list[dict[str, float]]] = {}
        for n in sizes:
            config = tmp / f"fleet-{n}.yaml"
            config.write_text(json.dumps(fleet_config(n)))
            out[n] = []
            for r in range(rounds):
                target = tmp / f"out-{n}-{r}"
                out[n].append(_run_once(config, target))
                shutil.rmtree(target)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _range(values: list[float], fmt: str) -> str:
    return f"{median(values):{fmt}} [{min(values):{fmt}}–{max(values):{fmt}}]"


def render(res: dict[int, list[dict[str, float]]]) -> str:
    head = ["deployments", "wall s", "CPU s", "peak RSS MB (children max)", "files written", "PrometheusRule objects",
            "largest object bytes"]
    rows = [[str(n), _range([r["wall"] for r in runs], ".1f"), _range([r["cpu"] for r in runs], ".1f"),
             f"{max(r['rss_mb'] for r in runs):.0f}", f"{runs[0]['files']:.0f}", f"{runs[0]['objects']:.0f}",
             f"{max(r['largest_object'] for r in runs):,.0f}"] for n, runs in res.items()]
    return (f"`python -m monitor generate -c FLEET --out DIR` as its own process, {len(next(iter(res.values())))} runs "
            "per size (median [min–max]); the fleet cycles the deployments of "
            f"{' and '.join(EXAMPLES)}, each renamed. Peak RSS is the largest of the runs' (getrusage of the "
            "children).\n\n" + markdown(head, rows))


def goal_lines(res: dict[int, list[dict[str, float]]]) -> list[tuple[str, str, str, str]]:
    out = []
    for n, runs in res.items():
        if n < 500:
            continue
        wall = median([r["wall"] for r in runs])
        big = max(r["largest_object"] for r in runs)
        out.append((f"8. generate, {n} deployments: wall time", _range([r["wall"] for r in runs], ".1f") + " s",
                    f"< {GOAL_SECONDS:g} s", f"{'met' if wall < GOAL_SECONDS else 'MISSED'} "
                                             f"({wall / GOAL_SECONDS:.2f} of the goal)"))
        out.append((f"8. generate, {n} deployments: largest PrometheusRule object", f"{big:,.0f} bytes",
                    "< 1 MiB", "met" if big < GOAL_OBJECT_BYTES else "MISSED"))
    return out
