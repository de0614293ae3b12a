"""The one PromQL builder: selectors, SLO templates and reading names back."""

from __future__ import annotations

import pytest

from monitor.analyze.prometheus import _Plan
from monitor.conventions.slis import SLI_BY_KEY
from monitor.feeds import feed
from monitor.promql import (
    aggregate,
    binop,
    bucket_rates,
    call,
    chain,
    either,
    error_ratio,
    format_number,
    good_rate,
    histogram_mean,
    histogram_quantile,
    label_matcher,
    mean_latency,
    metric_names,
    names_of,
    number,
    offset,
    paren,
    per_rank_total,
    range_call,
    rate_sum,
    select,
    select_groups,
    selector,
    sum_rate,
)


def test_selector_orders_equal_then_regex_then_not_equal_matchers():
    assert selector("m", {"a": "1"}, {"b": "x|y"}, {"c": "z"}) == 'm{a="1",b=~"x|y",c!="z"}'
    grouped = select_groups("m", {"a": "1"}, {"b": "x|y"}, {"c": "z"}, {"d": "w"})
    assert grouped == 'm{a="1",b=~"x|y",c!="z",d!~"w"}' and grouped.names == {"m"} and type(selector("m", {})) is str
    assert selector("m", {}) == "m"
    assert selector("", {"deployment": "d"}, {"__name__": "sglang[:_]x"}) == '{deployment="d",__name__=~"sglang[:_]x"}'


@pytest.mark.parametrize("value,literal", [('a"b', r'"a\"b"'), ("a\\b", r'"a\\b"'), ("a\nb", r'"a\nb"'),
                                           ("a\x01b", r'"a\u0001b"')])
def test_every_label_value_is_escaped(value, literal):
    assert selector("m", {"l": value}) == f"m{{l={literal}}}"


def test_invalid_label_names_are_refused():
    with pytest.raises(ValueError, match="label name"):
        selector("m", {"bad-name": "x"})


def test_good_rate_is_one_bucket_or_an_interpolation_between_two():
    exact = good_rate("f", {"d": "x"}, {}, "5m", "0.1", None, 0.0)
    assert exact == 'sum by (deployment) (rate(f_bucket{d="x",le="0.1"}[5m]))'
    interp = good_rate("f", {}, {}, "5m", "0.04", "0.06", 0.5)
    assert 'le="0.04"' in interp and 'le="0.06"' in interp and "0.5 * (" in interp
    below_first = good_rate("f", {}, {}, "5m", None, "0.1", 0.25)
    assert below_first.startswith("0.25 * ") and "le=" in below_first


def test_error_ratio_drops_the_series_without_traffic_and_mean_divides_sum_by_count():
    assert error_ratio(select("g"), select("t")) == "1 - (g / (t > 0))"
    mean = mean_latency("f", {"d": "x"}, {"role": "decode"}, "5m", {"engine_type": "prefill"})
    assert 'rate(f_sum{d="x",role=~"decode",engine_type!="prefill"}[5m])' in mean and "f_count" in mean
    assert sum_rate("m", {}, {}, "1h", by="le") == "sum by (le) (rate(m[1h]))"


def test_per_rank_total_sums_dp_ranks_never_tp_ranks():
    expr = per_rank_total("sglang:num_running_reqs", {"deployment": "d"}, {})
    assert expr.startswith("sum by (deployment, role) (max by (deployment, role, instance, dp_rank) (")
    assert 'priority=""' in expr


def test_metric_names_reads_selected_names_not_functions_labels_or_literals():
    expr = 'sum by (le) (rate(a_bucket{x="y z"}[5m])) / on (d) b:rec + histogram_quantile(0.9, c) > 14.4'
    assert metric_names(expr) == {"a_bucket", "b:rec", "c"}
    assert metric_names('{__name__="n", d="x"}') == {"n"}


def test_format_number_is_short_and_exact():
    assert (format_number(1.0), format_number(0.04), format_number(14.4)) == ("1", "0.04", "14.4")


def test_the_analyzer_escapes_the_deployment_it_is_given():
    """`--deployment` comes from the command line: quotes, backslashes and newlines stay inside the literal."""
    plan = _Plan('a"b\\c\nd', "5m")
    for query in plan.queries.values():
        assert 'deployment="a\\"b\\\\c\\nd"' in query, query


