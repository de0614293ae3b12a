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
- a family written with quoted names (`# TYPE "my.x" counter`, lines `{"my.x_total",...}`: prometheus_client's
  allow-utf-8 escaping) is skipped the same way, its lines counted by `{"my.x`; one the sidecar reads, a
  quoted name with a space or an escape, go to the full scan.

What a skipped block is not checked for: the label syntax and value of its lines (the full scan
rejects a malformed line anywhere; this path rejects one only in a family the sidecar reads). Any
error in a wanted block, or any doubt, returns None, so errors are always the full scan's.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from monitor.conventions.names import canonical_name
from monitor.parse.lines import (
    LABEL_CACHE,
    Exposition,
    Labels,
    Limits,
    ParseError,
    Sample,
    only_current,
    parse_labels,
    split_sample,
    value_and_stamp,
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


@functools.lru_cache(maxsize=4096)
def _sparse(family: str, wanted: frozenset[str]) -> tuple[str, ...] | None:
    """The suffixes of the wanted names of `family` (`_sum`, `_count`) when neither its plain name nor its
    `_bucket` is wanted: a histogram read for its mean, whose bucket lines (most of the block, ~1,400 on a
    32-rank scheduler) are then found and skipped in C instead of parsed. None: read the block whole."""
    own = tuple(sorted(w[len(family):] for w in wanted if w.startswith(family)))
    if not own or "" in own or "_bucket" in own or "_total" in own:
        return None
    return own


class _Header(NamedTuple):
    family: str  # canonical
    type: str | None
    raw: bytes  # the name as the header spells it
    lines: int
    reads: bool
    sparse: tuple[str, ...] | None = None  # see `_sparse`


@functools.lru_cache(maxsize=8192)
def _header(text: bytes, helps: bool, wanted: frozenset[str]) -> _Header | None:
    """A block's header lines (`# HELP`, `# TYPE`, `# UNIT`; without the HELP when `helps` is False),
    which repeat from scrape to scrape: read once. None when they do not name one family."""
    lines = text.split(b"\n")
    raw = lines[0][7:].split(b" ", 1)[0]
    quoted = raw.startswith(b'"')
    if quoted and (len(raw) < 3 or not raw.endswith(b'"') or b"\\" in raw):
        return None  # a quoted name with a space or an escape: the full scan reads it
    kind = None
    for line in lines[1:] if helps else lines:
        parts = line[7:].split(None, 1)
        if len(parts) != 2 or parts[0] != raw:
            return None
        if line.startswith(_TYPE) and kind is None:
            kind = parts[1].strip().decode()
        elif not line.startswith(_UNIT):
            return None
    if not raw:
        return None
    family = canonical_name(raw[1:-1].decode() if quoted else raw.decode())
    reads = _reads(family, wanted)
    sparse = _sparse(family, wanted) if reads and kind in ("histogram", "summary") else None
    return _Header(family, kind, raw, len(lines), reads, sparse)


def _next_header(data: bytes, start: int, end: int, boundary: bytes) -> int:
    """`data.find(boundary, start, end)` for a boundary "\n# HELP " / "\n# TYPE ": found by the rare "#" (memchr)
    and checked there; a multi-byte find whose first and last bytes are frequent ("\n", " ") scans ~15x slower
    (0.8 ms of a 1.5 MB text's 86 blocks, a quarter of its parse)."""
    marker = boundary[1:]
    find, startswith = data.find, data.startswith
    pos = find(b"#", start + 1, end)
    while pos != -1:
        if data[pos - 1] == _NL and startswith(marker, pos):
            return pos - 1
        pos = find(b"#", pos + 1, end)
    return -1


def _newlines(data: bytes, end: int) -> int:
    """How many "\n" in data[:end]: `bytes.count` of one byte runs ~3x slower than the memchr-driven
    `replace` (0.6 vs 0.2 ms on the 1.5 MB 32-rank text, a fifth of a scrape's parse)."""
    whole = len(data) - len(data.replace(b"\n", b""))
    return whole - data.count(b"\n", end) if end < len(data) else whole


def _line_prefix(data: bytes, family: bytes, at: int) -> bytes | None:
    """The spelling the block's samples use: the header's, or OpenMetrics-escaped (prometheus_client
    >= 0.23 writes `sglang_x_total` under `# TYPE sglang:x counter`); under a quoted name (`# TYPE
    "my.x" counter`), the samples' `{"my.x` (`{"my.x_total",...}`)."""
    if family.startswith(b'"'):
        quoted = b"{" + family[:-1]
        return quoted if data.startswith(quoted, at) else None
    if data.startswith(family, at):
        return family
    escaped = family.replace(b":", b"_")
    return escaped if data.startswith(escaped, at) else None


def parse_grouped(data: bytes, wanted: frozenset[str], content_type: str, limits: Limits) -> Exposition | None:
    """The exposition, reading only the wanted families' blocks; None when `data` is not grouped as
    prometheus_client writes it (or anything is wrong): the caller then runs the full scan."""
    # Blocks start at `# HELP` (prometheus_client) or, in texts without HELP lines, at `# TYPE`.
    helps = data.startswith(_HELP)
    if not helps and not data.startswith(_TYPE):
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
    boundary = b"\n# HELP " if helps else b"\n# TYPE "
    # Every line up to `end` (each ends with "\n") must be accounted for below.
    lines = _newlines(data, end)
    accounted = 0
    samples = 0
    types: dict[str, str | None] = {}  # every family seen, with its TYPE if it has one
    selected: list[Sample] = []
    seen: set[tuple[str, Labels]] = set()
    dated: list[tuple[Sample, str]] = []  # kept samples that carry a timestamp, with it
    pos = 0
    find, startswith = data.find, data.startswith
    while pos < end:
        # `pos` is the start of a block's first header line; its header ends at `eol`.
        eol = find(b"\n", pos, end)
        if helps and startswith(_TYPE, eol + 1):
            eol = find(b"\n", eol + 1, end)
        if startswith(_UNIT, eol + 1):
            eol = find(b"\n", eol + 1, end)
        head = _header(data[pos:eol], helps, wanted) if eol != -1 else None
        if head is None or head.family in types:
            return None  # not one family's header, or a family in two blocks: not grouped
        types[head.family] = head.type
        accounted += head.lines
        at = eol + 1
        nxt = _next_header(data, eol, end, boundary)
        pos = stop = end if nxt == -1 else nxt + 1  # the block's lines are [at, stop), each ending in "\n"
        while stop > at and data[stop - 2] == _NL:  # blank lines between families (the gateways write them)
            stop -= 1
            accounted += 1
        if stop <= at:
            continue  # a family with no samples yet
        prefix = _line_prefix(data, head.raw, at)
        if prefix is None or head.reads and prefix.startswith(b"{"):
            return None  # a family the sidecar reads written with quoted names: the full scan reads it
        if not head.reads:
            n = data.count(b"\n" + prefix, at - 1, stop - 1)
        elif head.sparse is not None:
            n = _read_sparse(data, at, stop, prefix, head.sparse, wanted, selected, seen, dated, limits)
            if n is None:
                return None
        else:
            n = _read_block(data, at, stop, prefix.decode(), wanted, selected, seen, dated, limits)
            if n is None:
                return None
        samples += n
        accounted += n
    if accounted != lines:
        return None
    limits.check_samples(samples)
    declared = {f: t for f, t in types.items() if t is not None}
    left_out = None
    if dated:
        selected, left_out = only_current(selected, dated, is_om, limits)
    return Exposition("openmetrics" if is_om else "prometheus-text", -1, samples, declared, selected, left_out)


_CHUNK = 1 << 20  # a wanted block is decoded and split this much at a time: bounded before a limit hits
# A sample line as prometheus_client writes it: name, optional label set, one space, value, optional
# timestamp, newline. One findall per block runs in C; every match ends at a newline, so a block whose
# match count equals its line count matched each line once (from its start: a line that does not match
# from its start, and yet from somewhere inside, yields a name off the family's prefix or a label text or
# value that does not parse, and the block is read line by line). `[^\n]*` then back to the last `}`
# is ~2x faster in `re` than `[^}\n]*`; an exemplar's braces after the value make the label text fail.
_SIMPLE_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^\n]*)\})? ([^ \n]+)(?: ([^ #\n][^ \n]*))?\n")
_as_sample = functools.partial(tuple.__new__, Sample)  # Sample(*row), without a Python call


def _read_sparse(data: bytes, at: int, stop: int, prefix: bytes, suffixes: tuple[str, ...], wanted: frozenset[str],
                 selected: list[Sample], seen: set[tuple[str, Labels]], dated: list[tuple[Sample, str]],
                 limits: Limits) -> int | None:
    """The wanted lines of a block read for a few of its sample names (`_sparse`): its lines are counted by the
    family's name, as a skipped block's are (a line of another name leaves the text's count short: not
    grouped), and only the lines of those names (found with `bytes.find`) are parsed. Its line count, or None
    when a read line does not parse (the full scan then names it)."""
    n = data.count(b"\n" + prefix, at - 1, stop - 1)
    picked: list[bytes] = []
    find = data.find
    for suffix in suffixes:
        needle = b"\n" + prefix + suffix.encode()
        pos = find(needle, at - 1, stop - 1)
        while pos != -1:
            eol = find(b"\n", pos + 1, stop)
            picked.append(data[pos + 1:eol + 1])
            pos = find(needle, eol, stop - 1)
    if not picked:
        return n
    text = b"".join(picked).decode()
    found = _SIMPLE_LINE.findall(text)
    got = _wanted(found, prefix.decode(), wanted, dated) if len(found) == len(picked) else None
    if got is None:
        found = _line_by_line(text)
        got = None if found is None else _wanted(found, prefix.decode(), wanted, dated)
        if got is None:
            return None
    before = len(seen)
    seen.update([(smp[0], smp[1]) for smp in got])
    if len(seen) != before + len(got):
        return None
    selected += got
    limits.check_series(len(selected))
    return n


def _read_block(data: bytes, at: int, stop: int, prefix: str, wanted: frozenset[str], selected: list[Sample],
                seen: set[tuple[str, Labels]], dated: list[tuple[Sample, str]], limits: Limits) -> int | None:
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
        got = _wanted(found, prefix, wanted, dated) if len(found) == lines else None
        if got is None:  # an unusual line somewhere: the careful reader decides
            found = _line_by_line(text)
            got = None if found is None else _wanted(found, prefix, wanted, dated)
            if got is None:
                return None
        before = len(seen)
        seen.update([(smp[0], smp[1]) for smp in got])
        if len(seen) != before + len(got):
            return None  # a duplicate series: the full scan names its line
        selected += got
        limits.check_series(len(selected))  # raises: the scrape fails whatever follows
    return n


def _wanted(found: list[tuple[str, str, str, str]], prefix: str, wanted: frozenset[str],
            dated: list[tuple[Sample, str]]) -> list[Sample] | None:
    """The wanted samples among one block's lines (name, label text, value, timestamp), column by column:
    the per-line work runs in C (map), which matters at ~500 wanted lines a scrape. Those with a timestamp
    are added to `dated` with it (for `only_current`)."""
    if not found:
        return []
    raws, label_texts, values, stamps = zip(*found)
    names: dict[str, str | None] = {}  # raw sample name -> canonical name when wanted (a block has a few)
    for raw in set(raws):
        if not raw.startswith(prefix):
            return None
        canon = canonical_name(raw)
        names[raw] = canon if canon in wanted else None
    stamped = any(stamps)  # off the fast path: SGLang writes no timestamps, and `any` of empty strings stays in C
    try:
        floats = list(map(float, values))
        if stamped:
            list(map(float, filter(None, stamps)))
        labels = list(map(LABEL_CACHE.get, label_texts))
        if None in labels:  # first sight of these label sets
            labels = [known if known is not None else parse_labels(text)
                      for known, text in zip(labels, label_texts)]
    except (ValueError, ParseError):
        return None
    canon = list(map(names.__getitem__, raws))
    rows = zip(canon, labels, floats)
    if None in names.values():
        rows = (row for row in rows if row[0] is not None)
    got = list(map(_as_sample, rows))
    if stamped:
        kept = [stamp for c, stamp in zip(canon, stamps) if c is not None]
        dated += [(smp, stamp) for smp, stamp in zip(got, kept) if stamp]
    return got


def _line_by_line(text: str) -> list[tuple[str, str, str, str]] | None:
    """(name, label text, value, timestamp) of every line of an unusual block, or None on a bad one."""
    out = []
    for line in text.split("\n")[:-1]:
        try:
            raw, label_text, rest = split_sample(line, 0)
            _, stamp = value_and_stamp(rest, 0, line)
        except ParseError:
            return None
        out.append((raw, label_text or "", rest.split()[0], stamp))
    return out
