"""PromQL text: the one builder (selectors and the SLO expression templates) and the reader of the
metric names an expression selects. Rules, promtool tests, dashboards and the analyzer build every
selector here, so every label value passes `monitor.escaping` and a malformed matcher cannot be emitted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from monitor.escaping import matchers, promql_string


def format_number(value: float) -> str:
    """A float as short, exact-enough text for PromQL and annotations (0.04, 1, 14.4)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def selector(metric: str, eq: dict[str, str], regex: dict[str, str] | None = None,
             neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> str:
    """`metric{a="x",b=~"y|z",c!="w",d!~"v"}`; equality matchers first, each group in the given order."""
    parts = matchers(eq)[1:-1] if eq else ""
    extra = ",".join(f"{k}=~{promql_string(v)}" for k, v in (regex or {}).items())
    unequal = ",".join(f"{k}!={promql_string(v)}" for k, v in (neq or {}).items())
    unmatched = ",".join(f"{k}!~{promql_string(v)}" for k, v in (nregex or {}).items())
    inner = ",".join(p for p in (parts, extra, unequal, unmatched) if p)
    return f"{metric}{{{inner}}}" if inner else metric


def matched_selector(metric: str, eq: dict[str, str], label_matchers: Iterable[tuple[str, str, str]]) -> str:
    """`selector` from (label, op, value) matchers (op one of = != =~ !~) added to `eq`."""
    groups: dict[str, dict[str, str]] = {"=": dict(eq), "=~": {}, "!=": {}, "!~": {}}
    for label, op, value in label_matchers:
        groups[op][label] = value
    return selector(metric, groups["="], groups["=~"], groups["!="], groups["!~"])


def split_matchers(label_matchers: Iterable[tuple[str, str, str]]) -> tuple[dict[str, str], dict[str, str],
                                                                            dict[str, str]]:
    """(label, op, value) matchers (op one of =~ != !~) as the builder's regex, not-equal and not-matching groups."""
    groups: dict[str, dict[str, str]] = {"=~": {}, "!=": {}, "!~": {}}
    for label, op, value in label_matchers:
        groups[op][label] = value
    return groups["=~"], groups["!="], groups["!~"]


def sum_rate(metric: str, eq: dict[str, str], regex: dict[str, str], window: str, by: str = "deployment",
             neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> str:
    return f"sum by ({by}) (rate({selector(metric, eq, regex, neq, nregex)}[{window}]))"


def sum_rate_of(selected: str, window: str, by: str = "deployment") -> str:
    return f"sum by ({by}) (rate({selected}[{window}]))"


def good_from_bad(total: str, bad: list[str]) -> str:
    """Good events as total - bad: a bad term whose series do not exist yet (a gateway creates a status
    code's series at its first response) counts 0, not "no data"; never below 0 (failures counted at the
    end of requests that arrived before the window)."""
    terms = "".join(f"\n- ({b} or 0 * {total})" for b in bad)
    return f"clamp_min(\n{total}{terms},\n0)"


def good_rate(family: str, eq: dict[str, str], regex: dict[str, str], window: str,
              lower: str | None, upper: str | None, fraction: float, neq: dict[str, str] | None = None,
              nregex: dict[str, str] | None = None) -> str:
    """Rate of good events: the `le` bucket, or a linear interpolation between two buckets."""
    bucket = family + "_bucket"
    if upper is None:
        return sum_rate(bucket, {**eq, "le": lower or ""}, regex, window, neq=neq, nregex=nregex)
    hi = sum_rate(bucket, {**eq, "le": upper}, regex, window, neq=neq, nregex=nregex)
    if lower is None:  # target below the first edge: interpolate from 0
        return f"{format_number(fraction)} * {hi}"
    lo = sum_rate(bucket, {**eq, "le": lower}, regex, window, neq=neq, nregex=nregex)
    return f"{lo}\n+ {format_number(fraction)} * ({hi} - {lo})"


def histogram_rate(family: str, eq: dict[str, str], regex: dict[str, str], window: str,
                   neq: dict[str, str] | None = None, by: str = "deployment",
                   nregex: dict[str, str] | None = None) -> str:
    """A native histogram's (NHCB) per-second rate summed by `by`: one histogram holding every bucket, the
    count and the sum (the series of one family share the deployment's bucket layout, so the sum adds)."""
    return f"sum by ({by}) (rate({selector(family, eq, regex, neq, nregex)}[{window}]))"


def nhcb_good_rate(family: str, eq: dict[str, str], regex: dict[str, str], window: str, target: float,
                   neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> str:
    """Good events per second from a native histogram with custom buckets: the share at or below `target`
    times the count. For a target on a bucket edge histogram_fraction sums the buckets up to that edge
    exactly (the edge's bucket is included whole, the next one not at all: what `_bucket{le}` counts); between
    edges it interpolates linearly inside the bucket, from 0 in the first one, as the classic rules do. The
    lower bound is -Inf, not 0: a family whose first edge is 0 (SGLang's queue time) holds its zeros in the
    bucket ending at 0, which histogram_fraction(0, ...) would leave out.
    The share is NaN without traffic: `> 0` drops it and `or` records 0 good events, as the classic rate does
    (a NaN would poison the period's sum_over_time)."""
    hist = histogram_rate(family, eq, regex, window, neq, nregex=nregex)
    return (f"histogram_fraction(-Inf, {format_number(target)}, {hist})\n* (histogram_count({hist}) > 0)\n"
            f"or histogram_count({hist})")


def nhcb_count_rate(family: str, eq: dict[str, str], regex: dict[str, str], window: str,
                    neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> str:
    return f"histogram_count({histogram_rate(family, eq, regex, window, neq, nregex=nregex)})"


def error_ratio(good: str, total: str) -> str:
    # `total > 0` drops the series when there is no traffic: rate() of unchanged counters is 0,
    # 0/0 is NaN, and no-traffic must never page.
    return f"1 - ({good} / ({total} > 0))"


def mean_latency(family: str, eq: dict[str, str], regex: dict[str, str], window: str,
                 neq: dict[str, str] | None = None, nhcb: bool = False, nregex: dict[str, str] | None = None) -> str:
    if nhcb:
        hist = histogram_rate(family, eq, regex, window, neq, nregex=nregex)
        return f"histogram_sum({hist})\n/ (histogram_count({hist}) > 0)"
    return (f"{sum_rate(family + '_sum', eq, regex, window, neq=neq, nregex=nregex)}\n/ "
            f"({sum_rate(family + '_count', eq, regex, window, neq=neq, nregex=nregex)} > 0)")


def per_rank_total(metric: str, eq: dict[str, str], regex: dict[str, str]) -> str:
    """A scheduler gauge summed over DP ranks but never over TP ranks (TP ranks repeat the value).

    `priority=""` keeps the total when priority scheduling adds a per-priority breakdown; it also
    matches series without the label.
    """
    sel = selector(metric, {**eq, "priority": ""}, regex)
    return f"sum by (deployment, role) (max by (deployment, role, instance, dp_rank) ({sel}))"


# --- reading names back: panel descriptions and the undefined-metric guard --------------------
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
