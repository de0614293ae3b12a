"""The package layout is the architecture (docs/architecture.md): which part may import which, checked.

Every `import` in `monitor/` counts, wherever it is written (inside a function, under `if TYPE_CHECKING:`):
a lazy import is still a dependency. An import names the module it reaches: `from monitor import sidecar`,
`from .. import sidecar` and `import monitor.sidecar` all reach `monitor.sidecar`; `from monitor.x import Y`
reaches `monitor.x.Y` when that is a module, else `monitor.x`. (Importing `monitor.x.y` also runs the
`__init__.py` of its packages; like import-linter, the checker counts the module named, not those.)

A part is a top-level module or subpackage of `monitor`. An import from one part into another must be an
edge of ALLOWED, which is exactly the table in docs/architecture.md, and exactly the edges the code makes.
The root package `monitor` imports nothing and is nobody's dependency. No import may close a cycle, between
parts or between modules (inside one part too).

The checker is functions of the package's directory, so that `test_the_checker_reports_*` run it on a copy
of the package with one bad import planted.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

MONITOR = Path(__file__).resolve().parents[1] / "monitor"
ARCHITECTURE_MD = MONITOR.parent / "docs" / "architecture.md"

# Each part and the parts it imports, lowest layers first; docs/architecture.md's table says the same.
ALLOWED: dict[str, set[str]] = {
    "conventions": set(),
    "escaping": set(),
    "signals": set(),
    "fdlimit": set(),
    "redaction": set(),
    "version": set(),
    "fetch": set(),
    "yaml_bounded": set(),
    "promql": {"escaping"},
    "feeds": {"config", "conventions", "parse"},
    "config": {"conventions", "escaping", "yaml_bounded"},
    "reload": {"config"},
    "parse": {"conventions"},
    "slo": {"config", "conventions", "feeds", "parse"},
    "telemetry": {"config", "conventions", "fetch", "parse"},
    "recipes": {"config", "conventions"},
    "scrape": {"config", "conventions", "feeds", "fetch", "parse", "telemetry"},
    "observations": {"config", "conventions", "feeds", "parse", "redaction", "scrape", "slo", "telemetry"},
    "requestlog": {"config", "conventions"},
    "status_model": {"config", "redaction", "requestlog", "scrape", "slo", "version"},
    "record": {"redaction", "slo"},
    "export": {"conventions", "redaction", "requestlog", "status_model", "telemetry", "version"},
    "slo_plan": {"config", "conventions", "feeds", "promql"},
    "generate": {"config", "conventions", "escaping", "feeds", "promql", "redaction", "slo_plan"},
    "interop": {"config", "conventions", "escaping", "promql", "slo_plan"},
    "analyze": {"config", "conventions", "feeds", "fetch", "promql", "record", "slo"},
    "emulate": {"config", "conventions", "signals"},
    "inspect_exposition": {"conventions", "parse", "slo"},
    "sidecar": {"config", "conventions", "export", "fdlimit", "observations", "record", "redaction", "reload",
                "requestlog", "scrape", "signals", "slo", "status_model", "telemetry"},
    "commands": {"analyze", "config", "conventions", "emulate", "fetch", "generate", "inspect_exposition",
                 "interop", "parse", "recipes", "record", "scrape", "sidecar", "signals", "status_model",
                 "telemetry"},
    "cli": {"commands", "config", "redaction"},
    "__main__": {"cli"},
}

# Module cycles another change owns, each with why it is left. An entry must name a cycle that still exists
# exactly (members of one strongly connected component): once it is broken, or grows, the tests say so.
# None is pending: emulate/'s two (control/server/serving, and the engine's parts naming EmulatedDeployment)
# were broken by a Protocol per part (#36 item 6). The mechanism stays, its self-check below plants one.
PENDING_CYCLES: dict[frozenset[str], str] = {}


# --- the checker ---------------------------------------------------------------------------------------


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package in directory `root`, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        found[".".join(rel.parts).removesuffix(".__init__")] = path
    return found


def module_imports(root: Path) -> dict[str, dict[str, int]]:
    """module -> {module of the package it imports: the first line where it does}."""
    known = modules(root)
    top = root.name
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        reached = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, node.module] if node.module else up)
                else:
                    base = node.module or ""
                # `from base import name`: the submodule `base.name` when there is one, else `base`.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            else:
                continue
            for target in targets:
                if target == top or target.startswith(top + "."):
                    reached.setdefault(target, node.lineno)
        reached.pop(module, None)
    return graph


def part_of(module: str) -> str:
    """`monitor.slo.engine` -> `slo`; the root package is `monitor`."""
    names = module.split(".")
    return names[1] if len(names) > 1 else names[0]


def part_imports(graph: dict[str, dict[str, int]]) -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> where each such import is written (`module:line -> module`)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, reached in sorted(graph.items()):
        for target, line in sorted(reached.items()):
            a, b = part_of(module), part_of(target)
            if a != b:
                edges.setdefault((a, b), []).append(f"{module}:{line} -> {target}")
    return edges


def components(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan): each is a cycle or several."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.add(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(frozenset(members))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found, key=sorted)


def a_cycle(graph: dict[str, set[str]], component: frozenset[str]) -> list[str]:
    """A shortest closed path through the component's first node, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, set()) & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component always has one


