"""`slo-monitor inspect FILE_OR_URL --json`: parse one exposition (or npu-smi output) and summarise it."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from typing import Any

from monitor.inspect_exposition import inspect_text
from monitor.parse.exposition import spell_value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="parse one exposition (file, '-' for stdin, or URL) and print a summary")
    p.add_argument("source", help="file path, '-' for stdin, or http(s):// URL")
    p.add_argument("--kind", choices=["exposition", "npu-smi"], default="exposition")
    p.add_argument("--json", action="store_true", help="print JSON (the default and only format for now)")
    p.add_argument("--timeout", type=float, default=10.0)
    p.set_defaults(func=_inspect)


def _read(source: str, timeout: float) -> tuple[str, str]:
    if source == "-":
        return sys.stdin.read(), ""
    if source.startswith(("http://", "https://")):
        import aiohttp

        from monitor.fetch import fetch

        async def go() -> tuple[str, str]:
            async with aiohttp.ClientSession() as session:
                res = await fetch(session, source, timeout=timeout, max_bytes=256 * 1024 * 1024)
            if not res.ok:
                raise ValueError(f"{source}: {res.error}")
            return res.text or "", res.content_type

        return asyncio.run(go())
    with open(source, encoding="utf-8") as fh:
        return fh.read(), ""


def _inspect(args: argparse.Namespace) -> int:
    text, ctype = _read(args.source, args.timeout)
    if args.kind == "npu-smi":
        from monitor.telemetry.inspect import inspect_npu_smi

        out = inspect_npu_smi(text)
    else:
        out = inspect_text(text, ctype)
    # Strict JSON (no bare NaN/Infinity, which json.loads elsewhere refuses): any non-finite number
    # left in the summary is written as the exposition spells it.
    json.dump(json_safe(out), sys.stdout, indent=2, sort_keys=False, allow_nan=False)
    sys.stdout.write("\n")
    return 0


def json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return spell_value(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
