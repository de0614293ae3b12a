"""What both parsers of an exposition share (the full scan in `monitor.parse.exposition`, the block skipper in
`monitor.parse.blocks`): the result types, the limits and errors, and the reading of one sample line (name,
label set, value). Callers import these from `monitor.parse.exposition`, the parser's public module."""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from monitor.conventions.names import DROPPED_LABELS

Labels = tuple[tuple[str, str], ...]

NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
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
    # (the scrape's wall time, one scrape interval): a kept sample whose own timestamp lies further than that
    # interval from that time is not this scrape's value and is left out (`only_current`). None: timestamps are
    # read but not compared with a clock (`inspect`, tests).
    current: tuple[float, float] | None = None

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


class Dated(NamedTuple):
    """The wanted samples a parse left out for their own timestamps (`Limits.current`)."""

    old: int  # dated more than one interval before the scrape
    oldest: float  # seconds the oldest of them lies before it
    ahead: int  # dated more than one interval after it
    furthest: float  # seconds the furthest of them lies after it
    along: int  # samples of the same histogram series left out with them, dated or not (a series is read whole)
    old_name: str  # the first old one's name, for the message ("" when none)
    ahead_name: str  # the first one ahead's
    interval: float


class Exposition(NamedTuple):
    format: str  # "prometheus-text" | "openmetrics"
    families: int  # distinct families that have at least one sample (-1: not counted)
    samples: int  # every sample line
    types: dict[str, str]  # canonical family name -> declared TYPE
    selected: list[Sample]  # samples whose name is in `wanted` (all, when wanted is None), current ones only
    dated: Dated | None = None  # what was left out of `selected` for its timestamp; None: nothing


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


def read_quoted(text: str, i: int, lineno: int, line: str, what: str) -> tuple[str, int]:
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
            key, i = read_quoted(text, i, lineno, line, "quoted name")
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
            m = NAME_RE.match(text, i)
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
        value, i = read_quoted(text, i, lineno, line, f"value of label {key!r}")
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
    m = NAME_RE.match(line)
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


def value_of(rest: str, lineno: int, line: str) -> float:
    """The value after the name and labels; a timestamp after it must be a number too."""
    return value_and_stamp(rest, lineno, line)[0]


def value_and_stamp(rest: str, lineno: int, line: str) -> tuple[float, str]:
    """The value after the name and labels, and the timestamp after it as written ("" when none)."""
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
        return value, tokens[1]
    return value, ""


_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def _histogram_series(smp: Sample) -> tuple[str, Labels]:
    return smp.name[:smp.name.rfind("_")], tuple(p for p in smp.labels if p[0] != "le")


def only_current(selected: list[Sample], dated: list[tuple[Sample, str]], is_om: bool,
                 limits: Limits) -> tuple[list[Sample], Dated | None]:
    """`selected` without the samples whose own timestamp (`dated`: each with the timestamp as written) is
    further than one scrape interval from the scrape (`limits.current`). Called only when some kept line has a
    timestamp, which SGLang (prometheus_client) never writes.

    Prometheus (honor_timestamps, its default) stores a sample at its own time: an old one is not the series'
    value now, and it drops it outright when it is older than its series' last sample or than its head's range
    (2.42 stored none dated 1 h back). One dated ahead is stored at that future time, where a query at the
    scrape's time does not see it, and later samples dated before it are out of order: not this scrape's value
    either. Within one interval either way (clock skew, an exporter's own collection time) a sample is current.
    A histogram series is read whole or not at all: without some of its buckets it reads as another layout, and
    without its +Inf one it fails the scrape."""
    if limits.current is None:
        return selected, None
    now, interval = limits.current
    scale = 1.0 if is_om else 1e-3  # OpenMetrics writes seconds, the text format milliseconds
    old = ahead = 0
    oldest = furthest = 0.0
    out: set[int] = set()  # id() of the samples left out: they are the objects in `selected`
    series: set[tuple[str, Labels]] = set()
    old_name = ahead_name = ""
    for smp, stamp in dated:
        off = float(stamp) * scale - now
        if -interval <= off <= interval:
            continue
        if off > interval:
            ahead += 1
            furthest = max(furthest, off)
            ahead_name = ahead_name or smp.name
        else:  # NaN too: no time at all is not this scrape's either
            old += 1
            oldest = max(oldest, -off)
            old_name = old_name or smp.name
        out.add(id(smp))
        if smp.name.endswith(_HISTOGRAM_PARTS):
            series.add(_histogram_series(smp))
    if not out:
        return selected, None
    kept: list[Sample] = []
    along = 0
    for smp in selected:
        if id(smp) in out:
            continue
        if series and smp.name.endswith(_HISTOGRAM_PARTS) and _histogram_series(smp) in series:
            along += 1
            continue
        kept.append(smp)
    return kept, Dated(old, oldest, ahead, furthest, along, old_name, ahead_name, interval)
