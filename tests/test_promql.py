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
    per_rank_total,
    rate_sum,
    select,
    selector,
    sum_rate,
)


def test_selector_orders_equal_then_regex_then_not_equal_matchers():
    assert selector("m", {"a": "1"}, {"b": "x|y"}, {"c": "z"}) == 'm{a="1",b=~"x|y",c!="z"}'
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
    assert error_ratio("g", "t") == "1 - (g / (t > 0))"
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
    assert binop(one_minus, ">= bool on (deployment, sli)", select("o")) == "(1 - e) >= bool on (deployment, sli) o"
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
