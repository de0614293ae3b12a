"""PromQL text: the one builder (selectors, function calls, aggregations, binary operators with their
modifiers, ranges, offsets and literals; the SLO expression templates made of them) and the reader of the
metric names an expression selects. Rules, promtool tests, dashboards, the interop specs and the analyzer
build every expression here, so every label value passes `monitor.escaping`, a malformed matcher cannot be
emitted and every function, operator and modifier is one PromQL knows (tests/test_promql_everywhere.py checks
that no other module writes selector, function or operator text itself).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Literal

from monitor.escaping import LABEL_NAME_RE, promql_string

Matcher = tuple[str, str, str]  # (label, op, value), op one of = != =~ !~ (conventions.names.Matcher)
MATCH_OPS = ("=", "!=", "=~", "!~")


def format_number(value: float) -> str:
    """A float as short, exact-enough text for PromQL and annotations (0.04, 1, 14.4)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


# PromQL's binary operators by precedence, lowest first (`^` is right-associative, the others left).
_PRECEDENCE = {"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, "<=": 3, "<": 3, ">=": 3, ">": 3,
               "+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "atan2": 5, "^": 6}
_BINARY_OPS = frozenset(_PRECEDENCE)
_SET_OPS = frozenset({"and", "or", "unless"})
_COMPARISONS = frozenset({"==", "!=", "<=", "<", ">=", ">"})
_ATOM = 99  # a selector, call, aggregation, literal or parenthesized expression: never split by an operator
AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                          "bottomk", "topk", "quantile", "limitk", "limit_ratio"})
# Every function of PromQL (Prometheus 3.x; the experimental ones included), so a misspelt one is refused here
# rather than by Prometheus at load time.
FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg_over_time",
    "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time", "days_in_month",
    "day_of_month", "day_of_week", "day_of_year", "deg", "delta", "deriv", "double_exponential_smoothing", "exp",
    "floor", "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase", "info", "irate",
    "label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time",
    "min_over_time", "minute", "month", "pi", "predict_linear", "present_over_time", "quantile_over_time", "rad",
    "rate", "resets", "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time",
    "timestamp", "vector", "year",
})
_NUMBER = re.compile(r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|0[xX][0-9a-fA-F]+|Inf|NaN)", re.IGNORECASE)
# A Prometheus duration (`5m`, `1h30m`, `500ms`), or a placeholder a templating tool fills with one: a Grafana
# variable (`$__rate_interval`, `${window}`) or Sloth's `{{.window}}`.
_DURATION = re.compile(r"(?:\d+(?:ms|[smhdwy]))+|\$\w+|\$\{\w+\}|\{\{\s*\.window\s*\}\}")
_SPACE = re.compile(r"\s+")


class Expr(str):
    """PromQL text that knows the metric names it selects, so a panel can list them without reading them
    back out of the text. Built by `select` and the functions below; plain `str` everywhere else (an f-string
    around one is a plain string again, with no names)."""

    names: frozenset[str]
    binary: bool  # a binary operation at the top: parenthesized when it becomes an operand
    precedence: int  # of the operator at the top (`_PRECEDENCE`), _ATOM for anything else


def _expr(text: str, names: Iterable[str] = (), binary: bool = False, precedence: int = _ATOM) -> Expr:
    out = Expr(text)
    out.names, out.binary, out.precedence = frozenset(names), binary, precedence
    return out


def names_of(*exprs: str | float) -> frozenset[str]:
    """The metric names `exprs` select, as their builder recorded them (numbers select none). A plain
    string is refused: it cannot say its names (build it with the functions here)."""
    found: set[str] = set()
    for e in exprs:
        if isinstance(e, Expr):
            found |= e.names
        elif isinstance(e, str):
            raise TypeError(f"not built by monitor.promql, so its metric names are unknown: {e!r}")
    return frozenset(found)


def _label(name: str) -> str:
    if not LABEL_NAME_RE.fullmatch(name):
        raise ValueError(f"not a Prometheus label name: {name!r}")
    return name


def _space(text: str, what: str) -> str:
    if text != " " and not _SPACE.fullmatch(text):
        raise ValueError(f"{what} is whitespace (a space or a line break), not {text!r}")
    return text


def _duration(text: str) -> str:
    if not _DURATION.fullmatch(text):
        raise ValueError(f"not a PromQL duration (or a placeholder for one): {text!r}")
    return text


def label_matcher(label: str, op: str, value: str) -> str:
    """`label op "value"` (one matcher, for a selector or for text that names one)."""
    if op not in MATCH_OPS:
        raise ValueError(f"not a PromQL label matcher operator: {op!r}")
    return f"{_label(label)}{op}{promql_string(value)}"


