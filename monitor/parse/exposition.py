"""Selective parser for Prometheus text 0.0.4 and OpenMetrics 1.0 exposition.

Only the sample names in `wanted` are materialised; every other line is validated cheaply
(name, value) and counted. That keeps a 32-DP-rank SGLang scrape (~10k lines) cheap, since the
SLO engine needs a dozen families out of ~90.

Two ways through a text, with one result: SGLang (prometheus_client) writes every family as one block
after its `# HELP`/`# TYPE` lines, so `monitor.parse.blocks` skips the blocks of families nobody asked
for without looking at their lines (bytes in, nothing decoded or copied but the wanted blocks); any text
not laid out that way goes through the full scan below, which validates every line.

Accepted quirks, all seen in real output: `sglang:` and `sglang_` spellings (canonicalised to the
colon), `le="1"` and `le="1.0"`, escaped label values, NaN/±Inf, missing HELP/TYPE, the `pid`
label of multiprocess gauges (dropped), OpenMetrics timestamps, exemplars and `# EOF`, and Prometheus 3's
quoted names (`{"my.metric","my.label"="v"} 1`, `# TYPE "my.metric" counter`: what prometheus_client >= 0.22
writes with `escaping=allow-utf-8` for a name that is not a legacy one), which the full scan reads.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection
from typing import NamedTuple

from monitor.conventions.names import DROPPED_LABELS, canonical_name

Labels = tuple[tuple[str, str], ...]

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_FAMILY_SUFFIXES = ("_bucket", "_count", "_sum", "_created", "_total", "_gcount", "_gsum", "_info")
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}


class ParseError(ValueError):
    """Malformed exposition; `line` is 1-based."""

    def __init__(self, line: int, message: str, text: str = "") -> None:
        shown = text if len(text) <= 120 else text[:117] + "..."
        super().__init__(f"line {line}: {message}" + (f": {shown!r}" if shown else ""))
        self.line = line


class LimitExceeded(ValueError):
    """More samples, or more kept series, than the target allows (Prometheus's `sample_limit`): the
    scrape fails whole and the target keeps its previous state."""


class Limits(NamedTuple):
    """Per-scrape bounds; None is unlimited (Prometheus's 0)."""

    samples: int | None = None  # every sample line of the exposition
    series: int | None = None  # samples kept (the families in `wanted`)

    def check_samples(self, samples: int) -> None:
        if self.samples is not None and samples > self.samples:
            raise LimitExceeded(f"sample limit exceeded: more than {self.samples} samples (sample_limit {self.samples})")

    def check_series(self, kept: int) -> None:
        if self.series is not None and kept > self.series:
            raise LimitExceeded(f"series limit exceeded: more than {self.series} series of the families "
                                f"the sidecar reads (series_limit {self.series})")


NO_LIMITS = Limits()


class Sample(NamedTuple):
    name: str  # canonical (colon) sample name, suffix included
    labels: Labels  # sorted by name, dropped labels removed
    value: float


class Exposition(NamedTuple):
    format: str  # "prometheus-text" | "openmetrics"
    families: int  # distinct families that have at least one sample (-1: not counted)
    samples: int  # every sample line
    types: dict[str, str]  # canonical family name -> declared TYPE
    selected: list[Sample]  # samples whose name is in `wanted` (all, when wanted is None)


def family_of(sample_name: str) -> str:
    for suffix in _FAMILY_SUFFIXES:
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)]
    return sample_name


