"""Just enough shell to read recipe scripts: continuation lines, variables, arrays and `for` loops.

Recipe pages are bash written for humans: commands span lines with `\\`, hosts come from arrays
(`P_IP=('<your prefill ip>')`) indexed inside `for i in "${!P_IP[@]}"` loops, and values hold
`<placeholders>` with spaces in them. We do not execute anything; we only resolve what a reader
would resolve, and leave everything unknown (`$NODE_RANK`, `<first node>`) as it is, visibly.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from monitor.recipes.errors import RecipeError

# `<your prefill ip>` and the PR's `<<first node>>`: may hold spaces, so protect them from splitting.
_PLACEHOLDER = re.compile(r"<{1,2}[^<>\n]+>{1,2}")
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_FOR = re.compile(r'^for\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\s+"?\$\{(!?)([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\}"?\s*;?\s*(?:do)?\s*$')
_EXPANSION = re.compile(
    r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[([^\]]*)\]\}"  # ${ARR[$i]} / ${ARR[0]}
    r"|\$\{([A-Za-z_][A-Za-z0-9_]*)\}"  # ${VAR}
    r"|\$([A-Za-z_][A-Za-z0-9_]*)"  # $VAR
)


@dataclass(frozen=True)
class LogicalLine:
    """One shell line after joining `\\` continuations; `line` is where it starts (1-based)."""

    line: int
    text: str
    end_line: int


def logical_lines(lines: Iterable[str], first_line: int = 1, source: str = "<text>") -> Iterator[LogicalLine]:
    parts: list[str] = []
    start = 0
    number = first_line - 1
    for number, raw in enumerate(lines, start=first_line):
        text = raw.rstrip("\r\n")
        if not parts:
            start = number
        stripped = text.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            parts.append(stripped[:-1])
            continue
        parts.append(text)
        yield LogicalLine(start, " ".join(p.strip() for p in parts).strip(), number)
        parts = []
    if parts:
        raise RecipeError(source, start, "command continues with '\\' past the end of its block")


def split_words(text: str, source: str = "<text>", line: int = 0) -> list[str]:
    """shlex-split one logical line, keeping `<placeholders with spaces>` as one word."""
    saved: list[str] = []

    def protect(m: re.Match[str]) -> str:
        saved.append(m.group(0))
        return f"\x00{len(saved) - 1}\x00"

    try:
        words = shlex.split(_PLACEHOLDER.sub(protect, text), comments=True)
    except ValueError as err:
        raise RecipeError(source, line, f"cannot split shell line ({err}): {text[:80]}") from None
    return [re.sub("\x00(\\d+)\x00", lambda m: saved[int(m.group(1))], w) for w in words]


@dataclass
class ShellState:
    """Variables, arrays and open loops seen so far in one script block."""

    variables: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    # Open loops: (loop variable, array, loops over indexes?). We take the first iteration, index 0,
    # which is also the node-rank-0 host: the one whose HTTP server (and /metrics) exists.
    loops: list[tuple[str, str, bool]] = field(default_factory=list)

    def feed(self, words: list[str]) -> bool:
        """Apply an assignment / loop line; return True if it was one (not a command)."""
        if not words:
            return True
        head = " ".join(words)
        if words[0] == "for":
            m = _FOR.match(head)
            if m:
                self.loops.append((m.group(1), m.group(3), m.group(2) == "!"))
            return True
        if words[0] == "done":
            if self.loops:
                self.loops.pop()
            return True
        if words[0] == "unset":
            for name in words[1:]:
                self.variables.pop(name, None)
            return True
        if len(words) <= 2 and words[0] == "export" and len(words) == 2:
            words = words[1:]
        if len(words) == 1:
            m = _ASSIGN.match(words[0])
            if m:
                self.variables[m.group(1)] = self.expand(m.group(2))
                return True
        return False

    def feed_array(self, text: str) -> bool:
        """`NAME=('a' 'b')`: arrays must be read before shlex, which would drop the parentheses."""
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=\((.*)\)\s*$", text.strip())
        if not m:
            return False
        self.arrays[m.group(1)] = [self.expand(w) for w in split_words(m.group(2))]
        return True

    def _index(self, expr: str) -> int | None:
        expr = expr.strip()
        loop_vars = {var: is_index for var, _, is_index in self.loops}
        name = expr.lstrip("$").strip("{}")
        if name in loop_vars:
            return 0
        return int(expr) if expr.isdigit() else None

    def expand(self, word: str) -> str:
        def repl(m: re.Match[str]) -> str:
            if m.group(1):
                values = self.arrays.get(m.group(1))
                idx = self._index(m.group(2))
                if values is not None and idx is not None and idx < len(values):
                    return values[idx]
                return m.group(0)
            name = m.group(3) or m.group(4)
            for var, array, is_index in self.loops:
                if var == name:
                    return "0" if is_index else (self.arrays.get(array) or [m.group(0)])[0]
            return self.variables.get(name, m.group(0))

        return _EXPANSION.sub(repl, word)

    def loop_array(self, word: str) -> list[str] | None:
        """The array a word such as `${D_IP[$i]}` indexes, if it is one (for multi-node notes)."""
        m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[[^\]]*\]\}", word)
        return self.arrays.get(m.group(1)) if m else None
