"""Recognise the three commands a recipe holds and read their options.

- the SGLang server: `python3 -m sglang.launch_server …` or `sglang serve …`
- the PD router: `python -m sglang_router.launch_router …`
- the benchmark: `python -m sglang.bench_serving …` (or its new home `sglang.benchmark.serving`)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from monitor.recipes.errors import RecipeError
from monitor.recipes.shell import ShellState, logical_lines, split_words

Kind = Literal["server", "router", "bench"]

_MODULES: dict[str, Kind] = {
    "sglang.launch_server": "server",
    "sglang_router.launch_router": "router",
    "sglang.bench_serving": "bench",
    "sglang.benchmark.serving": "bench",
}
_PYTHON = re.compile(r"^(?:.*/)?python[0-9.]*$")
_ENV_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# A JSON object pasted without quotes: the shell splits it and strips its quotes.
_BARE_JSON = re.compile(r"(?:^|\s)(--[\w-]+)\s+\{\s*\"")


@dataclass
class Command:
    kind: Kind
    line: int
    end_line: int
    program: str
    options: dict[str, list[list[str]]] = field(default_factory=dict)
    raw_options: dict[str, list[list[str]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # For hosts taken from an array inside a loop: the whole array (multi-node launches).
    host_array: list[str] | None = None

    def has(self, flag: str) -> bool:
        return flag in self.options

    def value(self, flag: str) -> str | None:
        vals = self.options.get(flag)
        return vals[-1][0] if vals and vals[-1] else None

    def values(self, flag: str) -> list[list[str]]:
        return self.options.get(flag, [])

    def int(self, flag: str) -> int | None:
        v = self.value(flag)
        try:
            return int(v) if v is not None else None
        except ValueError:
            return None


def classify(words: list[str]) -> tuple[Kind, str, list[str]] | None:
    """(kind, program as written, remaining args) when `words` launches one of our commands."""
    i = 0
    while i < len(words) and (_ENV_PREFIX.match(words[i]) or words[i] in ("nohup", "exec", "env")):
        i += 1
    rest = words[i:]
    if len(rest) >= 3 and _PYTHON.match(rest[0]) and rest[1] == "-m" and rest[2] in _MODULES:
        return _MODULES[rest[2]], " ".join(rest[:3]), rest[3:]
    if len(rest) >= 2 and rest[0] == "sglang" and rest[1] == "serve":
        return "server", "sglang serve", rest[2:]
    return None


def parse_options(args: list[str]) -> dict[str, list[list[str]]]:
    """`--flag v1 v2 --other` to {"--flag": [["v1", "v2"]], "--other": [[]]}; repeats append."""
    out: dict[str, list[list[str]]] = {}
    current: list[str] | None = None
    for arg in args:
        if arg.startswith("--"):
            name, eq, val = arg.partition("=")
            current = [val] if eq else []
            out.setdefault(name, []).append(current)
        elif current is not None:
            current.append(arg)
    return out


def scan(lines: Iterable[str], first_line: int, source: str) -> list[Command]:
    """Every server/router/bench command in a block of shell text, variables resolved."""
    state = ShellState()
    found: list[Command] = []
    for ll in logical_lines(lines, first_line, source):
        text = ll.text
        if not text or text.startswith("#") or state.feed_array(text):
            continue
        try:
            words = split_words(text, source, ll.line)
        except RecipeError:
            if classify(text.split()) is not None:
                raise  # a real command we cannot read
            continue  # prose with an apostrophe, not shell
        if state.feed(words):
            continue
        hit = classify(words)
        if hit is None:
            continue
        kind, program, args = hit
        cmd = Command(kind, ll.line, ll.end_line, program, raw_options=parse_options(args))
        cmd.options = {k: [[state.expand(v) for v in vs] for vs in occ] for k, occ in cmd.raw_options.items()}
        host = cmd.raw_options.get("--host")
        if host and host[-1]:
            cmd.host_array = state.loop_array(host[-1][0])
        for m in _BARE_JSON.finditer(text):
            cmd.notes.append(
                f"line {ll.line}: {m.group(1)} is given an unquoted JSON object; a shell splits it and strips "
                "its quotes, so SGLang receives invalid JSON — quote it: '{\"…\": …}'"
            )
        found.append(cmd)
    return found
