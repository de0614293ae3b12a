"""The bounded YAML reader: aliases and nesting within bounds load as PyYAML's safe loader loads them."""

from __future__ import annotations

import pytest
import yaml

from monitor.yaml_bounded import MAX_ALIAS_NODES, MAX_DEPTH, YamlLimitError, load_documents


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
