"""Which metric names a PromQL expression reads: for panel descriptions and the undefined-metric guard."""

from __future__ import annotations

import re

_KEYWORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
                       "offset", "bool", "inf", "nan", "start", "end"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-zA-Z_$]+")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([^"]+)"')


def metric_names(expr: str) -> set[str]:
    """Metric names selected by `expr` (functions, keywords, label names and literals excluded)."""
    found = set(_NAME_MATCHER.findall(expr))
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    text = _OFFSET.sub("", text)
    text = _NUMBER.sub("", text)
    for m in _IDENT.finditer(text):
        token = m.group()
        if text[m.end():].lstrip().startswith("(") or token.lower() in _KEYWORDS:
            continue
        if m.start() > 0 and text[m.start() - 1] == "$":
            continue  # a Grafana variable outside a string
        found.add(token)
    return found
