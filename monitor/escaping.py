"""The one place where values from a config become text inside another language.

Label values (deployment names, model names, custom labels) end up in PromQL string literals,
in Go-template annotation text, in YAML and in Grafana dashboard JSON. Each target has its own
escaping rules; getting one wrong either breaks the file (a `"` in a PromQL literal) or silently
changes meaning (`{{` in an annotation is executed by Prometheus' template engine).
"""

from __future__ import annotations

import json
import re
import reprlib
from typing import Any

import yaml

# PromQL string literals follow Go's strconv rules: these short escapes are understood.
_PROMQL_SHORT = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a",
                 "\b": "\\b", "\f": "\\f", "\v": "\\v"}
# RE2 metacharacters: a literal value inside `=~"..."` must not act as a pattern.
_RE2_META = re.compile(r"([\\.+*?()|\[\]{}^$])")
LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # fullmatch: `$` would let a trailing newline through


# An input value inside an error message: a few items of a collection, a few levels deep, the two ends
# of a long string; never a walk of the whole value (a shared YAML node can be a billion values wide).
_EXCERPT = reprlib.Repr()
_EXCERPT.maxlevel, _EXCERPT.maxstring, _EXCERPT.maxother, _EXCERPT.maxlong = 3, 60, 60, 40
_EXCERPT.maxlist = _EXCERPT.maxtuple = _EXCERPT.maxdict = _EXCERPT.maxset = 4
EXCERPT_CHARS = 120


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A short `repr` of an input value for an error message: at most `limit` characters of it, and the
    length of a string that was cut."""
    text = _EXCERPT.repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(value, str) and len(value) > _EXCERPT.maxstring:
        text += f" ({len(value):,} characters)"
    return text


def shorten(text: str, limit: int = 400) -> str:
    """`text` (a message that may carry input) cut to `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def _unprintable(ch: str) -> bool:
    # Control characters and the Unicode line/paragraph separators, which editors and YAML
    # treat as line breaks; everything else (UTF-8 text) is valid raw in PromQL.
    cp = ord(ch)
    return cp < 0x20 or cp == 0x7F or 0x80 <= cp < 0xA0 or cp in (0x2028, 0x2029, 0xFEFF)


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal (quotes included)."""
    out = []
    for ch in str(value):
        if ch in _PROMQL_SHORT:
            out.append(_PROMQL_SHORT[ch])
        elif _unprintable(ch):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def promql_regex_literal(values: list[str] | tuple[str, ...]) -> str:
    """A PromQL string literal for `=~` that matches exactly one of `values`."""
    return promql_string("|".join(_RE2_META.sub(r"\\\1", str(v)) for v in values))


def matchers(labels: dict[str, str]) -> str:
    """`{a="x",b="y"}` with equality matchers, keys in the given order; `` when empty."""
    for name in labels:
        if not LABEL_NAME_RE.fullmatch(name):
            raise ValueError(f"not a Prometheus label name: {name!r}")
    if not labels:
        return ""
    return "{" + ",".join(f"{k}={promql_string(v)}" for k, v in labels.items()) + "}"


def template_literal(text: str) -> str:
    """Text shown verbatim inside a Prometheus/Alertmanager Go template (annotations).

    Only `{{` starts an action, so that is the only sequence to neutralise; the replacement
    prints the two braces through a string constant.
    """
    return str(text).replace("{{", '{{ "{{" }}')


def comment(text: str) -> str:
    """One line of text that is safe after `# ` in YAML (no line breaks can end the comment)."""
    return " ".join(str(text).replace("\r", "\n").replace("\u2028", "\n").replace("\u2029", "\n").split())


class _Dumper(yaml.SafeDumper):
    """Block-style YAML; multi-line strings as `|` literals so PromQL stays readable."""

    def ignore_aliases(self, data: Any) -> bool:  # never emit &anchors for shared objects
        return True


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data and not any(_unprintable(c) for c in data.replace("\n", "")) and data == data.rstrip(" "):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_representer)


def yaml_text(data: Any, sort_keys: bool = False) -> str:
    """Deterministic YAML; keys keep the order the builders put them in unless `sort_keys`."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=sort_keys, allow_unicode=True, width=10_000,
                     default_flow_style=False)


def json_text(data: Any) -> str:
    """Deterministic JSON for dashboards (sorted keys, UTF-8 kept, trailing newline)."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