def spell_value(value: float) -> str:
    """A value as the exposition formats spell it (NaN, +Inf, -Inf, 12): for messages."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:g}"


def _read_quoted(text: str, i: int, lineno: int, line: str, what: str) -> tuple[str, int]:
    """The string quoted at `text[i]` (a `"`), unescaped (\\\\, \\", \\n), and the index after its closing quote."""
    buf: list[str] = []
    i += 1
    n = len(text)
    while True:
        if i >= n:
            raise ParseError(lineno, f"unterminated {what}", line)
        ch = text[i]
        if ch == "\\":
            if i + 1 >= n:
                raise ParseError(lineno, f"dangling backslash in {what}", line)
            buf.append(_UNESCAPE.get(text[i + 1], "\\" + text[i + 1]))
            i += 2
            continue
        if ch == '"':
            return "".join(buf), i + 1
        buf.append(ch)
        i += 1


def _scan_labels(text: str, lineno: int, line: str) -> tuple[list[tuple[str, str]], str | None, tuple[int, int]]:
    """Character parser for label sets with escapes (\\\\, \\", \\n), odd spacing or quoted names: the pairs,
    and the metric name when one is quoted among them (Prometheus 3's `{"my.metric", "my.label"="v"}`,
    as prometheus_client >= 0.22 writes names that are not legacy ones) with its span, a comma after it
    included."""
    out: list[tuple[str, str]] = []
    name: str | None = None
    span = (0, 0)
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t,":
            i += 1
        if i >= n:
            break
        start = i
        if text[i] == '"':
            key, i = _read_quoted(text, i, lineno, line, "quoted name")
            while i < n and text[i] in " \t":
                i += 1
            if i >= n or text[i] != "=":  # not a label name: the metric name
                if name is not None:
                    raise ParseError(lineno, "metric name given twice", line)
                if not key:
                    raise ParseError(lineno, "empty metric name", line)
                if i < n and text[i] != ",":
                    raise ParseError(lineno, "expected ',' after the quoted metric name", line)
                name, span = key, (start, min(i + 1, n))
                continue
            if not key:
                raise ParseError(lineno, "empty label name", line)
        else:
            m = _NAME_RE.match(text, i)
            if not m or ":" in m.group(0):
                raise ParseError(lineno, "invalid label name", line)
            key = m.group(0)
            i = m.end()
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] != "=":
            raise ParseError(lineno, f"expected '=' after label {key!r}", line)
        i += 1
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] != '"':
            raise ParseError(lineno, f"label {key!r} value must be quoted", line)
        value, i = _read_quoted(text, i, lineno, line, f"value of label {key!r}")
        out.append((key, value))
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] != ",":
            raise ParseError(lineno, "expected ',' between labels", line)
    return out, name, span


def _parse_labels_slow(text: str, lineno: int, line: str) -> list[tuple[str, str]]:
    pairs, name, _ = _scan_labels(text, lineno, line)
    if name is not None:  # `name{"other"}`: prometheus_client refuses it too
        raise ParseError(lineno, "metric name given twice", line)
    return pairs


_LABELS_FULL_RE = re.compile(r'(?:\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"[^"\\]*"\s*,)*'
                             r'(?:\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"[^"\\]*"\s*)?,?\s*')
_LABEL_PAIR_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*)"')


# Label sets repeat exactly from one scrape of a target to the next: parse each text once. Across
# targets they differ mostly in `pid` (every SGLang scheduler gauge carries its process id), which is
# dropped anyway: a second cache is keyed by the text without it, so 400 servers of one model share
# their label sets instead of evicting each other's. Both are bounded.
LABEL_CACHE: dict[str, Labels] = {}
_SHARED_LABELS: dict[str, Labels] = {}
_LABEL_CACHE_MAX = 20_000
# One well-formed dropped pair at a pair boundary: what is left is a valid label text when the whole was.
_DROPPED_MARKS = tuple(f'{name}="' for name in sorted(DROPPED_LABELS))
_DROPPED_PAIR_RE = re.compile("(?:^|,)(?:" + "|".join(map(re.escape, sorted(DROPPED_LABELS)))
                              + r')="[^"\\]*"(?=,|$)')


def _remember(cache: dict[str, Labels], text: str, labels: Labels) -> None:
    if len(cache) >= _LABEL_CACHE_MAX:
        cache.clear()  # bounded: a fleet with more distinct label sets re-parses, no more
    cache[text] = labels


def parse_labels(text: str, lineno: int = 0, line: str = "") -> Labels:
    """`a="1",b="x"` -> sorted pairs, `pid` dropped, duplicates rejected."""
    cached = LABEL_CACHE.get(text)
    if cached is not None:
        return cached
    shared = _DROPPED_PAIR_RE.sub("", text, count=1) if any(m in text for m in _DROPPED_MARKS) else None
    if shared is not None:
        cached = _SHARED_LABELS.get(shared)
        if cached is not None:
            _remember(LABEL_CACHE, text, cached)
            return cached
    if "\\" not in text and _LABELS_FULL_RE.fullmatch(text):
        pairs = _LABEL_PAIR_RE.findall(text)  # both regexes run in C: the hot path
    else:
        pairs = _parse_labels_slow(text, lineno, line)
    if len(pairs) > 1:
        keys = {k for k, _ in pairs}
        if len(keys) != len(pairs):
            raise ParseError(lineno, "duplicate label name", line)
        pairs.sort()
    out = tuple(p for p in pairs if p[0] not in DROPPED_LABELS)
    _remember(LABEL_CACHE, text, out)
    if shared is not None:
        _remember(_SHARED_LABELS, shared, out)
    return out