def test_select_keeps_the_matchers_in_order_and_escapes_and_checks_them():
    D = (("deployment", "=", "$deployment"),)
    assert select("m", (*D, ("role", "=~", "a|b"), ("priority", "=", ""))) == \
        'm{deployment="$deployment",role=~"a|b",priority=""}'
    assert select("m") == "m" and select("m").names == {"m"}
    assert select("", [("__name__", "=", "n"), ("d", "=", 'x"y')]) == '{__name__="n",d="x\\"y"}'
    assert select("", [("__name__", "=", "n")]).names == {"n"}
    with pytest.raises(ValueError, match="operator"):
        label_matcher("a", "==", "x")
    with pytest.raises(ValueError, match="label name"):
        select("m", [("bad-name", "=", "x")])


def test_expressions_know_the_metrics_they_select_and_plain_strings_are_refused():
    q = binop(rate_sum(select("a_total", [("d", "=", "x")]), "5m"), "/", aggregate("max", select("b"), ("role",)))
    assert q == 'sum(rate(a_total{d="x"}[5m])) / max by (role) (b)'
    assert names_of(q) == {"a_total", "b"} == metric_names(q)
    with pytest.raises(TypeError, match="not built by monitor.promql"):
        names_of('a{d="x"}')
    with pytest.raises(TypeError):
        binop("a", "/", 2)
    with pytest.raises(ValueError, match="binary operator"):
        binop(select("a"), "//", 2)


def test_binary_operands_are_parenthesized_so_precedence_never_decides():
    one_minus = binop(1, "-", select("e"))
    assert binop(one_minus, ">=", select("o"), bool_=True, on=("deployment", "sli")) == \
        "(1 - e) >= bool on (deployment, sli) o"
    assert either(aggregate("avg", select("a")), binop(aggregate("avg", select("b")), "/", 100)) == \
        "avg(a) or (avg(b) / 100)"
    assert binop(select("u"), "/", binop(select("u"), "+", select("f"))) == "u / (u + f)"


def test_histogram_helpers_read_classic_buckets_or_the_native_histogram():
    m = [("d", "=", "x")]
    assert histogram_quantile(0.99, "h", m, "5m", ("deployment",)) == \
        'histogram_quantile(0.99, sum by (deployment, le) (rate(h_bucket{d="x"}[5m])))'
    assert histogram_quantile(0.5, "h", m, "5m", nhcb=True) == 'histogram_quantile(0.5, sum(rate(h{d="x"}[5m])))'
    assert histogram_mean("h", m, "5m") == 'sum(rate(h_sum{d="x"}[5m])) / sum(rate(h_count{d="x"}[5m]))'
    assert histogram_mean("h", m, "5m", nhcb=True) == 'histogram_avg(sum(rate(h{d="x"}[5m])))'
    assert bucket_rates("h", m, "5m") == 'sum by (le) (rate(h_bucket{d="x"}[5m]))'
    assert histogram_mean("h", m, "5m").names == {"h_sum", "h_count"}


def test_the_analyzer_reads_each_number_from_the_series_its_feed_names():
    """The config-free feeds the dashboards use too: the roles, and the engine types that do not count left out."""
    plan = _Plan("d", "5m")
    for key, query in (("ttft", "hist.ttft.bucket"), ("queue_time", "hist.queue_time.sum")):
        fed = select("", feed(None, SLI_BY_KEY[key].roles).matchers)[1:-1]
        assert plan.queries[query].endswith(f",{fed}}})"), plan.queries[query]
    assert 'role=~"decode|server",engine_type!="prefill"}' in plan.queries["hist.ttft.bucket"]
    assert 'role=~"prefill|server",engine_type!="decode"}' in plan.queries["hist.queue_time.bucket"]
    assert 'role=~"decode|prefill|server"}[5m]' in plan.queries["rate.transfer_failed_total"]


