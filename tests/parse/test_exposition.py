"""The selective parser against real SGLang/router output and every quirk the issue lists."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.parse.exposition import ParseError, parse, parse_labels
from monitor.parse.families import engine_wanted
from tests.conftest import DOCS_SAMPLE, ROUTER_ENGINE, ROUTER_METRICS, ROUTER_PD


def test_real_text_counts_families_and_samples(real_text):
    expo = parse(real_text, engine_wanted())
    assert expo.format == "prometheus-text"
    assert (expo.families, expo.samples) == (87, 545)  # as reference/real_components.md §4.3 reports


def test_openmetrics_form_gives_the_same_samples_under_colon_names(real_text, real_openmetrics):
    a = parse(real_text, engine_wanted())
    b = parse(real_openmetrics, engine_wanted())
    assert b.format == "openmetrics"
    assert sorted(a.selected) == sorted(b.selected)
    assert all(s.name.startswith("sglang:") for s in b.selected)


def test_parse_all_matches_prometheus_client_sample_for_sample(real_text):
    ours = sorted((s.name, s.labels, s.value) for s in parse(real_text).selected)
    theirs = sorted(
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "pid")), s.value)
        for fam in text_string_to_metric_families(real_text)
        for s in fam.samples
    )
    assert ours == theirs


@pytest.mark.parametrize("path", [DOCS_SAMPLE, ROUTER_ENGINE, ROUTER_METRICS, ROUTER_PD], ids=lambda p: p.name)
def test_other_real_fixtures_parse_like_prometheus_client(path):
    text = path.read_text()
    ours = parse(text)
    theirs = sum(len(f.samples) for f in text_string_to_metric_families(text))
    assert ours.samples == theirs


def test_pid_label_is_dropped(real_text):
    expo = parse(real_text, {"sglang:num_retracted_reqs"})
    assert expo.selected and all("pid" not in dict(s.labels) for s in expo.selected)


def test_underscore_spelling_is_canonicalised():
    expo = parse('sglang_num_running_reqs{tp_rank="0"} 3\n', {"sglang:num_running_reqs"})
    assert expo.selected[0].name == "sglang:num_running_reqs"


def test_missing_help_and_type_lines_are_fine():
    expo = parse('x_total 1\ny{a="b"} 2 1700000000000\n')
    assert [s.value for s in expo.selected] == [1.0, 2.0]


def test_nan_and_inf_values():
    expo = parse("a NaN\nb +Inf\nc -Inf\nd 1e3\n")
    vals = [s.value for s in expo.selected]
    assert math.isnan(vals[0]) and vals[1:] == [math.inf, -math.inf, 1000.0]


def test_escaped_label_values_are_unescaped():
    text = 'm{a="q\\"uote",b="back\\\\slash",c="new\\nline",d="brace}",e="ünï"} 1\n'
    (s,) = parse(text).selected
    assert dict(s.labels) == {"a": 'q"uote', "b": "back\\slash", "c": "new\nline", "d": "brace}", "e": "ünï"}


def test_openmetrics_exemplar_and_timestamp():
    text = 'a_bucket{le="1"} 3 # {trace_id="x"} 0.5 123\na_count 3 1.7e9\n# EOF\n'
    expo = parse(text)
    assert expo.format == "openmetrics" and [s.value for s in expo.selected] == [3.0, 3.0]


def test_gauges_with_le_and_gt_labels_stay_gauges(real_text):
    expo = parse(real_text, {"sglang:routing_key_all_req_count"})
    assert len(expo.selected) == 11
    assert {"gt", "le"} <= set(dict(expo.selected[0].labels))


@pytest.mark.parametrize("bad,why", [
    ("hello world\n", "not a number"),
    ('m{a="1" 2\n', "unterminated"),
    ("m\n", "no value"),
    ('m{a="1",a="2"} 1\n', "duplicate label"),
    ("m 1 notatimestamp\n", "unexpected text"),
    ("a 1\n# EOF\nb 2\n", "after '# EOF'"),
    ("9bad 1\n", "invalid metric name"),
])
def test_malformed_input_names_the_line(bad, why):
    with pytest.raises(ParseError) as err:
        parse(bad)
    assert why in str(err.value) and "line " in str(err.value)


def test_labels_helper_sorts_and_drops_pid():
    assert parse_labels('z="1",pid="9",a="2"') == (("a", "2"), ("z", "1"))


def test_duplicate_series_is_rejected():
    with pytest.raises(ParseError, match="duplicate series"):
        parse('sglang:num_running_reqs{a="1"} 1\nsglang:num_running_reqs{a="1"} 2\n', {"sglang:num_running_reqs"})


def test_truncated_openmetrics_without_eof_is_rejected(real_openmetrics):
    cut = real_openmetrics[: len(real_openmetrics) // 2].rsplit("\n", 1)[0] + "\n"
    with pytest.raises(ParseError, match="without '# EOF'"):
        parse(cut, content_type="application/openmetrics-text; version=1.0.0")


def test_exposition_cut_mid_line_is_rejected(real_text):
    cut = real_text[: real_text.index('le="0.4"') + 4]
    with pytest.raises(ParseError):
        parse(cut, engine_wanted())


# --- Prometheus 3 / OpenMetrics quoted names (prometheus_client >= 0.22 writes them with escaping=allow-utf-8) ---
OM = "application/openmetrics-text; version=1.0.0"
QUOTED = [
    '{"sglang:num_running_reqs",tp_rank="0"} 3\n',
    '{"sglang:num_running_reqs"} 3\n',
    '{"sglang:num_running_reqs","my.label"="v"} 3\n',
    'sglang:num_running_reqs{"my.label"="v",tp_rank="1"} 3\n',
    '{tp_rank="0","sglang:num_running_reqs"} 3\n',
    '{ "sglang:num_running_reqs" , tp_rank="0" } 3\n',
    '{"sglang:num_running_reqs","my \\"odd\\" label"="a\\nb"} 3 1700000000\n',
    '# HELP "my.requests" reqs\n# TYPE "my.requests" counter\n{"my.requests_total",b="y","my.label"="x"} 1.0\n'
    'sglang:num_running_reqs{tp_rank="0"} 3\n',
    '# TYPE "my.lat" histogram\n{"my.lat_bucket",le="1.0"} 1\n{"my.lat_bucket",le="+Inf"} 1\n{"my.lat_count"} 1\n'
    '{"my.lat_sum"} 0.5\n',
]


def samples_of(expo) -> list:
    return sorted((s.name, s.labels, s.value) for s in expo.selected)


def prometheus_clients(text: str, openmetrics: bool) -> list:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families

    families = om_families(text) if openmetrics else text_string_to_metric_families(text)
    return sorted((s.name, tuple(sorted(s.labels.items())), s.value) for f in families for s in f.samples)


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
@pytest.mark.parametrize("text", QUOTED)
def test_quoted_names_parse_as_prometheus_client_parses_them(text, openmetrics):
    """`{"sglang:foo",label="x"} 1` failed the whole target with `invalid metric name ''`."""
    text += "# EOF\n" if openmetrics else ""
    ct = OM if openmetrics else ""
    assert samples_of(parse(text, content_type=ct)) == prometheus_clients(text, openmetrics)
    wanted = parse(text, {"sglang:num_running_reqs"}, content_type=ct, count_families=False)
    assert samples_of(wanted) == [s for s in prometheus_clients(text, openmetrics) if s[0] == "sglang:num_running_reqs"]


def test_quoted_names_count_as_families_and_carry_their_type():
    expo = parse(QUOTED[7] + QUOTED[8])
    assert expo.types == {"my.requests": "counter", "my.lat": "histogram"}
    assert (expo.families, expo.samples) == (3, 6)
    assert parse('# TYPE "a b" gauge\n{"a b"} 1\n').types == {"a b": "gauge"}


def test_a_real_prometheus_client_exposition_with_quoted_names_is_read(real_text):
    from prometheus_client import CollectorRegistry, Counter, Gauge
    from prometheus_client.openmetrics.exposition import generate_latest

    registry = CollectorRegistry()
    Counter("my.requests", "requests", ["my.label"], registry=registry).labels("x").inc()
    Gauge("sglang:num_running_reqs", "running", ["tp_rank", "my.label"], registry=registry).labels("0", "y").set(7)
    text = generate_latest(registry, escaping="allow-utf-8").decode()
    assert '{"my.requests_total","my.label"="x"}' in text  # what the parser must read
    expo = parse(text, {"sglang:num_running_reqs"}, content_type=OM, count_families=False)
    assert samples_of(expo) == [("sglang:num_running_reqs", (("my.label", "y"), ("tp_rank", "0")), 7.0)]
    assert expo.samples == len(prometheus_clients(text, True))


@pytest.mark.parametrize("bad, why", [
    ('{"a","b"} 1\n', "metric name given twice"),
    ('foo{"bar"} 1\n', "metric name given twice"),
    ('{"",a="b"} 1\n', "empty metric name"),
    ('{"a",""="b"} 1\n', "empty label name"),
    ('{a="b"} 1\n', "expected a metric name"),
    ('{"a" b="c"} 1\n', "expected ',' after the quoted metric name"),
    ('{"a} 1\n', "unterminated"),
    ('# TYPE "a\n', "unterminated quoted name"),
    ('# TYPE "a"\n', "TYPE line needs a name and a type"),
])
def test_malformed_quoted_names_name_the_line(bad, why):
    with pytest.raises(ParseError) as err:
        parse(bad)
    assert why in str(err.value) and "line 1" in str(err.value)