def split_sample(line: str, lineno: int) -> tuple[str, str | None, str]:
    """(raw name, label text or None, rest after labels). A name quoted inside the braces comes back
    unquoted, its label text without it."""
    if line.startswith("{"):
        close = _find_label_end(line, 1, lineno)
        inner = line[1:close]
        _, name, (start, end) = _scan_labels(inner, lineno, line)
        if name is None:
            raise ParseError(lineno, "expected a metric name", line)
        rest = (inner[:start] + inner[end:]).strip(" \t")
        return name, rest or None, line[close + 1 :]
    m = _NAME_RE.match(line)
    if not m:
        raise ParseError(lineno, "expected a metric name", line)
    name = m.group(0)
    pos = m.end()
    if pos < len(line) and line[pos] == "{":
        # Label values may contain '}' only inside quotes; the common case has none.
        close = line.find("}", pos)
        labels = line[pos + 1 : close] if close != -1 else None
        if labels is not None and labels.count('"') % 2 == 0 and "\\" not in labels:
            return name, labels, line[close + 1 :]
        close = _find_label_end(line, pos + 1, lineno)
        return name, line[pos + 1 : close], line[close + 1 :]
    return name, None, line[pos:]


def _find_label_end(line: str, i: int, lineno: int) -> int:
    in_quotes = False
    n = len(line)
    while i < n:
        ch = line[i]
        if in_quotes:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_quotes = False
        elif ch == '"':
            in_quotes = True
        elif ch == "}":
            return i
        i += 1
    raise ParseError(lineno, "unterminated label set", line)


# --- fast path -------------------------------------------------------------------------------
# One C-level pass validates every line's shape (name, optional label set, numeric value, optional
# timestamp/exemplar) and one finditer pulls out the wanted lines; only those reach Python. Any
# text the fast grammar refuses goes through the line-by-line parser, which either accepts it
# (it is more lenient: CRLF, odd spacing, Python float spellings) or raises with the line number.
_VALUE = r"[+-]?(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[Ii]nf(?:inity)?|Na[Nn]|nan)"
_FAST_SAMPLE = (rf"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{{[^\n]*\}})?[ \t]+{_VALUE}"
                r"(?:[ \t]+-?[0-9][0-9.eE+-]*)?(?:[ \t]+#[^\n]*)?[ \t]*")
_FAST_LINE = rf"(?:#[^\n]*|{_FAST_SAMPLE})"  # no empty lines: prometheus_client never writes them
# Atomic groups: a line, once matched, is never re-tried, so a bad line fails in linear time
# instead of backtracking through every line before it.
_FAST_DOC = re.compile(rf"(?>(?>{_FAST_LINE})\n)*(?>{_FAST_LINE})?")
_TYPE_RE = re.compile(r"\n# TYPE ([^ \t\n]+)[ \t]+([^\n]*)")
_NAMES_RE = re.compile(r"^([^#\s{][^{ \t\n]*)", re.M)


@functools.lru_cache(maxsize=32)
def _wanted_regex(wanted: frozenset[str]) -> re.Pattern[str]:
    alts = []
    for name in sorted(wanted, key=len, reverse=True):
        if name.startswith("sglang:"):
            alts.append("sglang[:_]" + re.escape(name[len("sglang:"):]))
        else:
            alts.append(re.escape(name))
    return re.compile(r"\n(" + "|".join(alts) + r")(?=[{ \t])([^\n]*)")


def value_of(rest: str, lineno: int, line: str) -> float:
    """The value after the name and labels; a timestamp after it must be a number too."""
    tokens = rest.split()
    if not tokens:
        raise ParseError(lineno, "sample has no value", line)
    try:
        value = float(tokens[0])
    except ValueError:
        raise ParseError(lineno, f"value {tokens[0]!r} is not a number", line) from None
    if len(tokens) > 1 and tokens[1] != "#":
        # A timestamp (ms in 0.0.4, s in OpenMetrics); an exemplar starts with '#'.
        try:
            float(tokens[1])
        except ValueError:
            raise ParseError(lineno, "unexpected text after the value", line) from None
    return value