def layering_problems(root: Path, graph: dict[str, dict[str, int]], allowed: dict[str, set[str]]) -> list[str]:
    """Imports between parts that `allowed` does not permit, and parts it does not list."""
    present = {part_of(m) for m in graph} - {root.name}
    found = [f"part {p!r} is not in ALLOWED (add it there and to docs/architecture.md)"
             for p in sorted(present - set(allowed))]
    for (a, b), where in sorted(part_imports(graph).items()):
        if b == root.name:
            found.append(f"{a} -> {b} (the root package is nobody's dependency): {'; '.join(where)}")
        elif a == root.name:
            found.append(f"{a} -> {b} (the root package imports nothing): {'; '.join(where)}")
        elif b not in allowed.get(a, set()):
            found.append(f"{a} -> {b} (not allowed): {'; '.join(where)}")
    return found


def cycle_problems(graph: dict[str, dict[str, int]], pending: dict[frozenset[str], str]) -> list[str]:
    """Import cycles between parts and between modules (those inside one part too), but `pending` ones."""
    parts: dict[str, set[str]] = {}
    for a, b in part_imports(graph):
        parts.setdefault(a, set()).add(b)
    mods = {m: set(reached) for m, reached in graph.items()}
    found = [f"part cycle among {', '.join(sorted(c))}: {' -> '.join(a_cycle(parts, c))}" for c in components(parts)]
    found += [f"module cycle among {', '.join(sorted(c))}: {' -> '.join(a_cycle(mods, c))}"
              for c in components(mods) if c not in pending]
    return found


def problems(root: Path, allowed: dict[str, set[str]], pending: dict[frozenset[str], str] | None = None) -> list[str]:
    """Everything the layering rules find wrong with the package in directory `root`."""
    graph = module_imports(root)
    return layering_problems(root, graph, allowed) + cycle_problems(graph, PENDING_CYCLES if pending is None else pending)


# --- the package as it is -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return module_imports(MONITOR)


def test_every_import_between_parts_is_an_allowed_edge(graph):
    found = layering_problems(MONITOR, graph, ALLOWED)
    assert not found, "imports against the layering in docs/architecture.md:\n" + "\n".join(found)


def test_the_import_graph_has_no_cycle(graph):
    found = cycle_problems(graph, PENDING_CYCLES)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_each_pending_cycle_is_still_there_as_it_is(graph):
    """A pending cycle that was broken (or grew) must leave PENDING_CYCLES: it excuses nothing else."""
    now = set(components({m: set(reached) for m, reached in graph.items()}))
    stale = [sorted(c) for c in PENDING_CYCLES if c not in now]
    assert not stale, f"PENDING_CYCLES names cycles that are gone or changed: {stale}"


def test_allowed_is_exactly_the_edges_the_code_makes(graph):
    """No allowance is left over from an import that is gone: ALLOWED (and the table) say what is."""
    made = set(part_imports(graph))
    unused = sorted(f"{a} -> {b}" for a, targets in ALLOWED.items() for b in targets if (a, b) not in made)
    assert not unused, f"ALLOWED permits edges no import makes (remove them here and in the table): {unused}"
    assert set(ALLOWED) == {part_of(m) for m in graph} - {MONITOR.name}, "ALLOWED names a part that is gone"


