"""The block skipper: a grouped exposition's unwanted families are passed over unread.

prometheus_client (SGLang, the gateways' copies of it) writes each family as one contiguous block:
`# HELP name`, `# TYPE name type` (OpenMetrics: maybe `# UNIT`), then every sample line of that family.
A 32-DP-rank server serves ~90 such blocks and the sidecar reads ~15 of them, so:

- block boundaries are found with `bytes.find(b"\\n# HELP ")` (C, skipping ahead), and only the blocks
  of wanted families are decoded and split into lines;
- a skipped block is checked, not parsed: `bytes.count(b"\\n" + name)` over it counts its lines that
  start with its family's name. Every line of the text must be accounted for by a header, a counted
  line or a wanted block's line; when one is not (a line of another family mixed in, a comment, a
  family split in two) the text is not grouped and `parse_grouped` returns None: the caller falls back
  to the full scan (`monitor.parse.exposition`), which gives the same result or names the bad line.

What a skipped block is not checked for: the label syntax and value of its lines (the full scan
rejects a malformed line anywhere; this path rejects one only in a family the sidecar reads). Any
error in a wanted block, or any doubt, returns None, so errors are always the full scan's.
"""

from __future__ import annotations

import functools
import re

from monitor.conventions import canonical_name
from monitor.parse.exposition import (
    Exposition,
    Labels,
    Limits,
    ParseError,
    Sample,
    parse_labels,
    split_sample,
    value_of,
)

_HELP = b"# HELP "
_TYPE = b"# TYPE "
_UNIT = b"# UNIT "
_EOF = b"# EOF"
_NL = 10
_NAME_END = re.compile(r"[{ \t]")


@functools.lru_cache(maxsize=4096)
def _reads(family: str, wanted: frozenset[str]) -> bool:
    """Whether any wanted sample name can belong to `family` (a counter's `_total`, a histogram's
    `_bucket`...): every wanted name it prefixes. A family nobody reads has no wanted line."""
    return any(w.startswith(family) for w in wanted)


def _line_prefix(data: bytes, family: bytes, at: int) -> bytes | None:
    """The spelling the block's samples use: the header's, or OpenMetrics-escaped (prometheus_client
    >= 0.23 writes `sglang_x_total` under `# TYPE sglang:x counter`)."""
    if data.startswith(family, at):
        return family
    escaped = family.replace(b":", b"_")
    return escaped if data.startswith(escaped, at) else None


def parse_grouped(data: bytes, wanted: frozenset[str], content_type: str, limits: Limits) -> Exposition | None:
    """The exposition, reading only the wanted families' blocks; None when `data` is not grouped as
    prometheus_client writes it (or anything is wrong): the caller then runs the full scan."""
    # Blocks start at `# HELP` (prometheus_client) or, in texts without HELP lines, at `# TYPE`.
    marker = _HELP if data.startswith(_HELP) else _TYPE if data.startswith(_TYPE) else None
    if marker is None:
        return None
    if not data.isascii():  # rare (a label value in another script): validate as the full scan would
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    end = len(data)
    is_om = "openmetrics" in content_type
    if data.endswith(b"\n# EOF\n") or data.endswith(b"\n# EOF"):
        end = data.rindex(_EOF)
        is_om = True
    elif is_om or data[-1] != _NL:
        return None  # OpenMetrics without its # EOF, or a cut last line: the full scan says which
    boundary = b"\n" + marker
    # Every line up to `end` (each ends with "\n") must be accounted for below.
    lines = data.count(b"\n", 0, end)
    accounted = 0
    samples = 0
    types: dict[str, str] = {}
    families: set[str] = set()
    selected: list[Sample] = []
    seen: set[tuple[str, Labels]] = set()
    pos = 0
    while pos < end:
        # `pos` is the start of a `# HELP name ...` (or `# TYPE name type`) line.
        eol = data.find(b"\n", pos, end)
        if eol == -1:
            return None
        name_end = data.find(b" ", pos + 7, eol)
        raw = data[pos + 7 : eol if name_end == -1 else name_end]
        family = canonical_name(raw.decode())
        if not raw or family in families:
            return None  # a family in two blocks: not grouped
        families.add(family)
        at = pos
        if marker is _HELP:
            accounted += 1
            at = eol + 1
        for header in (_TYPE, _UNIT):
            if data.startswith(header, at):
                eol = data.find(b"\n", at, end)
                parts = data[at + 7 : eol].split(None, 1)
                if eol == -1 or len(parts) != 2 or parts[0] != raw:
                    return None
                if header is _TYPE:
                    types[family] = parts[1].strip().decode()
                accounted += 1
                at = eol + 1
        nxt = data.find(boundary, at - 1, end)
        pos = stop = end if nxt == -1 else nxt + 1  # the block's lines are [at, stop), each ending in "\n"
        while stop > at and data[stop - 2] == _NL:  # blank lines between families (the gateways write them)
            stop -= 1
            accounted += 1
        if stop <= at:
            continue  # a family with no samples yet
        prefix = _line_prefix(data, raw, at)
        if prefix is None:
            return None
        if not _reads(family, wanted):
            n = data.count(b"\n" + prefix, at - 1, stop - 1)
            samples += n
            accounted += n
            continue
        n = _read_block(data, at, stop, prefix.decode(), wanted, selected, seen, limits)
        if n is None:
            return None
        samples += n
        accounted += n
    if accounted != lines:
        return None
    limits.check_samples(samples)
    return Exposition("openmetrics" if is_om else "prometheus-text", -1, samples, types, selected)


