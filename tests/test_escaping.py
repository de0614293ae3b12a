from __future__ import annotations

import pytest
import yaml

from monitor import escaping
from monitor.escaping import (
    comment,
    excerpt,
    matchers,
    promql_regex_literal,
    promql_string,
    shorten,
    template_literal,
    yaml_item_text,
    yaml_text,
)
from tests.generate.conftest import run_tool

NASTY = ['plain', 'with "quotes"', "back\\slash", "new\nline", "tab\there", "ünïcødé — 模型", "{{ $value }}",
         "line\u2028sep", "bell\a"]


def test_promql_string_escapes_quotes_backslashes_and_control_characters():
    assert promql_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert promql_string("x\u2028y") == '"x\\u2028y"'
    assert promql_string("模型") == '"模型"'


def test_regex_literal_matches_values_literally():
    assert promql_regex_literal(["a.b", "c|d"]) == '"a\\\\.b|c\\\\|d"'


def test_matchers_refuse_invalid_label_names():
    with pytest.raises(ValueError):
        matchers({"bad-name": "x"})


def test_template_literal_neutralises_go_template_actions():
    assert template_literal("model {{ x }}") == 'model {{ "{{" }} x }}'


def test_comment_cannot_break_out_of_a_yaml_comment():
    assert "\n" not in comment("a\nb\r\nc\u2028d")


@pytest.mark.parametrize("value", NASTY)
def test_yaml_round_trips_awkward_values(value):
    import yaml

    assert yaml.safe_load(yaml_text({"k": value}))["k"] == value


def test_every_escaped_value_parses_in_promql(tmp_path, prometheus_build):
    rules = [{"record": f"test:escaped:{i}", "expr": f"up{{deployment={promql_string(v)}}} or "
              f"up{{deployment=~{promql_regex_literal([v])}}}"} for i, v in enumerate(NASTY)]
    path = tmp_path / "escaped.yml"
    path.write_text(yaml_text({"groups": [{"name": "escaped", "rules": rules}]}), encoding="utf-8")
    res = run_tool(prometheus_build.tool, "check", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_label_name_is_checked_whole():
    with pytest.raises(ValueError, match="not a Prometheus label name"):
        matchers({"team\n": "x"})


def test_an_excerpt_of_a_value_never_walks_all_of_it_and_says_what_it_cut():
    wide: object = ["lol"] * 9
    for _ in range(9):
        wide = [wide] * 9  # 9**10 strings through shared lists, as a YAML alias graph
    assert len(excerpt(wide)) <= 120 and excerpt(wide).startswith("[[[")
    assert excerpt("x" * 10_000).endswith("' (10,000 characters)") and len(excerpt("x" * 10_000)) < 100
    assert excerpt("pd") == "'pd'"
    assert shorten("y" * 1000) == "y" * 400 + "... (600 more characters)" and shorten("short") == "short"


class _PyYamlDumper(yaml.SafeDumper):
    """What yaml_text wrote before libyaml and its own representer: PyYAML's, end to end."""

    def ignore_aliases(self, data: object) -> bool:
        return True


_PyYamlDumper.add_representer(str, lambda dumper, data: dumper.represent_scalar(
    "tag:yaml.org,2002:str", data, style="|" if escaping._literal(data) else None))
# Values where libyaml's emitter writes other text than PyYAML's: characters it escapes, end markers,
# keys it writes as `? key`, lines past the width.
LIBYAML_DIFFERS = NASTY + ["emoji 😀", "nel\x85", "bom\ufeff", "keep\n\n", "\n", "w " * 6_000, "中" * 50]


@pytest.mark.parametrize("value", LIBYAML_DIFFERS)
@pytest.mark.parametrize("sort_keys", [False, True])
def test_yaml_text_is_pyyaml_s_text_whichever_emitter_writes_it(value, sort_keys):
    for data in ({"k": value, "l": [value, {"m": value, "n": 1.5}], "o": None}, {value: [True, 0]}, [value],
                 {"": 1, "k" * 128: 2, "ü" * 50: 3}):
        assert yaml_text(data, sort_keys) == yaml.dump(data, Dumper=_PyYamlDumper, sort_keys=sort_keys,
                                                       allow_unicode=True, width=10_000, default_flow_style=False)


def test_yaml_item_texts_join_into_the_list_s_text_and_never_end_a_document_early():
    items = [{"name": "a", "expr": "x\ny"}, {"name": "b", "note": "keep\n\n"}, {"name": "c"}]
    texts = [yaml_item_text(item) for item in items]
    assert "groups:\n" + "".join(texts) == yaml_text({"groups": items})
    assert not texts[1].endswith("...\n")  # PyYAML's end marker after a `|+` literal, mid-file
    assert yaml.safe_load("groups:\n" + "".join(reversed(texts))) == {"groups": items[::-1]}