def wanted_sample(line: str, lineno: int) -> tuple[str, Labels, float]:
    """Parse one line whose name is wanted: labels in full, value, timestamp checked."""
    raw, label_text, rest = split_sample(line, lineno)
    value = value_of(rest, lineno, line)
    labels = parse_labels(label_text, lineno, line) if label_text else ()
    return canonical_name(raw), labels, value


def _parse_fast(text: str, wanted: frozenset[str], content_type: str, count_families: bool,
                limits: Limits = NO_LIMITS) -> Exposition | None:
    """None when the text needs the line-by-line parser (unusual spacing, or an error to locate)."""
    body = "\n" + text
    if _FAST_DOC.fullmatch(text) is None:
        return None
    eof = body.find("\n# EOF")
    if eof != -1 and body[eof + 6 :].strip():
        return None  # content after # EOF: let the line parser name the line
    is_om = eof != -1 or "openmetrics" in content_type
    if "openmetrics" in content_type and eof == -1:
        return None
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    samples = lines - body.count("\n#")
    limits.check_samples(samples)
    selected: list[Sample] = []
    seen: set[tuple[str, Labels]] = set()
    limit = math.inf if limits.series is None else limits.series
    for m in _wanted_regex(wanted).finditer(body):
        line = m.group(1) + m.group(2)
        try:
            name, labels, value = wanted_sample(line, 0)
        except ParseError as err:
            # Counting lines is O(size): only on the error path.
            raise ParseError(body.count("\n", 0, m.start() + 1), str(err).split(": ", 1)[1]) from None
        key = (name, labels)
        if key in seen:
            raise ParseError(body.count("\n", 0, m.start() + 1), "duplicate series", line)
        seen.add(key)
        selected.append(Sample(name, labels, value))
        if len(selected) > limit:
            limits.check_series(len(selected))
    found = _TYPE_RE.findall(body)
    if any(a.startswith('"') for a, _ in found):
        return None  # a quoted name (maybe with spaces): the line parser reads it
    types = {canonical_name(a): b.strip() for a, b in found}
    families = -1
    if count_families:
        families = len({family_of(canonical_name(n)) for n in set(_NAMES_RE.findall(text))})
    return Exposition("openmetrics" if is_om else "prometheus-text", families, samples, types, selected)


def parse(text: str | bytes, wanted: Collection[str] | None = None, *, content_type: str = "",
          count_families: bool = True, limits: Limits = NO_LIMITS) -> Exposition:
    """Parse one exposition (text, or the bytes a target sent). `wanted`: canonical sample names to
    keep (None keeps all). Raises ParseError (malformed) or LimitExceeded (`limits`).

    count_families=False skips counting distinct families (families is then -1): the scrape loop
    does not need it, and it lets a grouped exposition's unwanted blocks be skipped unread.
    """
    if wanted is not None and not count_families:
        from monitor.parse.blocks import parse_grouped  # blocks builds on this module's types

        data = text if isinstance(text, bytes) else text.encode()
        grouped = parse_grouped(data, frozenset(wanted), content_type, limits)
        if grouped is not None:
            return grouped
    return full_scan(text, wanted, content_type=content_type, count_families=count_families, limits=limits)


def full_scan(text: str | bytes, wanted: Collection[str] | None = None, *, content_type: str = "",
              count_families: bool = True, limits: Limits = NO_LIMITS) -> Exposition:
    """Every line validated (a C regex over the whole text, else line by line): what `parse` falls
    back to for a text that is not grouped, and what names the line of any error."""
    if isinstance(text, bytes):
        text = decode(text)
    if wanted is not None:
        fast = _parse_fast(text, frozenset(wanted), content_type, count_families, limits)
        if fast is not None:
            return fast
    return _parse_lines(text, wanted, content_type, limits)


