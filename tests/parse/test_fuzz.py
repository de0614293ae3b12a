"""Property tests of the parser (bounded: a few hundred examples, no deadline).

Any text either parses or raises ParseError, never anything else; valid expositions built from
random samples parse back to exactly those samples, in both name spellings.
"""

from __future__ import annotations

import contextlib
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.parse.exposition import ParseError, parse

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
label_names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda s: s not in ("pid", "le"))
label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
values = st.floats(allow_nan=False, width=64)


def escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@SETTINGS
@given(st.text(max_size=300))
def test_arbitrary_text_parses_or_raises_parse_error(text):
    with contextlib.suppress(ParseError):
        parse(text)


@SETTINGS
@given(st.lists(st.tuples(names, st.dictionaries(label_names, label_values, max_size=3), values),
                max_size=20, unique_by=lambda t: (t[0], tuple(sorted(t[1].items())))),
       st.booleans())
def test_valid_expositions_round_trip(samples, colon):
    prefix = "sglang:" if colon else "sglang_"
    lines = []
    for name, labels, value in samples:
        body = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
        lines.append(f"{prefix}{name}{{{body}}} {value!r}" if labels else f"{prefix}{name} {value!r}")
    got = parse("\n".join(lines) + "\n").selected
    want = [(f"sglang:{n}", tuple(sorted(lab.items())), v) for n, lab, v in samples]
    assert [(s.name, s.labels, s.value) for s in got] == want
    assert all(not math.isnan(s.value) for s in got)


def _outcome(fn):
    try:
        e = fn()
    except ParseError:
        return "error"
    return None if e is None else (e.format, e.samples, e.families,
                                   sorted((s.name, s.labels, repr(s.value)) for s in e.selected), e.types)


line_parts = st.sampled_from([
    'sglang:num_running_reqs{tp_rank="0"} 3', "sglang_num_queue_reqs 1.5", "# TYPE sglang:num_running_reqs gauge",
    '# HELP x y', 'other_metric{a="}"} 2 1700000000', 'sglang:num_running_reqs{tp_rank="1",} NaN',
    "garbage here", "", "  ", "# EOF", 'sglang:num_queue_reqs{a="x\\"y"} +Inf', "m{a=\"1\" 2",
    'sglang:num_running_reqs{tp_rank="0"} 4', "x 1 # {t=\"1\"} 2",
    '{"sglang:num_running_reqs",tp_rank="2"} 5', 'sglang:num_queue_reqs{"my.label"="v"} 2', '# TYPE "my.x" gauge',
    '{"my.x"} 1', '{"a","b"} 1',
])


@SETTINGS
@given(st.lists(line_parts, max_size=12), st.booleans())
def test_fast_path_agrees_with_the_line_parser(lines, trailing_newline):
    from monitor.parse import exposition as E

    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    wanted = frozenset({"sglang:num_running_reqs", "sglang:num_queue_reqs"})
    slow = _outcome(lambda: E._parse_lines(text, wanted, ""))
    fast = _outcome(lambda: E._parse_fast(text, wanted, "", True))
    if fast is not None:  # None means "fall back to the line parser"
        assert fast == slow
