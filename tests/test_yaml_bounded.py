"""The bounded YAML reader: aliases and nesting within bounds load as PyYAML's safe loader loads them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from monitor import yaml_bounded
from monitor.yaml_bounded import MAX_ALIAS_NODES, MAX_DEPTH, MAX_ITEMS, YamlLimitError, load_documents


@pytest.mark.parametrize("text", [
    "x: &x {a: 1, b: [2, 3]}\ny: {<<: *x, c: 3}\nz: [*x, *x]\n",
    "a: 1\n---\nb: [1, 2]\n",
    '{"json": [1, 2.5, null, true]}',
    "[" * MAX_DEPTH + "]" * MAX_DEPTH,
])
def test_what_is_within_bounds_loads_as_the_safe_loader_loads_it(text):
    assert load_documents(text) == list(yaml.safe_load_all(text))


def test_alias_expansion_is_counted_as_copies_and_refused_past_the_bound():
    block = "[" + ", ".join(["1"] * 99) + "]"  # 100 nodes

    def text(aliases: int) -> str:
        return f"a: &a {block}\nb: [{', '.join(['*a'] * aliases)}]\n"

    assert len(load_documents(text(MAX_ALIAS_NODES // 100))[0]["b"]) == MAX_ALIAS_NODES // 100
    with pytest.raises(YamlLimitError, match="aliases expand to more than 10,000 nodes") as err:
        load_documents(text(MAX_ALIAS_NODES // 100 + 1))
    assert err.value.line == 2


def test_nesting_past_the_bound_is_refused_with_its_line():
    with pytest.raises(YamlLimitError, match=f"nested more than {MAX_DEPTH} levels deep") as err:
        load_documents("a:\n  b: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert err.value.line == 2


@pytest.mark.parametrize("text", ["a: &a [1, *a]", "a: &a {b: {c: *a}}"])
def test_a_recursive_alias_is_refused(text):
    with pytest.raises(YamlLimitError, match=r"alias \*a is inside what it refers to"):
        load_documents(text)


def test_a_long_list_is_refused_at_its_first_item_past_the_bound_with_its_line():
    """100,000 targets were all read (and validated) before anything said no."""
    items = "".join(f"- {i}\n" for i in range(MAX_ITEMS + 5))
    with pytest.raises(YamlLimitError, match="a list of more than 10,000 items") as err:
        load_documents(items)
    assert err.value.line == MAX_ITEMS + 1
    assert len(load_documents(items[: items.index(f"- {MAX_ITEMS}\n")])[0]) == MAX_ITEMS


def test_a_wide_mapping_and_too_many_values_are_refused(monkeypatch):
    with pytest.raises(YamlLimitError, match="a mapping of more than 10,000 keys"):
        load_documents("".join(f"k{i}: 1\n" for i in range(MAX_ITEMS + 1)))
    monkeypatch.setattr(yaml_bounded, "MAX_NODES", 1_000)  # the real bound takes ~40 s of pure-Python YAML
    lists = "".join(f"l{i}: [{', '.join(['1'] * 99)}]\n" for i in range(10))  # 101 nodes a line, and the root
    assert len(load_documents(lists[: lists.index("l9:")])[0]) == 9
    with pytest.raises(YamlLimitError, match="more than 1,000 values in one file") as err:
        load_documents(lists)
    assert err.value.line == 10


@pytest.fixture(params=sorted({yaml_bounded._PyBoundedLoader, yaml_bounded._BoundedLoader}, key=lambda c: c.__name__))
def each_parser(request, monkeypatch):
    """PyYAML's pure-Python parser and, where PyYAML has it, libyaml's (the one used then) under the bounds."""
    monkeypatch.setattr(yaml_bounded, "_BoundedLoader", request.param)
    return request.param


def test_the_bounds_hold_over_either_parser(each_parser):
    with pytest.raises(YamlLimitError, match="a list of more than 10,000 items") as err:
        load_documents("".join(f"- {i}\n" for i in range(MAX_ITEMS + 5)))
    assert err.value.line == MAX_ITEMS + 1
    with pytest.raises(YamlLimitError, match=f"nested more than {MAX_DEPTH} levels deep"):
        load_documents("a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)
    with pytest.raises(YamlLimitError, match=r"alias \*a is inside what it refers to"):
        load_documents("a: &a [1, *a]")


@pytest.mark.parametrize("path", ["examples/kimi-k2.6-ascend.yaml", "examples/minimal.yaml",
                                  "tests/generate/fixtures/small.yaml"])
def test_either_parser_reads_the_shipped_configs_as_the_safe_loader_does(each_parser, path):
    text = (Path(__file__).resolve().parents[1] / path).read_text(encoding="utf-8")
    assert load_documents(text) == list(yaml.safe_load_all(text))
