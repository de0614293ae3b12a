"""The block skipper against the full scan: the same result on every fixture and on fuzzed input.

`parse_grouped` returns None whenever it is not sure (the caller then runs the full scan), so the
property is: whenever it answers, its answer is the full scan's, except for a malformed line inside a
family it does not read, which it does not look at (documented in monitor/parse/blocks.py).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.conventions.names import canonical_name
from monitor.parse.blocks import _reads, parse_grouped
from monitor.parse.exposition import NO_LIMITS, LimitExceeded, Limits, ParseError, full_scan, parse
from monitor.parse.families import engine_wanted
from monitor.parse.gateway import ROUTER_WANTED
from tests.conftest import GATEWAY_FIXTURES, REAL_FIXTURES

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OM = "application/openmetrics-text; version=1.0.0"
WANTED = engine_wanted() | ROUTER_WANTED
FIXTURES = sorted(REAL_FIXTURES.glob("*.txt")) + sorted(GATEWAY_FIXTURES.glob("*.txt"))
# Every other fixture was written by prometheus_client (SGLang), the gateways or dcgm-exporter, all
# grouped: each must take the skipping path.
NOT_EXPOSITIONS = {"npu_exporter_sample.txt",  # the vendor doc's `...` elisions
                   "sglang_router_0.3.2_engine_metrics_label_mismatch_error.txt",
                   "sglang_router_0.3.2_pd_engine_metrics_http_500.txt"}


def outcome(fn):
    try:
        e = fn()
    except (ParseError, LimitExceeded) as err:
        return type(err).__name__
    return None if e is None else (e.format, e.samples, e.types, sorted((s.name, s.labels, repr(s.value)) for s in e.selected))


def both(data: bytes, wanted, content_type: str = "", limits: Limits = NO_LIMITS):
    grouped = outcome(lambda: parse_grouped(data, frozenset(wanted), content_type, limits))
    full = outcome(lambda: full_scan(data, wanted, content_type=content_type, count_families=False, limits=limits))
    return grouped, full


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("wanted", [engine_wanted(), ROUTER_WANTED, WANTED, frozenset({"sglang:num_running_reqs"})],
                         ids=["engine", "router", "both", "one-gauge"])
def test_every_fixture_gives_the_full_scans_result(path, wanted):
    content_types = ["", OM] if "openmetrics" in path.name else [""]
    for ct in content_types:
        grouped, full = both(path.read_bytes(), wanted, ct)
        if path.name in NOT_EXPOSITIONS:
            assert grouped is None and full == "ParseError"
        else:
            assert grouped is not None and grouped == full
            assert full != "ParseError"


def test_parse_takes_the_skipping_path_for_grouped_text_and_the_full_scan_otherwise(real_text):
    lines = real_text.split("\n")
    moved = next(i for i, ln in enumerate(lines) if ln.startswith("sglang:num_running_reqs{"))
    # A wanted sample moved into the last family's block: read by neither block, so not grouped.
    shuffled = "\n".join([*lines[:moved], *lines[moved + 1 : -1], lines[moved]]) + "\n"
    assert parse_grouped(real_text.encode(), engine_wanted(), "", NO_LIMITS) is not None
    assert parse_grouped(shuffled.encode(), engine_wanted(), "", NO_LIMITS) is None
    a = parse(shuffled, engine_wanted(), count_families=False)
    b = parse(real_text, engine_wanted(), count_families=False)
    assert sorted(a.selected) == sorted(b.selected) and a.samples == b.samples


def test_a_malformed_line_in_an_unread_family_is_not_looked_at_but_one_in_a_read_family_is(real_text):
    def break_value(family: str) -> str:
        start = real_text.index(f"\n{family}{{") + 1
        eol = real_text.index("\n", start)
        return real_text[:start] + real_text[start:eol].rsplit(" ", 1)[0] + " zero" + real_text[eol:]

    unread, read = break_value("sglang:num_paused_reqs"), break_value("sglang:num_running_reqs")
    assert parse(unread, engine_wanted(), count_families=False).samples == 545
    with pytest.raises(ParseError, match="line"):
        parse(unread, None)  # the full scan validates every line
    with pytest.raises(ParseError, match="line"):
        parse(read, engine_wanted(), count_families=False)


def test_limits_fail_the_same_way_on_both_paths(real_text):
    data = real_text.encode()
    # Exactly at the exposition's own counts passes, one under fails (counts read, not hard-coded, so a
    # new SLI family does not move them).
    e = full_scan(data, engine_wanted(), count_families=False)
    samples, series = e.samples, len(e.selected)
    for limits in (Limits(samples=samples - 1), Limits(series=series - 1)):
        assert both(data, engine_wanted(), limits=limits) == ("LimitExceeded", "LimitExceeded")
    for limits in (Limits(samples=samples), Limits(series=series)):
        grouped, full = both(data, engine_wanted(), limits=limits)
        assert grouped == full and grouped not in ("LimitExceeded", None)


# --- fuzzed expositions ------------------------------------------------------------------------
# Names from a small pool so that families prefix each other (`a` and `a_total`, `sglang:x` and
# `sglang_x`) as real ones do.
NAMES = ["sglang:num_running_reqs", "sglang:num_running_reqs_offline", "sglang:num_requests", "sglang:num_requests_total",
         "sglang:time_to_first_token_seconds", "sglang:gen_throughput", "other", "other_total", "x_bucket", "sglang_a"]
label_values = st.text(st.sampled_from('ab}{"\\\n ,=é'), max_size=6)
labels = st.dictionaries(st.sampled_from(["a", "b", "pid", "tp_rank"]), label_values, max_size=3)
values = st.sampled_from(["0", "1.5", "-2e3", "NaN", "+Inf", "-Inf", "7"])


def escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_text(lab: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in lab.items()) + "}" if lab else ""


@st.composite
def families(draw):
    """One family block's lines (without headers), its name and type."""
    name = draw(st.sampled_from(NAMES))
    kind = draw(st.sampled_from(["gauge", "counter", "histogram", "untyped"]))
    series = draw(st.lists(labels, max_size=4, unique_by=lambda d: tuple(sorted(d.items()))))
    out = []
    for lab in series:
        lab = {k: v for k, v in lab.items() if k != "le"}
        if kind == "histogram":
            for le in ("0.1", "1.0", "+Inf"):
                out.append(f"{name}_bucket{label_text({**lab, 'le': le})} {draw(values)}")
            out += [f"{name}_sum{label_text(lab)} {draw(values)}", f"{name}_count{label_text(lab)} {draw(values)}"]
        else:
            suffix = draw(st.sampled_from(["", "_total"])) if kind == "counter" else ""
            ts = draw(st.sampled_from(["", " 1700000000000"]))
            out.append(f"{name}{suffix}{label_text(lab)} {draw(values)}{ts}")
    return name, kind, out


