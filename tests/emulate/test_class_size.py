"""No class of the emulator grows past a screenful of methods (issue #26).

Counted as the `def`s (and `async def`s) directly in the class body: properties, static and class
methods included, functions nested inside a method not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import monitor.emulate

MAX_METHODS = 20
PACKAGE = Path(monitor.emulate.__file__).parent


def method_counts(source: str, filename: str = "<source>") -> dict[str, int]:
    """Methods of every class in `source` (nested classes too), by `line name`."""
    out = {}
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.ClassDef):
            out[f"{node.lineno} {node.name}"] = sum(
                isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
    return out


def test_no_emulator_class_has_more_than_20_methods():
    counts = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, n in method_counts(path.read_text(encoding="utf-8"), str(path)).items():
            counts[f"{path.relative_to(PACKAGE)}:{name}"] = n
    assert any(name.endswith(" EmulatedDeployment") for name in counts)  # the walk found the package
    too_big = {name: n for name, n in counts.items() if n > MAX_METHODS}
    assert not too_big, f"classes with more than {MAX_METHODS} methods: {too_big}"


def test_properties_static_and_async_methods_count_nested_functions_do_not():
    source = (
        "class A:\n"
        "    x = 1\n"
        "    @property\n    def p(self): pass\n"
        "    @staticmethod\n    def s(): pass\n"
        "    async def a(self):\n        def inner(): pass\n"
        "    class B:\n        def b(self): pass\n"
    )
    assert method_counts(source) == {"1 A": 3, "9 B": 1}
