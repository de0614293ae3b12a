"""YAML (and JSON) documents read with bounds: alias expansion, nesting depth, size.

PyYAML's safe loader shares an aliased node instead of copying it, so a "billion laughs" file of a few
hundred bytes loads quickly into a small graph that is a billion values wide to anything that walks it
(pydantic, `repr`, `str`): minutes of CPU and gigabytes. Its composer also recurses once per nesting
level, so a thousand nested `[` end in a RecursionError. Both are refused here while composing, before
anything is built: a config has no use for either. A list of 100,000 targets is refused after its
10,000th, before the rest is read.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

try:
    from yaml.cyaml import CParser
except ImportError:  # PyYAML built without libyaml
    CParser = None

# Nodes that aliases may add over the whole file, counting an alias as a copy of what it names. A
# config that shares a block of settings between a few dozen targets adds a few hundred.
MAX_ALIAS_NODES = 10_000
# Collections inside collections; a config is about 6 deep (deployments[].targets[].command[]).
MAX_DEPTH = 64
# Items of one list or mapping, and nodes of one document: far above what a config may ask for (1,000
# targets per deployment, 10,000 in all: ~100,000 nodes), so that a file of 100,000 targets is refused
# after a tenth of it is read, not once all of it is (pure-Python YAML reads ~10,000 nodes a second).
MAX_ITEMS = 10_000
MAX_NODES = 200_000


class YamlLimitError(Exception):
    """A document over a bound; `line` is 1-based (0 when unknown)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


class _Bounds(Composer):
    """The bounds, checked as each node is composed; the parser below supplies the events."""

    def _start_bounds(self) -> None:
        self._alias_nodes = 0
        self._nodes = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its size with aliases expanded
        self._open: list[Node] = []  # the collections being composed, outermost first

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, AliasEvent) and event.anchor in self.anchors:
            target = self.anchors[event.anchor]
            # A node is registered under its anchor before its children are composed: an alias to a
            # collection still open is one inside itself.
            if target is parent or any(target is node for node in self._open):
                raise YamlLimitError(line, f"alias *{event.anchor} is inside what it refers to (a recursive "
                                           "structure): refused")
            self._alias_nodes += self._size(target)
            if self._alias_nodes > MAX_ALIAS_NODES:
                raise YamlLimitError(line, f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes (at *"
                                           f"{event.anchor}): refused (a 'billion laughs' document?); write "
                                           "the values out or use fewer aliases")
            return super().compose_node(parent, index)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise YamlLimitError(line, f"more than {MAX_NODES:,} values in one file: refused")
        if isinstance(parent, SequenceNode) and isinstance(index, int) and index >= MAX_ITEMS:
            raise YamlLimitError(line, f"a list of more than {MAX_ITEMS:,} items: refused")
        if isinstance(parent, MappingNode) and index is None and len(parent.value) >= MAX_ITEMS:
            raise YamlLimitError(line, f"a mapping of more than {MAX_ITEMS:,} keys: refused")
        if parent is not None:
            self._open.append(parent)
        try:
            if len(self._open) >= MAX_DEPTH:  # this node is one level below its parents
                raise YamlLimitError(line, f"nested more than {MAX_DEPTH} levels deep: refused")
            return super().compose_node(parent, index)
        finally:
            if parent is not None:
                self._open.pop()

    def construct_yaml_int(self, node: ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # Python's int() refuses more than sys.get_int_max_str_digits() digits
            raise YamlLimitError(node.start_mark.line + 1, f"an integer of {len(node.value):,} characters: refused "
                                 f"(at most {sys.get_int_max_str_digits():,} digits)") from None

    def _size(self, node: Node) -> int:
        """Nodes in `node` with every alias expanded (memoised: each node is walked once)."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        if isinstance(node, SequenceNode):
            size = 1 + sum(self._size(n) for n in node.value)
        elif isinstance(node, MappingNode):
            size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
        else:
            size = 1
        self._sizes[id(node)] = size
        return size


class _PyBoundedLoader(_Bounds, yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._start_bounds()


_PyBoundedLoader.add_constructor("tag:yaml.org,2002:int", _Bounds.construct_yaml_int)
_BoundedLoader: type[_Bounds] = _PyBoundedLoader
if CParser is not None:
    class _CBoundedLoader(_Bounds, CParser, SafeConstructor, Resolver):
        # Composer (in _Bounds) before CParser: libyaml's own composer would skip the bounds.
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._start_bounds()

    _CBoundedLoader.add_constructor("tag:yaml.org,2002:int", _Bounds.construct_yaml_int)
    _BoundedLoader = _CBoundedLoader


def load_documents(text: str) -> list[Any]:
    """Every document of `text`. Raises YamlLimitError over a bound, yaml.YAMLError when not YAML."""
    loader = _BoundedLoader(text)
    try:
        docs = []
        while loader.check_node():
            docs.append(loader.construct_document(loader.get_node()))
        return docs
    finally:
        loader.dispose()