@st.composite
def expositions(draw):
    fams = draw(st.lists(families(), max_size=6, unique_by=lambda f: canonical_name(f[0])))
    om = draw(st.booleans())
    helps = draw(st.booleans())
    blank = draw(st.booleans())  # the gateways' blank line after each family
    text = []
    for name, kind, lines in fams:
        if helps:
            text.append(f"# HELP {name} Some help text.")
        text.append(f"# TYPE {name} {kind}")
        if om:  # prometheus_client escapes sample names, not the headers
            lines = [ln.replace("sglang:", "sglang_", 1) for ln in lines]
        text += lines
        if blank:
            text.append("")
    if om:
        text.append("# EOF")
    body = "\n".join(text) + "\n" if text else ""
    all_names = {canonical_name(ln.split("{")[0].split(" ")[0]) for _, _, lines in fams for ln in lines}
    wanted = draw(st.sets(st.sampled_from(sorted(all_names | {"sglang:num_running_reqs", "other"}))))
    return body, frozenset(wanted), OM if om else ""


@SETTINGS
@given(expositions())
def test_fuzzed_grouped_expositions_give_the_full_scans_result_through_the_skipping_path(case):
    body, wanted, ct = case
    grouped, full = both(body.encode(), wanted, ct)
    if body.startswith(("# HELP", "# TYPE")) and full != "ParseError":  # (pid="" duplicates a bare series)
        assert grouped is not None, body
    if grouped is not None:
        assert grouped == full


