"""`python -m tools.incident_lab [--check]` (`make confusion`): run every incident kind in lockstep, backfill a real
Prometheus from the capture, analyse each from both sources and write the confusion table into docs/analysis.md
(`--check`: only say whether the committed table is what was measured; exit 1 when it drifted)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tools.incident_lab.confusion import DOC, analyse, doc_table, table, write_doc
from tools.incident_lab.lockstep import run_lab
from tools.incident_lab.prometheus import serving


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.incident_lab", description=__doc__)
    p.add_argument("--check", action="store_true", help="compare with docs/analysis.md instead of writing it")
    args = p.parse_args(argv)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="incident-lab-") as tmp:
        work = Path(tmp)
        print("incident lab: running every scenario in lockstep ...", file=sys.stderr, flush=True)
        run = run_lab(work)
        print("incident lab: backfilling Prometheus and analysing ...", file=sys.stderr, flush=True)
        with serving(run.openmetrics, work, run.interval) as url:
            outcomes = analyse(run, url)
    text = table(outcomes)
    print(text)
    wrong = [f"{o.scenario.name} ({o.source}): {o.mechanism}" for o in outcomes if not o.right]
    print(f"incident lab: {len(outcomes) - len(wrong)}/{len(outcomes)} right in {time.monotonic() - began:.0f} s"
          + (f"; wrong: {', '.join(wrong)}" if wrong else ""), file=sys.stderr)
    if args.check:
        same = doc_table() == text
        print(f"{DOC}: {'up to date' if same else 'DRIFTED: run make confusion'}", file=sys.stderr)
        return 0 if same else 1
    print(f"{DOC}: {'updated' if write_doc(text) else 'unchanged'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
