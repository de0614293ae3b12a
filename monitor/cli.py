"""Command line: `slo-monitor <command>`. Each command group registers itself from its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

# Plain imports, not names looked up at run time, so the layering test sees cli -> commands. Every
# invocation builds the whole parser (`--help` lists every command), so importing them here costs nothing
# a lazy import would save.
from monitor.commands import analyze, demo, emulate, generate, inspect, recipe, run, status

# Each adds its own sub-commands, in the order `--help` lists them.
COMMAND_GROUPS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    run.register,
    status.register,
    inspect.register,
    demo.register,
    recipe.register,
    emulate.register,
    generate.register,
    analyze.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slo-monitor", description="SLO sidecar for SGLang serving")
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in COMMAND_GROUPS:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    import logging

    parser = build_parser()
    args = parser.parse_args(argv)
    from monitor.redaction import RedactingFormatter, redact_str

    logging.basicConfig(level=args.log_level.upper())
    for handler in logging.getLogger().handlers:  # credentials in any library's line are cut here
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # user-facing: one clear line, not a traceback
        from monitor.config import ConfigError

        if isinstance(err, (ConfigError, FileNotFoundError, ValueError)):
            print(f"slo-monitor: error: {redact_str(str(err))}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":  # `python -m monitor.cli` as well as `python -m monitor`
    raise SystemExit(main())
