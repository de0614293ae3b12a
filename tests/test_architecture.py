"""The package layout is the architecture (docs/architecture.md): which part may import which, checked.

Every `import` in `monitor/` counts, including those inside functions: a lazy import is still a
dependency. A new edge must be added to ALLOWED on purpose, and may not close a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

MONITOR = Path(__file__).resolve().parents[1] / "monitor"

# Each part of the package and the parts it may import (lowest layers first). `monitor` itself only
# carries the version.
ALLOWED: dict[str, set[str]] = {
    "conventions": set(),
    "escaping": set(),
    "signals": set(),
    "fdlimit": set(),
    "redaction": set(),
    "reload": {"config"},
    "fetch": set(),
    "yaml_bounded": set(),
    "promql": {"escaping"},
    "feeds": {"config", "conventions", "parse"},
    "config": {"conventions", "escaping", "yaml_bounded"},
    "parse": {"conventions"},
    "slo": {"config", "conventions", "feeds", "parse"},
    "telemetry": {"config", "conventions", "fetch", "parse"},
    "recipes": {"config", "conventions"},
    "scrape": {"config", "conventions", "fetch", "parse", "telemetry"},
    "observations": {"config", "conventions", "feeds", "parse", "redaction", "scrape", "slo", "state", "telemetry"},
    "state": {"monitor", "config", "redaction", "scrape", "slo"},
    "requestlog": {"config", "conventions", "state"},
    "record": {"redaction", "requestlog", "slo", "state", "telemetry"},
    "export": {"monitor", "redaction", "state", "conventions"},
    "generate": {"monitor", "config", "conventions", "escaping", "feeds", "promql", "redaction"},
    "interop": {"config", "conventions", "escaping", "generate", "promql"},
    "analyze": {"monitor", "config", "conventions", "escaping", "feeds", "promql", "record", "slo"},
    "emulate": {"config", "conventions", "signals"},
    "inspect_exposition": {"conventions", "parse", "slo"},
    "sidecar": {"config", "conventions", "export", "fdlimit", "observations", "record", "redaction", "reload",
                "requestlog", "scrape", "signals", "slo", "state", "telemetry"},
    "commands": {"analyze", "config", "conventions", "emulate", "fetch", "generate", "inspect_exposition",
                 "interop", "parse", "recipes", "record", "redaction", "scrape", "sidecar", "signals", "state",
                 "telemetry"},
    "cli": {"config", "redaction"},
    "__main__": {"cli"},
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "monitor"


def imports() -> dict[tuple[str, str], set[str]]:
    """(importing part, imported part) -> the modules where the edge is made."""
    edges: dict[tuple[str, str], set[str]] = {}
    for path in MONITOR.rglob("*.py"):
        rel = path.relative_to(MONITOR.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
                names = [".".join([*base, node.module] if node.module else base)]
            else:
                continue
            for name in names:
                if name == "monitor" or name.startswith("monitor."):
                    a, b = _part(module), _part(name)
                    if a != b:
                        edges.setdefault((a, b), set()).add(module)
    return edges


def test_every_import_between_parts_is_an_allowed_edge():
    unknown = {a for a, _ in imports()} - set(ALLOWED) - {"monitor"}
    assert not unknown, f"new parts of the package: add them to ALLOWED and docs/architecture.md: {unknown}"
    bad = {f"{a} -> {b} ({', '.join(sorted(where))})" for (a, b), where in imports().items()
           if b not in ALLOWED.get(a, set()) and a != "monitor"}
    assert not bad, "imports against the layering in docs/architecture.md:\n" + "\n".join(sorted(bad))


def test_the_import_graph_has_no_cycle():
    graph: dict[str, set[str]] = {}
    for a, b in imports():
        graph.setdefault(a, set()).add(b)
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        assert node not in visiting, "import cycle: " + " -> ".join([*visiting[visiting.index(node):], node])
        visiting.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_the_allowed_layering_itself_has_no_cycle():
    """ALLOWED may not permit a cycle either, so the next change cannot make one while staying allowed."""
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, "ALLOWED permits a cycle: " + " -> ".join([*path, node])
        if node in done:
            return
        for nxt in ALLOWED.get(node, set()) - {"monitor"}:
            visit(nxt, (*path, node))
        done.add(node)

    for node in ALLOWED:
        visit(node, ())