def test_modifiers_are_arguments_checked_against_the_operator_never_text():
    a, b = select("a"), select("b")
    assert binop(a, ">", binop(3, "*", b), ignoring=("loop",), group_left=(), before="\n", after="\n") == \
        "a\n> ignoring (loop) group_left ()\n(3 * b)"
    assert binop(a, "unless", b, on=("deployment",)) == "a unless on (deployment) b"
    assert binop(a, "/", b, on=("x",), group_right=("y",)) == "a / on (x) group_right (y) b"
    with pytest.raises(ValueError, match="binary operator"):
        binop(a, ">= bool", b)  # a modifier spelled into the operator
    with pytest.raises(ValueError, match="bool"):
        binop(a, "+", b, bool_=True)
    with pytest.raises(ValueError, match="not both"):
        binop(a, "/", b, on=("x",), ignoring=("y",))
    with pytest.raises(ValueError, match="group_left"):
        binop(a, "/", b, group_left=("x",))
    with pytest.raises(ValueError, match="group_left"):
        binop(a, "and", b, on=("x",), group_left=())
    with pytest.raises(ValueError, match="whitespace"):
        binop(a, "/", b, before=" ) ")


def test_needed_parens_follow_promql_precedence_and_paren_groups_anyway():
    a, b, c = select("a"), select("b"), select("c")
    assert binop(1, "-", binop(a, "/", b), parens="needed") == "1 - a / b"
    assert binop(binop(a, "-", b, parens="needed"), "-", c, parens="needed") == "a - b - c"
    assert binop(a, "-", binop(b, "-", c), parens="needed") == "a - (b - c)"
    assert binop(a, "*", binop(b, "+", c), parens="needed") == "a * (b + c)"
    assert binop(binop(a, "^", b), "^", c, parens="needed") == "(a ^ b) ^ c"
    assert binop(a, "^", binop(b, "^", c), parens="needed") == "a ^ b ^ c"
    assert binop(binop(a, ">", 0), "and", binop(b, ">", 0), parens="needed") == "a > 0 and b > 0"
    assert binop(a, "or", binop(b, "and", c), parens="needed") == "a or b and c"
    assert binop(1, "-", paren(binop(a, "/", b)), parens="needed") == "1 - (a / b)"
    assert chain("+", [a, b, c]) == "a + b + c" and chain("+", [a]) == "a"
    assert chain("-", [a, binop(b, "or", c)], before="\n") == "a\n- (b or c)"


def test_functions_ranges_offsets_and_literals_are_checked():
    sel = select("m", [("d", "=", "x")])
    assert call("vector", 0.99) == "vector(0.99)" and call("absent", sel) == 'absent(m{d="x"})'
    assert call("histogram_fraction", float("-inf"), 0.1, sel) == 'histogram_fraction(-Inf, 0.1, m{d="x"})'
    assert call("clamp_min", sel, 0, sep=",\n", open="\n") == 'clamp_min(\nm{d="x"},\n0)'
    assert call("round", sel, number("0.000001")) == 'round(m{d="x"}, 0.000001)'
    assert range_call("sum_over_time", sel, "30d") == 'sum_over_time(m{d="x"}[30d])'
    assert range_call("rate", sel, "5m", shift="1h") == 'rate(m{d="x"}[5m] offset 1h)'
    assert range_call("predict_linear", sel, "1h", 3600) == 'predict_linear(m{d="x"}[1h], 3600)'
    assert range_call("rate", sel, "$__rate_interval") == 'rate(m{d="x"}[$__rate_interval])'
    assert range_call("rate", sel, "{{.window}}") == 'rate(m{d="x"}[{{.window}}])'
    assert offset(sel, "1d") == 'm{d="x"} offset 1d' and names_of(offset(sel, "1d")) == {"m"}
    assert aggregate("sum", sel, without=("instance",)) == 'sum without (instance) (m{d="x"})'
    assert number(float("nan")) == "NaN" and number(float("inf")) == "+Inf" and number(2.0) == "2"
    with pytest.raises(ValueError, match="function"):
        call("histogram_quantil", 0.9, sel)
    with pytest.raises(ValueError, match="function"):
        range_call("rates", sel, "5m")
    with pytest.raises(ValueError, match="aggregation"):
        aggregate("summ", sel)
    with pytest.raises(ValueError, match="duration"):
        range_call("rate", sel, "5m])")
    with pytest.raises(ValueError, match="number"):
        number("1; drop")
    with pytest.raises(TypeError):
        call("abs", "m")  # text not built here
