"""No class of the emulator grows past a screenful of methods (issue #26).

Counted as the `def`s (and `async def`s) directly in the class body: properties, static and class
methods included, functions nested inside a method not.
"""

from __future__ import annotations

import ast
import shutil
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


def package_counts(package: Path) -> dict[str, int]:
    """Methods of every class of the package in directory `package`, by `module:line name`."""
    counts = {}
    for path in sorted(package.rglob("*.py")):
        for name, n in method_counts(path.read_text(encoding="utf-8"), str(path)).items():
            counts[f"{path.relative_to(package).as_posix()}:{name}"] = n
    return counts


def too_big(package: Path) -> dict[str, int]:
    return {name: n for name, n in package_counts(package).items() if n > MAX_METHODS}


def test_no_emulator_class_has_more_than_20_methods():
    assert any(name.endswith(" EmulatedDeployment") for name in package_counts(PACKAGE))  # the walk found it
    found = too_big(PACKAGE)
    assert not found, f"classes with more than {MAX_METHODS} methods: {found}"


def test_the_check_fails_on_a_planted_21st_method(tmp_path):
    """A copy of the package whose biggest class gets methods until it has 21: the check must name it."""
    copy = tmp_path / "emulate"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert not too_big(copy)
    name, n = max(package_counts(copy).items(), key=lambda item: item[1])
    module, _, where = name.partition(":")
    line, cls = where.split(" ")
    path = copy / module
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    indent = " " * (len(lines[int(line) - 1]) - len(lines[int(line) - 1].lstrip()) + 4)
    planted = "".join(f"{indent}def planted_{i}(self):\n{indent}    pass\n" for i in range(MAX_METHODS + 1 - n))
    lines.insert(int(line), planted)  # right after `class X...:` (a one-line header)
    path.write_text("".join(lines), encoding="utf-8")
    assert too_big(copy) == {f"{module}:{line} {cls}": MAX_METHODS + 1}


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
