"""`python -m tools.sloth_compare [--check]` (`make sloth-compare`): run the emulated history, evaluate our rules and the
real Sloth's together on Prometheus 3 (built by `make go-tools`) and write docs/sloth-comparison.md (`--check`: only
say whether the committed file is what was measured; exit 1 when it drifted)."""

from __future__ import annotations

import argparse
import sys
import time

from tools.sloth_compare.compare import evaluate
from tools.sloth_compare.history import run_history
from tools.sloth_compare.report import DOC, ROOT, prometheus_version, render

GO_BIN = ROOT / ".venv" / "go-bin"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.sloth_compare", description=__doc__)
    p.add_argument("--check", action="store_true", help="compare with docs/sloth-comparison.md instead of writing it")
    p.add_argument("--sloth", default=str(GO_BIN / "sloth"))
    p.add_argument("--promtool", default=str(GO_BIN / "promtool"))
    args = p.parse_args(argv)
    began = time.monotonic()
    print("sloth-compare: running the emulated history ...", file=sys.stderr, flush=True)
    history = run_history()
    print("sloth-compare: evaluating both rule sets ...", file=sys.stderr, flush=True)
    text = render(history, evaluate(history, args.sloth, args.promtool), prometheus_version(args.promtool))
    print(f"sloth-compare: done in {time.monotonic() - began:.0f} s", file=sys.stderr)
    old = DOC.read_text() if DOC.exists() else None
    if args.check:
        print(f"{DOC.relative_to(ROOT)}: {'up to date' if old == text else 'DRIFTED: run make sloth-compare'}",
              file=sys.stderr)
        return 0 if old == text else 1
    if old != text:
        DOC.write_text(text)
    print(f"{DOC.relative_to(ROOT)}: {'unchanged' if old == text else 'updated'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