def select(metric: str, label_matchers: Iterable[Matcher] = ()) -> Expr:
    """`metric{a="x",b=~"y"}`, the matchers in the given order (`metric` alone without any; `{...}` alone
    without a metric, as with a `__name__` matcher). An equality matcher on `__name__` counts as its name."""
    listed = list(label_matchers)
    inner = ",".join(label_matcher(*m) for m in listed)
    names = {metric} if metric else {v for label, op, v in listed if label == "__name__" and op == "="}
    return _expr(f"{metric}{{{inner}}}" if inner else metric, names)


def number(value: float | str) -> Expr:
    """A number literal: a float as `format_number` writes it (`+Inf`/`-Inf`/`NaN` for those), or the given
    literal text as it is (`"0.000001"` where the exponent form would read worse)."""
    if isinstance(value, str):
        if not _NUMBER.fullmatch(value):
            raise ValueError(f"not a PromQL number literal: {value!r}")
        return _expr(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a number literal is a float, not {value!r}")
    if math.isnan(value):
        return _expr("NaN")
    if math.isinf(value):
        return _expr("+Inf" if value > 0 else "-Inf")
    return _expr(format_number(value))


Operand = Expr | float


_NUMBERS: dict[float, Expr] = {}  # the few literals the rules repeat (0, 1, thresholds): built once


def _arg(e: Operand) -> Expr:
    if isinstance(e, Expr):
        return e
    if isinstance(e, (int, float)) and not isinstance(e, bool):
        found = _NUMBERS.get(e)
        if found is None:
            found = number(e)
            if len(_NUMBERS) < 4096:
                _NUMBERS[e] = found
        return found
    raise TypeError(f"an operand is an Expr or a number, not {e!r}")


def paren(e: Operand) -> Expr:
    """`(e)`: a group that reads as one operand whatever its operator (and where the text wants it, a group
    precedence alone would not need)."""
    inner = _arg(e)
    return _expr(f"({inner})", inner.names)


def _grouping(by: Sequence[str]) -> str:
    return ", ".join(_label(b) for b in by)


def aggregate(op: str, expr: Expr, by: Sequence[str] = (), without: Sequence[str] | None = None) -> Expr:
    """`op by (a, b) (expr)`, `op without (a) (expr)`, or `op(expr)` without grouping labels (op: sum, max, avg,
    count, ...)."""
    if op not in AGGREGATIONS:
        raise ValueError(f"not a PromQL aggregation operator: {op!r}")
    if without is not None:
        if by:
            raise ValueError("an aggregation groups `by` or `without`, not both")
        text = f"{op} without ({_grouping(without)}) ({expr})"
    else:
        text = f"{op} by ({_grouping(by)}) ({expr})" if by else f"{op}({expr})"
    return _expr(text, names_of(expr))


def call(fn: str, *args: Operand, sep: str = ", ", open: str = "", close: str = "") -> Expr:
    """`fn(a, b)`: a PromQL function of instant-vector, scalar and number arguments (a range argument:
    `range_call`). `open`, `close` and the whitespace after each comma of `sep` lay out a long call over lines."""
    if fn not in FUNCTIONS:
        raise ValueError(f"not a PromQL function: {fn!r}")
    if not sep.startswith(","):
        raise ValueError(f"arguments are separated by a comma: {sep!r}")
    if sep[1:]:
        _space(sep[1:], "the separator after the comma")
    if open:
        _space(open, "the text after the opening parenthesis")
    if close:
        _space(close, "the text before the closing parenthesis")
    parts = [_arg(a) for a in args]
    return _expr(f"{fn}({open}{sep.join(parts)}{close})", names_of(*parts))


def offset(selected: Expr, duration: str) -> Expr:
    """`selected offset 1h` (a selector, or a selector with its range)."""
    _duration(duration.removeprefix("-"))
    return _expr(f"{selected} offset {duration}", names_of(selected))


def range_call(fn: str, selected: Expr, window: str, *args: Operand, shift: str | None = None) -> Expr:
    """`fn(selected[window])`: rate, increase, deriv, sum_over_time, ... over a range (`shift`: its offset;
    `args` follow the range, as predict_linear's)."""
    if fn not in FUNCTIONS:
        raise ValueError(f"not a PromQL function: {fn!r}")
    ranged = _expr(f"{selected}[{_duration(window)}]", names_of(selected))
    if shift is not None:
        ranged = offset(ranged, shift)
    parts = [_arg(a) for a in args]
    return _expr(f"{fn}({', '.join([ranged, *parts])})", names_of(ranged, *parts))


def rate_sum(selected: Expr, window: str, by: Sequence[str] = ()) -> Expr:
    """`sum by (...) (rate(selected[window]))`, or `sum(rate(...))` without grouping labels."""
    return aggregate("sum", range_call("rate", selected, window), by)


def _operand(out: Expr, mode: str, op_precedence: int, side: str, right_assoc: bool) -> str:
    if mode == "always":
        return f"({out})" if out.binary else out
    tighter_side = "left" if right_assoc else "right"  # where an operator of the same precedence needs a group
    if out.precedence < op_precedence or (out.precedence == op_precedence and side == tighter_side):
        return f"({out})"
    return out


def _modifiers(op: str, bool_: bool, on: Sequence[str] | None, ignoring: Sequence[str] | None,
               group_left: Sequence[str] | None, group_right: Sequence[str] | None) -> str:
    """` bool on (a) group_left (b)`: a binary operator's modifiers, checked against the operator."""
    if bool_ and op not in _COMPARISONS:
        raise ValueError(f"`bool` modifies a comparison, not {op!r}")
    if on is not None and ignoring is not None:
        raise ValueError("vector matching is `on` or `ignoring`, not both")
    if group_left is not None and group_right is not None:
        raise ValueError("a match groups left or right, not both")
    if (group_left is not None or group_right is not None) and (on is None and ignoring is None or op in _SET_OPS):
        raise ValueError("group_left/group_right need `on` or `ignoring`, and no set operator")
    mods = " bool" if bool_ else ""
    for word, labels in (("on", on), ("ignoring", ignoring), ("group_left", group_left), ("group_right", group_right)):
        if labels is not None:
            mods += f" {word} ({_grouping(labels)})"
    return mods


def binop(left: Operand, op: str, right: Operand, *, bool_: bool = False, on: Sequence[str] | None = None,
          ignoring: Sequence[str] | None = None, group_left: Sequence[str] | None = None,
          group_right: Sequence[str] | None = None, before: str = " ", after: str = " ",
          parens: Literal["always", "needed"] = "always") -> Expr:
    """`left op right`, with PromQL's modifiers: `bool` (a comparison), `on (...)` / `ignoring (...)` and
    `group_left (...)` / `group_right (...)` (vector matching). `before`/`after`: the whitespace around the
    operator (a line break lays a long rule out). An operand that is itself a binary operation is
    parenthesized: always (`parens="always"`, so the result never depends on PromQL's precedence), or only
    where precedence needs it (`"needed"`; `paren` groups one anyway)."""
    if op not in _BINARY_OPS:
        raise ValueError(f"not a PromQL binary operator: {op!r}")
    mods = ""
    if bool_ or on is not None or ignoring is not None or group_left is not None or group_right is not None:
        mods = _modifiers(op, bool_, on, ignoring, group_left, group_right)
    precedence = _PRECEDENCE[op]
    left_e, right_e = _arg(left), _arg(right)
    lhs = _operand(left_e, parens, precedence, "left", op == "^")
    rhs = _operand(right_e, parens, precedence, "right", op == "^")
    text = f"{lhs}{_space(before, 'before an operator')}{op}{mods}{_space(after, 'after an operator')}{rhs}"
    return _expr(text, left_e.names | right_e.names, binary=True, precedence=precedence)


def chain(op: str, operands: Sequence[Operand], before: str = " ", after: str = " ") -> Expr:
    """`a op b op c`, grouped from the left as PromQL reads it (one operand alone is itself)."""
    if not operands:
        raise ValueError("an operator chain needs an operand")
    out = _arg(operands[0])
    for e in operands[1:]:
        out = binop(out, op, e, before=before, after=after, parens="needed")
    return out


def either(*exprs: Expr | float) -> Expr:
    """`a or b or c`: the first that has a value (binary operands parenthesized)."""
    parts = [_operand(_arg(e), "always", 1, "right", False) for e in exprs]
    return _expr(" or ".join(parts), names_of(*exprs), binary=len(exprs) > 1,
                 precedence=_PRECEDENCE["or"] if len(exprs) > 1 else _ATOM)


def histogram_quantile(q: float, family: str, label_matchers: Iterable[Matcher], window: str,
                       by: Sequence[str] = (), nhcb: bool = False) -> Expr:
    """histogram_quantile of a histogram family over `window`, summed (by `by`): the classic `_bucket`
    series summed by le, or (nhcb) the native histogram with custom buckets itself; both interpolate
    linearly inside a bucket."""
    if nhcb:
        hist = rate_sum(select(family, label_matchers), window, by)
    else:
        hist = rate_sum(select(family + "_bucket", label_matchers), window, (*by, "le"))
    return call("histogram_quantile", q, hist)


def histogram_mean(family: str, label_matchers: Iterable[Matcher], window: str, nhcb: bool = False) -> Expr:
    """The mean observation over `window`, all series summed: histogram_avg of the native histogram, or the
    classic `_sum` rate over the `_count` rate."""
    listed = tuple(label_matchers)
    if nhcb:
        return call("histogram_avg", rate_sum(select(family, listed), window))
    return binop(rate_sum(select(family + "_sum", listed), window), "/",
                 rate_sum(select(family + "_count", listed), window))


def bucket_rates(family: str, label_matchers: Iterable[Matcher], window: str, nhcb: bool = False) -> Expr:
    """Per-bucket rates (a heatmap): the classic buckets summed by le, or the native histogram summed."""
    if nhcb:
        return rate_sum(select(family, label_matchers), window)
    return rate_sum(select(family + "_bucket", label_matchers), window, ("le",))


def select_groups(metric: str, eq: dict[str, str], regex: dict[str, str] | None = None,
                  neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> Expr:
    """`select` from matchers grouped by operator: equality first, then =~, != and !~, each in the given order."""
    groups = ((eq, "="), (regex or {}, "=~"), (neq or {}, "!="), (nregex or {}, "!~"))
    return select(metric, [(k, op, v) for group, op in groups for k, v in group.items()])


def selector(metric: str, eq: dict[str, str], regex: dict[str, str] | None = None,
             neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> str:
    """`metric{a="x",b=~"y|z",c!="w",d!~"v"}`; equality matchers first, each group in the given order (as
    text: a promtool series, an expected sample's labels; `select_groups` is the same as an Expr)."""
    return str(select_groups(metric, eq, regex, neq, nregex))


def matched_select(metric: str, eq: dict[str, str], label_matchers: Iterable[tuple[str, str, str]]) -> Expr:
    """The selector of `metric` with (label, op, value) matchers (op one of = != =~ !~) added to `eq`,
    equality matchers first."""
    groups: dict[str, dict[str, str]] = {"=": dict(eq), "=~": {}, "!=": {}, "!~": {}}
    for label, op, value in label_matchers:
        groups[op][label] = value
    return select_groups(metric, groups["="], groups["=~"], groups["!="], groups["!~"])


def matched_selector(metric: str, eq: dict[str, str], label_matchers: Iterable[tuple[str, str, str]]) -> str:
    """`matched_select` as text."""
    return str(matched_select(metric, eq, label_matchers))


def split_matchers(label_matchers: Iterable[tuple[str, str, str]]) -> tuple[dict[str, str], dict[str, str],
                                                                            dict[str, str]]:
    """(label, op, value) matchers (op one of =~ != !~) as the builder's regex, not-equal and not-matching groups."""
    groups: dict[str, dict[str, str]] = {"=~": {}, "!=": {}, "!~": {}}
    for label, op, value in label_matchers:
        groups[op][label] = value
    return groups["=~"], groups["!="], groups["!~"]


def _by(by: str) -> tuple[str, ...]:
    return tuple(label.strip() for label in by.split(","))


def sum_rate(metric: str, eq: dict[str, str], regex: dict[str, str], window: str, by: str = "deployment",
             neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> Expr:
    return sum_rate_of(select_groups(metric, eq, regex, neq, nregex), window, by)


def sum_rate_of(selected: Expr, window: str, by: str = "deployment") -> Expr:
    """`sum by (deployment) (rate(selected[window]))` (`by`: labels separated by commas)."""
    return rate_sum(selected, window, _by(by))


def good_from_bad(total: Expr, bad: list[Expr]) -> Expr:
    """Good events as total - bad: a bad term whose series do not exist yet (a gateway creates a status
    code's series at its first response) counts 0, not "no data"; never below 0 (failures counted at the
    end of requests that arrived before the window)."""
    good = chain("-", [total, *(binop(b, "or", binop(0, "*", total), parens="needed") for b in bad)], before="\n")
    return call("clamp_min", good, 0, sep=",\n", open="\n")


def good_rate(family: str, eq: dict[str, str], regex: dict[str, str], window: str,
              lower: str | None, upper: str | None, fraction: float, neq: dict[str, str] | None = None,
              nregex: dict[str, str] | None = None) -> Expr:
    """Rate of good events: the `le` bucket, or a linear interpolation between two buckets."""
    bucket = family + "_bucket"
    if upper is None:
        return sum_rate(bucket, {**eq, "le": lower or ""}, regex, window, neq=neq, nregex=nregex)
    hi = sum_rate(bucket, {**eq, "le": upper}, regex, window, neq=neq, nregex=nregex)
    if lower is None:  # target below the first edge: interpolate from 0
        return binop(fraction, "*", hi, parens="needed")
    lo = sum_rate(bucket, {**eq, "le": lower}, regex, window, neq=neq, nregex=nregex)
    between = binop(fraction, "*", binop(hi, "-", lo, parens="needed"), parens="needed")
    return binop(lo, "+", between, before="\n", parens="needed")


def histogram_rate(family: str, eq: dict[str, str], regex: dict[str, str], window: str,
                   neq: dict[str, str] | None = None, by: str = "deployment",
                   nregex: dict[str, str] | None = None) -> Expr:
    """A native histogram's (NHCB) per-second rate summed by `by`: one histogram holding every bucket, the
    count and the sum (the series of one family share the deployment's bucket layout, so the sum adds)."""
    return sum_rate(family, eq, regex, window, by, neq, nregex)


def _traffic(e: Expr) -> Expr:
    """`(e > 0)`: `e` where there was traffic (the series dropped where it is 0)."""
    return binop(e, ">", 0, parens="needed")


def nhcb_good_rate(family: str, eq: dict[str, str], regex: dict[str, str], window: str, target: float,
                   neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> Expr:
    """Good events per second from a native histogram with custom buckets: the share at or below `target`
    times the count. For a target on a bucket edge histogram_fraction sums the buckets up to that edge
    exactly (the edge's bucket is included whole, the next one not at all: what `_bucket{le}` counts); between
    edges it interpolates linearly inside the bucket, from 0 in the first one, as the classic rules do. The
    lower bound is -Inf, not 0: a family whose first edge is 0 (SGLang's queue time) holds its zeros in the
    bucket ending at 0, which histogram_fraction(0, ...) would leave out.
    The share is NaN without traffic: `> 0` drops it and `or` records 0 good events, as the classic rate does
    (a NaN would poison the period's sum_over_time)."""
    hist = histogram_rate(family, eq, regex, window, neq, nregex=nregex)
    count = call("histogram_count", hist)
    share = binop(histogram_fraction(-math.inf, target, hist), "*", _traffic(count), before="\n", parens="needed")
    return binop(share, "or", count, before="\n", parens="needed")


def histogram_fraction(lower: float, upper: float, hist: Expr) -> Expr:
    """`histogram_fraction(lower, upper, hist)`: the share of the observations of a native histogram between
    two bounds."""
    return call("histogram_fraction", lower, upper, hist)


def nhcb_count_rate(family: str, eq: dict[str, str], regex: dict[str, str], window: str,
                    neq: dict[str, str] | None = None, nregex: dict[str, str] | None = None) -> Expr:
    return call("histogram_count", histogram_rate(family, eq, regex, window, neq, nregex=nregex))


def error_ratio(good: Expr, total: Expr) -> Expr:
    """`1 - (good / (total > 0))`: `total > 0` drops the series when there is no traffic (rate() of unchanged
    counters is 0, 0/0 is NaN, and no-traffic must never page)."""
    return binop(1, "-", paren(binop(good, "/", _traffic(total), parens="needed")), parens="needed")


def mean_latency(family: str, eq: dict[str, str], regex: dict[str, str], window: str,
                 neq: dict[str, str] | None = None, nhcb: bool = False, nregex: dict[str, str] | None = None) -> Expr:
    if nhcb:
        hist = histogram_rate(family, eq, regex, window, neq, nregex=nregex)
        total, count = call("histogram_sum", hist), call("histogram_count", hist)
    else:
        total = sum_rate(family + "_sum", eq, regex, window, neq=neq, nregex=nregex)
        count = sum_rate(family + "_count", eq, regex, window, neq=neq, nregex=nregex)
    return binop(total, "/", _traffic(count), before="\n", parens="needed")


def per_rank_total(metric: str, eq: dict[str, str], regex: dict[str, str]) -> Expr:
    """A scheduler gauge summed over DP ranks but never over TP ranks (TP ranks repeat the value).

    `priority=""` keeps the total when priority scheduling adds a per-priority breakdown; it also
    matches series without the label.
    """
    ranks = aggregate("max", select_groups(metric, {**eq, "priority": ""}, regex), ("deployment", "role", "instance", "dp_rank"))
    return aggregate("sum", ranks, ("deployment", "role"))

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