MUTANT_LINES = ['sglang:num_running_reqs{a="9"} 3', "garbage here", "", "# a comment", "# HELP other x",
                "# TYPE sglang:num_requests counter", 'other{a="1" 2', "other 1 notatimestamp", "# EOF",
                'sglang_num_running_reqs{a="x\\"y"} +Inf', "x_bucket NaN"]


@SETTINGS
@given(expositions(), st.data())
def test_fuzzed_broken_expositions_either_fall_back_or_agree_except_in_unread_families(case, data):
    body, wanted, ct = case
    lines = body.split("\n")
    how = data.draw(st.sampled_from(["insert", "delete", "duplicate", "swap", "truncate"]))
    i = data.draw(st.integers(0, max(len(lines) - 1, 0)))
    j = data.draw(st.integers(0, max(len(lines) - 1, 0)))
    if how == "insert":
        lines.insert(i, data.draw(st.sampled_from(MUTANT_LINES)))
    elif how == "delete" and lines:
        del lines[i]
    elif how == "duplicate" and lines:
        lines.insert(i, lines[j])
    elif how == "swap" and lines:
        lines[i], lines[j] = lines[j], lines[i]
    text = "\n".join(lines)
    if how == "truncate":
        text = text[: data.draw(st.integers(0, len(text)))]
    grouped, full = both(text.encode(), wanted, ct)
    if grouped is None or grouped == full:
        return
    # The one allowed difference: the full scan refused a line of a family nobody reads.
    assert full == "ParseError"
    with pytest.raises(ParseError) as err:
        full_scan(text, wanted, content_type=ct, count_families=False)
    bad = err.value.line
    above = text.split("\n")[: bad - 1]
    header = next(ln for ln in reversed(above) if ln.startswith(("# HELP ", "# TYPE ")))
    assert not _reads(canonical_name(header.split()[2]), wanted), (text, bad)


QUOTED_BLOCK = ('# HELP "my.requests" requests\n# TYPE "my.requests" counter\n'
                '{"my.requests_total","my.label"="x"} 1.0\n{"my.requests_created","my.label"="x"} 1.7e9\n')


def test_a_family_written_with_quoted_names_is_skipped_like_any_other(real_text):
    """prometheus_client's allow-utf-8 escaping writes a non-legacy family as `# TYPE "my.x" ...` and
    `{"my.x_total",...}` lines: the block is skipped unread, with the full scan's result."""
    text = real_text.replace("# HELP sglang:num_running_reqs", QUOTED_BLOCK + "# HELP sglang:num_running_reqs", 1)
    for data in (text, text + "# EOF\n"):
        grouped, full = both(data.encode(), engine_wanted())
        assert grouped is not None and grouped == full
        assert full[1] == 547 and full[2]["my.requests"] == "counter"


def test_a_read_family_written_with_quoted_names_goes_to_the_full_scan(real_text):
    start = real_text.index("# HELP sglang:num_running_reqs")
    end = real_text.index("# HELP", start + 1)
    block = real_text[start:end]
    quoted = (block.replace("# HELP sglang:num_running_reqs", '# HELP "sglang:num_running_reqs"')
              .replace("# TYPE sglang:num_running_reqs", '# TYPE "sglang:num_running_reqs"')
              .replace("\nsglang:num_running_reqs{", '\n{"sglang:num_running_reqs",'))
    assert quoted.count('{"sglang:num_running_reqs",') >= 1
    text = real_text[:start] + quoted + real_text[end:]
    assert parse_grouped(text.encode(), engine_wanted(), "", NO_LIMITS) is None
    a = parse(text, engine_wanted(), count_families=False)
    b = parse(real_text, engine_wanted(), count_families=False)
    assert sorted(a.selected) == sorted(b.selected) and a.samples == b.samples and a.types == b.types