def test_the_allowed_layering_itself_has_no_cycle():
    """ALLOWED may not permit a cycle either, so the next change cannot make one while staying allowed."""
    assert not components(ALLOWED), f"ALLOWED permits cycles: {components(ALLOWED)}"
    assert all(MONITOR.name not in targets for targets in ALLOWED.values())


def documented_layering(text: str) -> dict[str, set[str]]:
    """The table under "The parts and what each may import": part (`x.py`, `x/`) -> what it may import
    (names separated by commas; a remark in parentheses is left out; – is nothing)."""
    section = text.split("## The parts and what each may import", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if not row.startswith("|") or len(cells) != 3 or cells[0] in ("part", "---"):
            continue
        part = cells[0].strip("`").removesuffix(".py").removesuffix("/")
        names = re.sub(r"\([^)]*\)", "", cells[2])
        table[part] = {n.strip() for n in names.split(",") if n.strip() not in ("", "–")}
    return table


def test_the_table_in_docs_architecture_is_allowed():
    table = documented_layering(ARCHITECTURE_MD.read_text(encoding="utf-8"))
    assert set(table) == set(ALLOWED), (f"parts only in the table: {sorted(set(table) - set(ALLOWED))}; "
                                        f"only in ALLOWED: {sorted(set(ALLOWED) - set(table))}")
    differ = {p: (sorted(table[p]), sorted(ALLOWED[p])) for p in ALLOWED if table[p] != ALLOWED[p]}
    assert not differ, f"docs/architecture.md (table, ALLOWED) differ: {differ}"


# --- the checker, on a copy of the package with one bad import planted ------------------------------------


@pytest.fixture(scope="module")
def clean_copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clean") / MONITOR.name
    shutil.copytree(MONITOR, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert problems(root, ALLOWED) == [], "the copy must start clean"
    return root


def planted(clean: Path, tmp_path: Path, where: str, code: str,
            pending: dict[frozenset[str], str] | None = None) -> list[str]:
    """What the checker finds once `code` is appended to `where` (a path inside the package; a new file
    when it does not exist) in a copy of the clean package; `pending`: in place of PENDING_CYCLES."""
    root = tmp_path / MONITOR.name
    shutil.copytree(clean, root)
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text(encoding="utf-8") if path.exists() else "") + "\n" + code, encoding="utf-8")
    return problems(root, ALLOWED, pending)


SIDECAR_IN_GENERATE = "generate -> sidecar (not allowed): monitor.generate."


@pytest.mark.parametrize(("where", "code", "expected"), [
    ("generate/rules.py", "from monitor import sidecar\n", SIDECAR_IN_GENERATE + "rules:"),
    ("generate/rules.py", "import monitor.sidecar\n", SIDECAR_IN_GENERATE + "rules:"),
    ("generate/rules.py", "from monitor.sidecar import Sidecar\n", SIDECAR_IN_GENERATE + "rules:"),
    ("generate/rules.py", "from .. import sidecar\n", SIDECAR_IN_GENERATE + "rules:"),
    ("generate/rules.py", "from ..sidecar import Sidecar\n", SIDECAR_IN_GENERATE + "rules:"),
    ("generate/dashboards/deployment.py", "from ... import sidecar\n", SIDECAR_IN_GENERATE + "dashboards.deployment:"),
    ("generate/rules.py", "def _planted():\n    from monitor.sidecar import Sidecar\n\n    return Sidecar\n",
     SIDECAR_IN_GENERATE + "rules:"),
    ("generate/rules.py", "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from monitor import sidecar\n",
     SIDECAR_IN_GENERATE + "rules:"),
    ("generate/rules.py", "from monitor import version\n", "generate -> version (not allowed)"),
    ("generate/rules.py", "import monitor\n", "generate -> monitor (the root package is nobody's dependency)"),
    ("generate/rules.py", "from monitor import something_in_the_root\n",
     "generate -> monitor (the root package is nobody's dependency)"),
    ("__init__.py", "from monitor.version import __version__\n", "monitor -> version (the root package imports nothing)"),
    ("brand_new.py", "from monitor import config\n", "part 'brand_new' is not in ALLOWED"),
    ("brand_new/__init__.py", '"""nothing imported, still a part"""\n', "part 'brand_new' is not in ALLOWED"),
])
def test_the_checker_reports_each_form_of_a_forbidden_import(clean_copy, tmp_path, where, code, expected):
    found = planted(clean_copy, tmp_path, where, code)
    assert any(p.startswith(expected) for p in found), f"{expected!r} not among {found}"


