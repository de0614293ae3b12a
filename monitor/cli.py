"""Command line: `slo-monitor <command>`. Each command group registers itself from its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules exposing `register(subparsers)`; each adds its own sub-commands.
COMMAND_MODULES = (
    "monitor.commands.run",
    "monitor.commands.status",
    "monitor.commands.inspect",
    "monitor.commands.demo",
    "monitor.commands.recipe",
    "monitor.commands.emulate",
    "monitor.commands.generate",
    "monitor.commands.analyze",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slo-monitor", description="SLO sidecar for SGLang serving")
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and name.startswith(err.name):
                continue  # command group not installed in this build
            raise
        module.register(sub)
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
