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

Sample timestamps (ms in the text format, s in OpenMetrics; SGLang writes none): given the scrape's time and
interval (`Limits.current`), a wanted sample dated further than one interval from it is left out of `selected`
and counted in `Exposition.dated` (`monitor.parse.lines.only_current` says why). Every path collects the dated
samples as it reads them and compares them once at the end, so a text without timestamps pays nothing.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection

from monitor.conventions.names import canonical_name
from monitor.parse.blocks import parse_grouped
from monitor.parse.lines import (
    NAME_RE,
    NO_LIMITS,
    Dated,
    Exposition,
    Labels,
    LimitExceeded,
    Limits,
    ParseError,
    Sample,
    family_of,
    only_current,
    parse_labels,
    read_quoted,
    spell_value,
    split_sample,
    value_and_stamp,
    value_of,
)

# The parser's public names, those defined in monitor.parse.lines (shared with the block skipper) included.
__all__ = [
    "NO_LIMITS",
    "Dated",
    "Exposition",
    "Labels",
    "LimitExceeded",
    "Limits",
    "ParseError",
    "Sample",
    "decode",
    "family_of",
    "full_scan",
    "parse",
    "parse_labels",
    "spell_value",
    "split_sample",
    "type_line",
    "value_of",
    "wanted_sample",
]

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


def wanted_sample(line: str, lineno: int) -> tuple[str, Labels, float, str]:
    """Parse one line whose name is wanted: labels in full, value, timestamp as written ("" when none)."""
    raw, label_text, rest = split_sample(line, lineno)
    value, stamp = value_and_stamp(rest, lineno, line)
    labels = parse_labels(label_text, lineno, line) if label_text else ()
    return canonical_name(raw), labels, value, stamp


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
    dated: list[tuple[Sample, str]] = []  # kept samples that carry a timestamp, with it
    limit = math.inf if limits.series is None else limits.series
    for m in _wanted_regex(wanted).finditer(body):
        line = m.group(1) + m.group(2)
        try:
            name, labels, value, stamp = wanted_sample(line, 0)
        except ParseError as err:
            # Counting lines is O(size): only on the error path.
            raise ParseError(body.count("\n", 0, m.start() + 1), str(err).split(": ", 1)[1]) from None
        key = (name, labels)
        if key in seen:
            raise ParseError(body.count("\n", 0, m.start() + 1), "duplicate series", line)
        seen.add(key)
        smp = Sample(name, labels, value)
        selected.append(smp)
        if stamp:
            dated.append((smp, stamp))
        if len(selected) > limit:
            limits.check_series(len(selected))
    found = _TYPE_RE.findall(body)
    if any(a.startswith('"') for a, _ in found):
        return None  # a quoted name (maybe with spaces): the line parser reads it
    types = {canonical_name(a): b.strip() for a, b in found}
    families = -1
    if count_families:
        families = len({family_of(canonical_name(n)) for n in set(_NAMES_RE.findall(text))})
    left_out = None
    if dated:
        selected, left_out = only_current(selected, dated, is_om, limits)
    return Exposition("openmetrics" if is_om else "prometheus-text", families, samples, types, selected, left_out)


def parse(text: str | bytes, wanted: Collection[str] | None = None, *, content_type: str = "",
          count_families: bool = True, limits: Limits = NO_LIMITS) -> Exposition:
    """Parse one exposition (text, or the bytes a target sent). `wanted`: canonical sample names to
    keep (None keeps all). Raises ParseError (malformed) or LimitExceeded (`limits`).

    count_families=False skips counting distinct families (families is then -1): the scrape loop
    does not need it, and it lets a grouped exposition's unwanted blocks be skipped unread.
    """
    if wanted is not None and not count_families:
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
        name, i = read_quoted(rest, 0, lineno, line, "quoted name")
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
    dated: list[tuple[Sample, str]] = []  # kept samples that carry a timestamp, with it
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
        keep = keep_all or name in wanted_set
        if keep:
            value, stamp = value_and_stamp(rest, lineno, line)
        else:
            value_of(rest, lineno, line)
        count += 1
        if sample_limit is not None and count > sample_limit:
            limits.check_samples(count)
        if quoted:
            quoted_families.add(family_of(name))
        elif raw not in first_line:
            first_line[raw] = lineno
        if keep:
            labels = parse_labels(label_text, lineno, line) if label_text else ()
            key = (name, labels)
            if key in seen:
                # A series given twice fails the scrape here (the target is down, the line named): which of
                # the two values is right cannot be known. Prometheus does not reject it: 2.42 and 3.16 were
                # seen to keep the first value with up=1, 2.42 dropping the repeat silently, 3.16 counting it in
                # prometheus_target_scrapes_sample_duplicate_timestamp_total with a WARN line each scrape.
                # Only the series read here are checked: a repeat of any other is not looked at.
                raise ParseError(lineno, "duplicate series", line)
            seen.add(key)
            smp = Sample(name, labels, value)
            selected.append(smp)
            if stamp:
                dated.append((smp, stamp))
            if len(selected) > series_limit:
                limits.check_series(len(selected))
    if is_om and not saw_eof and "openmetrics" in content_type:
        raise ParseError(lineno if text else 0, "OpenMetrics exposition without '# EOF' (truncated?)")
    # Names are validated once each, not once per line.
    families = quoted_families
    for raw, lineno in first_line.items():
        if not NAME_RE.fullmatch(raw):
            raise ParseError(lineno, f"invalid metric name {raw!r}")
        families.add(family_of(canonical_name(raw)))
    fmt = "openmetrics" if is_om else "prometheus-text"
    left_out = None
    if dated:  # after the whole text: `# EOF` at its end is what says its timestamps are seconds
        selected, left_out = only_current(selected, dated, is_om, limits)
    return Exposition(fmt, len(families), count, types, selected, left_out)