def test_the_checker_reports_a_part_cycle_written_with_from_monitor_import(clean_copy, tmp_path):
    assert "monitor.escaping" in module_imports(clean_copy)["monitor.promql"], "promql no longer imports escaping"
    found = planted(clean_copy, tmp_path, "escaping.py", "from monitor import promql\n")
    assert "part cycle among escaping, promql: escaping -> promql -> escaping" in found
    assert "module cycle among monitor.escaping, monitor.promql: monitor.escaping -> monitor.promql -> monitor.escaping" in found


def test_the_checker_reports_a_module_cycle_inside_one_package(clean_copy, tmp_path):
    reader, goodput = "monitor.requestlog.reader", "monitor.requestlog.goodput"
    assert goodput in module_imports(clean_copy)[reader], "requestlog.reader no longer imports requestlog.goodput"
    found = planted(clean_copy, tmp_path, "requestlog/goodput.py", "from monitor.requestlog import reader\n")
    assert found == [f"module cycle among {goodput}, {reader}: {goodput} -> {reader} -> {goodput}"]


READER, TAIL, RECORDS, GOODPUT = (f"monitor.requestlog.{m}" for m in ("reader", "tail", "records", "goodput"))
IMPORT_READER = "from monitor.requestlog import reader\n"


def test_the_checker_excuses_a_pending_cycle_as_it_is(clean_copy, tmp_path):
    """PENDING_CYCLES is empty: a planted cycle, listed as pending, stands for the next one another change owns."""
    assert TAIL in module_imports(clean_copy)[READER], "requestlog.reader no longer imports requestlog.tail"
    assert planted(clean_copy, tmp_path, "requestlog/tail.py", IMPORT_READER) == [
        f"module cycle among {READER}, {TAIL}: {READER} -> {TAIL} -> {READER}"]
    assert planted(clean_copy, tmp_path / "pending", "requestlog/tail.py", IMPORT_READER,
                   {frozenset({READER, TAIL}): "planted"}) == []


def test_the_checker_reports_a_pending_cycle_that_grows(clean_copy, tmp_path):
    """records -> reader closes reader -> records, and goodput joins it (reader -> goodput -> records): the
    pending pair no longer excuses what the component has become."""
    graph = module_imports(clean_copy)
    assert RECORDS in graph[READER] and GOODPUT in graph[READER] and RECORDS in graph[GOODPUT], graph[READER]
    found = planted(clean_copy, tmp_path, "requestlog/records.py", IMPORT_READER,
                    {frozenset({READER, RECORDS}): "planted"})
    assert len(found) == 1 and found[0].startswith(f"module cycle among {GOODPUT}, {READER}, {RECORDS}: "), found


def test_the_table_parser_reads_remarks_and_dashes():
    text = ("## The parts and what each may import\n\n| part | job | may import |\n|---|---|---|\n"
            "| `a.py` | x | – |\n| `b/` | y, z | a (its names, all), c |\n\n## Next\n| `d.py` | | e |\n")
    assert documented_layering(text) == {"a": set(), "b": {"a", "c"}}


# --- the document's claims cite tests that exist ---------------------------------------------------------


def cited_tests(text: str) -> list[tuple[str, str | None]]:
    """(`tests/...py`, test name or None) for every test the text cites in backticks."""
    found = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", text)
    return [(path, name or None) for path, name in found]


def test_every_test_the_architecture_doc_cites_exists():
    text = ARCHITECTURE_MD.read_text(encoding="utf-8")
    cited = cited_tests(text)
    assert len(cited) >= 10  # the claims table names one per claim
    missing = []
    for path, name in cited:
        file = MONITOR.parent / path
        if not file.is_file():
            missing.append(path)
        elif name is not None and not re.search(rf"^def {name}\(", file.read_text(encoding="utf-8"), re.M):
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/architecture.md cites tests that do not exist: {missing}"


def test_the_citation_reader_sees_a_file_and_a_named_test():
    assert cited_tests("x `tests/a/b.py` and `tests/c.py::test_d`, not tests/e.py") == [
        ("tests/a/b.py", None), ("tests/c.py", "test_d")]