def decode(data: bytes) -> str:
    """UTF-8 text of an exposition, or ParseError naming the line of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ParseError(data.count(b"\n", 0, err.start) + 1, f"not UTF-8 (byte {err.start})") from None


def type_line(line: str, lineno: int) -> tuple[str, str]:
    """(canonical family, type) of a `# TYPE` line; the name may be quoted (`# TYPE "my.metric" counter`)."""
    rest = line[7:].lstrip(" \t")
    if rest.startswith('"'):
        name, i = _read_quoted(rest, 0, lineno, line, "quoted name")
        kind = rest[i:].strip()
        if not name or not kind or rest[i] not in " \t":
            raise ParseError(lineno, "TYPE line needs a name and a type", line)
        return canonical_name(name), kind
    parts = rest.split(None, 1)
    if len(parts) < 2:
        raise ParseError(lineno, "TYPE line needs a name and a type", line)
    return canonical_name(parts[0]), parts[1].strip()


def _parse_lines(text: str, wanted: Collection[str] | None, content_type: str,
                 limits: Limits = NO_LIMITS) -> Exposition:
    """The line-by-line parser: lenient where the fast grammar is strict, precise about errors."""
    is_om = "openmetrics" in content_type
    types: dict[str, str] = {}
    first_line: dict[str, int] = {}  # raw sample name -> first line it appears on (names not quoted)
    quoted_families: set[str] = set()  # of quoted names, which need not be legacy names
    selected: list[Sample] = []
    count = 0
    saw_eof = False
    keep_all = wanted is None
    seen: set[tuple[str, Labels]] = set()
    lineno = 0
    wanted_set = frozenset() if wanted is None else frozenset(wanted)
    sample_limit = limits.samples
    series_limit = math.inf if limits.series is None else limits.series
    # Split on "\n" only: str.splitlines() would also split inside label values (\r, \x1c, ...).
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        c0 = line[0]
        if c0 == "#":
            if saw_eof:
                raise ParseError(lineno, "content after '# EOF'", line)
            if line.startswith("# TYPE "):
                family, kind = type_line(line, lineno)
                types[family] = kind
            elif line.rstrip() == "# EOF":
                saw_eof = True
                is_om = True
            continue
        if line.isspace():
            continue
        if saw_eof:
            raise ParseError(lineno, "content after '# EOF'", line)
        brace = line.find("{")
        space = line.find(" ")
        quoted = brace == 0
        if quoted:  # the name quoted inside the braces (Prometheus 3): any UTF-8 but empty
            raw, label_text, rest = split_sample(line, lineno)
            name = canonical_name(raw)
        elif brace != -1 and (space == -1 or brace < space):
            raw = line[:brace]
            name = canonical_name(raw)
            if keep_all or name in wanted_set:
                raw, label_text, rest = split_sample(line, lineno)
            else:
                # Not materialised: find the end of the label set without parsing it.
                cut = line.find(" # ")
                body = line if cut == -1 else line[:cut]
                close = body.rfind("}")
                if close == -1:
                    raise ParseError(lineno, "unterminated label set", line)
                label_text, rest = None, body[close + 1 :]
        else:
            if space == -1:
                raise ParseError(lineno, "sample has no value", line)
            raw = line[:space]
            name = canonical_name(raw)
            label_text, rest = None, line[space:]
        value = value_of(rest, lineno, line)
        count += 1
        if sample_limit is not None and count > sample_limit:
            limits.check_samples(count)
        if quoted:
            quoted_families.add(family_of(name))
        elif raw not in first_line:
            first_line[raw] = lineno
        if keep_all or name in wanted_set:
            labels = parse_labels(label_text, lineno, line) if label_text else ()
            key = (name, labels)
            if key in seen:
                # Prometheus rejects such a scrape too: which of the two values is right?
                raise ParseError(lineno, "duplicate series", line)
            seen.add(key)
            selected.append(Sample(name, labels, value))
            if len(selected) > series_limit:
                limits.check_series(len(selected))
    if is_om and not saw_eof and "openmetrics" in content_type:
        raise ParseError(lineno if text else 0, "OpenMetrics exposition without '# EOF' (truncated?)")
    # Names are validated once each, not once per line.
    families = quoted_families
    for raw, lineno in first_line.items():
        if not _NAME_RE.fullmatch(raw):
            raise ParseError(lineno, f"invalid metric name {raw!r}")
        families.add(family_of(canonical_name(raw)))
    fmt = "openmetrics" if is_om else "prometheus-text"
    return Exposition(fmt, len(families), count, types, selected)