_CHUNK = 1 << 20  # a wanted block is decoded and split this much at a time: bounded before a limit hits
# A sample line as prometheus_client writes it: name, optional label set, one space, value, optional
# timestamp. One findall per block runs in C. A `}` inside a quoted label value cuts the label text
# short, which parse_labels then refuses (an unterminated quote): such a block, and any block with
# another line shape (escapes, exemplars, tabs), is read line by line.
_SIMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}\n]*)\})? ([^ \n]+)(?: ([^ #\n][^ \n]*))?$", re.M)


def _read_block(data: bytes, at: int, stop: int, prefix: str, wanted: frozenset[str], selected: list[Sample],
                seen: set[tuple[str, Labels]], limits: Limits) -> int | None:
    """Parse the wanted samples of one block into `selected`; its line count, or None when a line is not
    the family's or does not parse (the full scan then names it)."""
    n = 0
    while at < stop:
        upto = stop if stop - at <= _CHUNK else data.rfind(b"\n", at, at + _CHUNK) + 1
        if upto <= at:
            upto = stop
        text = data[at:upto].decode()
        at = upto
        lines = text.count("\n")
        n += lines
        found = _SIMPLE_LINE.findall(text)
        got = _wanted(found, prefix, wanted) if len(found) == lines else None
        if got is None:  # an unusual line somewhere: the careful reader decides
            found = _line_by_line(text)
            got = None if found is None else _wanted(found, prefix, wanted)
            if got is None:
                return None
        for smp in got:
            key = (smp.name, smp.labels)
            if key in seen:
                return None
            seen.add(key)
        selected += got
        limits.check_series(len(selected))  # raises: the scrape fails whatever follows
    return n


def _wanted(found: list[tuple[str, str, str, str]], prefix: str, wanted: frozenset[str]) -> list[Sample] | None:
    out = []
    for raw, label_text, value_text, ts in found:
        if not raw.startswith(prefix):
            return None
        name = canonical_name(raw)
        if name not in wanted:
            continue
        try:
            value = float(value_text)
            if ts:
                float(ts)
            labels = parse_labels(label_text) if label_text else ()
        except (ValueError, ParseError):
            return None
        out.append(Sample(name, labels, value))
    return out


def _line_by_line(text: str) -> list[tuple[str, str, str, str]] | None:
    """(name, label text, value, timestamp) of every line of an unusual block, or None on a bad one."""
    out = []
    for line in text.split("\n")[:-1]:
        try:
            raw, label_text, rest = split_sample(line, 0)
            value_of(rest, 0, line)
        except ParseError:
            return None
        out.append((raw, label_text or "", rest.split()[0], ""))
    return out
