"""The one place where values from a config become text inside another language.

Label values (deployment names, model names, custom labels) end up in PromQL string literals,
in Go-template annotation text, in YAML and in Grafana dashboard JSON. Each target has its own
escaping rules; getting one wrong either breaks the file (a `"` in a PromQL literal) or silently
changes meaning (`{{` in an annotation is executed by Prometheus' template engine).
"""

from __future__ import annotations

import contextlib
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


# Control characters and the Unicode line/paragraph separators, which editors and YAML
# treat as line breaks; everything else (UTF-8 text) is valid raw in PromQL.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")
# One regex pass instead of a per-character loop: every label matcher of every rule goes through here.
_PROMQL_ESCAPED = re.compile(r'[\\"\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]')


def _promql_escape(match: re.Match[str]) -> str:
    ch = match.group()
    return _PROMQL_SHORT.get(ch) or f"\\u{ord(ch):04x}"


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal (quotes included)."""
    return '"' + _PROMQL_ESCAPED.sub(_promql_escape, str(value)) + '"'


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


_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


def _literal(data: str) -> bool:
    """Multi-line strings as `|` literals so PromQL stays readable (where a literal can say them)."""
    return "\n" in data and not _UNPRINTABLE.search(data.replace("\n", "")) and data == data.rstrip(" ")


class _PlainData:
    """The nodes SafeRepresenter makes for block-style str, dict and list, without its per-node generic
    dispatch (alias bookkeeping, MRO lookup, flow-style guess): half of a fleet's `generate` went there.
    Anything else, and any other flow style, is SafeRepresenter's."""

    default_flow_style: bool | None
    sort_keys: bool

    def represent_data(self, data: Any) -> yaml.Node:
        kind = type(data)
        if kind is str:
            self._check(data)
            return yaml.ScalarNode(_STR, data, style="|" if _literal(data) else None)
        if kind is dict and self.default_flow_style is False:
            items: Any = list(data.items())
            if self.sort_keys:
                with contextlib.suppress(TypeError):  # as SafeRepresenter: unorderable keys keep their order
                    items = sorted(items)
            pairs = [(self._key(k), self.represent_data(v)) for k, v in items]
            return yaml.MappingNode(_MAP, pairs, flow_style=False)
        if kind is list and self.default_flow_style is False:
            return yaml.SequenceNode(_SEQ, [self.represent_data(x) for x in data], flow_style=False)
        return super().represent_data(data)  # type: ignore[misc]

    def ignore_aliases(self, data: Any) -> bool:  # never emit &anchors for shared objects
        return True

    def _key(self, key: Any) -> yaml.Node:
        if type(key) is str:
            self._check_key(key)
        return self.represent_data(key)

    def _check(self, data: str) -> None:
        """Raise where this dumper's emitter must not write `data` (see _CDumper)."""

    def _check_key(self, key: str) -> None:
        """Raise where this dumper's emitter must not write `key` as a mapping key (see _CDumper)."""


class _Dumper(_PlainData, yaml.SafeDumper):
    """Block-style YAML; multi-line strings as `|` literals."""


# libyaml's emitter is ~5x faster (fleet-scale `generate` spent 90% of its time in PyYAML's), but it writes
# some characters differently (non-BMP and U+0085/2028/2029/FEFF escaped, control characters in keys) and
# ends a document after a `|+` literal with `...`. Output must not depend on which emitter is installed, so
# it is used only for data made of characters both write alike (checked by fuzzing both emitters), and
# strings short enough that no line reaches the 10,000-column width, where the two fold differently. Keys:
# PyYAML writes `? key` for an empty one or one of 128 characters or more, libyaml for over 128 bytes.
_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))
_LIBYAML_MAX_CHARS = 4_000  # doubled by quote escaping plus a 128-character key stays under the width
_LIBYAML_MAX_KEY_BYTES = 120
_NOT_LIBYAML_SAFE = re.compile(r"[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd]")


class _NotLibyamlSafe(Exception):
    """A string that libyaml would write differently: the whole text is PyYAML's instead."""


if _LIBYAML:
    class _CDumper(_PlainData, yaml.CSafeDumper):
        def _check(self, data: str) -> None:
            if len(data) > _LIBYAML_MAX_CHARS or _NOT_LIBYAML_SAFE.search(data):
                raise _NotLibyamlSafe

        def _check_key(self, key: str) -> None:
            if not 0 < len(key.encode()) <= _LIBYAML_MAX_KEY_BYTES:
                raise _NotLibyamlSafe


def _dump(data: Any, dumper: type, sort_keys: bool) -> str:
    return yaml.dump(data, Dumper=dumper, sort_keys=sort_keys, allow_unicode=True, width=10_000,
                     default_flow_style=False)


def yaml_text(data: Any, sort_keys: bool = False) -> str:
    """Deterministic YAML; keys keep the order the builders put them in unless `sort_keys`."""
    if _LIBYAML and isinstance(data, (dict, list)):  # a bare scalar: PyYAML adds `...`, libyaml not
        try:
            text = _dump(data, _CDumper, sort_keys)
        except _NotLibyamlSafe:
            pass
        else:
            if not text.endswith("\n...\n"):  # libyaml's document end marker; PyYAML writes it less often
                return text
    return _dump(data, _Dumper, sort_keys)


def yaml_item_text(item: Any) -> str:
    """`item` as an entry (`- ...`) of a top-level block sequence, for texts that are joined under a `key:`
    line (byte for byte what yaml_text writes for the whole list) or nested further. Without the `...` that
    PyYAML writes after a keep-chomped literal (`|+`) at the very end: mid-file it would end the document."""
    text = yaml_text([item])
    return text[:-4] if text.endswith("\n...\n") else text


def json_text(data: Any) -> str:
    """Deterministic JSON for dashboards (sorted keys, UTF-8 kept, trailing newline)."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
