"""PromQL from one builder: no module but `monitor/promql.py` (and the escaping it calls) writes label-matcher
text. Rules, dashboards and the analyzer hand (label, op, value) data to `monitor.promql`, which escapes every
value and validates every label name and operator; text such as f'{metric}{{deployment="{d}"}}' written
anywhere else would bypass both (and would not list its metrics in a panel description).

The scan reads each module's syntax tree: f-strings, `+` concatenations, `.format` and `%` templates and
plain literals (docstrings excepted), with each interpolated value standing for "anything". A selector's
opening brace after a metric name or an interpolated value, or a matcher (`label="`, `label=~"`, `label!="`,
`label!~"`) at the start of a text or after `{` or `,`, is label-matcher text.
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

MONITOR = Path(__file__).resolve().parents[1] / "monitor"
BUILDERS = {"promql.py", "escaping.py"}  # monitor/promql.py, monitor/escaping.py: the builder itself
# Files that write the same shape of text in another language, never PromQL.
EXEMPT = {
    "emulate/exposition.py": "writes Prometheus exposition text (the label sets of an emulated scrape)",
    "generate/alertmanager.py": "Alertmanager route matchers (alertmanager.yml), not PromQL",
    "parse/lines.py": "searches scraped exposition text for a label pair to drop (`pid=\"`)",
}

ANY = "\x00"  # an interpolated value
_OP = r"(?:=~|!~|!=|=)"
_LABEL = rf"(?:[A-Za-z_][A-Za-z0-9_]*|{ANY})"
# `name{` or `{...}{` or `({`, then an interpolated value or a matcher; or a matcher at the start of a text
# or after `{` / `,` (the project writes matchers without spaces).
_OPENING = re.compile(rf"(?:^|[A-Za-z0-9_:({ANY}])\{{(?:{ANY}|{_LABEL}{_OP}[\"'])")
_MATCHER = re.compile(rf"(?:^|[{{,]){_LABEL}{_OP}[\"']")


def _is_matcher_text(template: str) -> bool:
    text = template.replace("{{", "").replace("}}", "")  # Go-template and Grafana legend braces
    return bool(_OPENING.search(text) or _MATCHER.search(text))


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _concatenation(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [*_concatenation(node.left), *_concatenation(node.right)]
    return [node]


def _format_template(text: str) -> str | None:
    """A `str.format` template with each replacement field as ANY (and `{{` as the brace it prints)."""
    out = []
    try:
        for literal, field, _, _ in string.Formatter().parse(text):
            out.append(literal)
            if field is not None:
                out.append(ANY)
    except ValueError:
        return None
    return "".join(out)


def _templates(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, template) of every text a module writes, interpolated values as ANY."""
    docs = _docstrings(tree)
    inside: set[int] = set()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside.update(id(v) for v in node.values)
            found.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else ANY for v in node.values)))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            parts = _concatenation(node)
            if any(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts):
                inside.update(id(p) for p in parts)
                found.append((node.lineno, "".join(p.value if isinstance(p, ast.Constant) and isinstance(p.value, str)
                                                   else ANY for p in parts)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
              and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
            template = _format_template(node.func.value.value)
            if template is not None:  # else not a template: read as a plain literal below
                inside.add(id(node.func.value))
                found.append((node.lineno, template))
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant)
              and isinstance(node.left.value, str)):
            inside.add(id(node.left))
            found.append((node.lineno, re.sub(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdrfgeixXo]", ANY, node.left.value)))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside
                and id(node) not in docs):
            found.append((node.lineno, node.value))
    return found


def matcher_text(source: str) -> list[tuple[int, str]]:
    """(line, template) of each text in `source` that writes PromQL label-matcher text."""
    return sorted({(line, t) for line, t in _templates(ast.parse(source)) if _is_matcher_text(t)})


PLANTED = [
    "q = f'{names.TARGET}{{deployment=\"{d}\"}}'",
    "q = f\"sum(rate({COUNTERS['requests_total']}{{{REQUESTS}}}[{RATE}]))\"",
    "q = f'{names.TARGET}{{{D},sli=\"{sli}\"}}'",
    "sel = f'{{{D}}}'",
    "q = 'up{' + sel + '}'",
    "q = metric + '{deployment=\"' + d + '\"}'",
    "q = '{m}{{{sel}}}'.format(m=m, sel=sel)",
    "q = '%s{deployment=\"%s\"}' % (m, d)",
    "D = 'deployment=\"$deployment\"'",
    "S = 'deployment=~\"$deployment\",node=~\"$node\"'",
    "m = f'{label}=\"{value}\"'",
    "q = f'ALERTS{{alertstate=\"firing\",{D}}}'",
]
NOT_SELECTORS = [
    "legend = f'{w} {{{{sli}}}}'",
    "title = f'{title} distribution (target ${{{sli}_target}} s)'",
    "hint = f'query parameter {k} (add `params: {{{k}: [...]}}`)'",
    "html = f'<p class=\"verdict {escape(v)}\">{escape(h)}</p>'",
    "q = select(names.TARGET, (*D, ('sli', '=', sli)))",
    "text = 'Per role and DP rank (max over TP ranks, priority=\"\").'",
    "sql = \"SELECT value FROM meta WHERE key='schema'\"",
    "def f():\n    '''A docstring may show `m{a=\"x\"}`.'''",
]


@pytest.mark.parametrize("source", PLANTED)
def test_the_scan_catches_a_planted_selector(source):
    assert matcher_text(source), source


@pytest.mark.parametrize("source", NOT_SELECTORS)
def test_the_scan_leaves_other_braces_and_quotes_alone(source):
    assert not matcher_text(source), source


def test_no_module_but_the_builder_writes_label_matchers():
    found = []
    for path in sorted(MONITOR.rglob("*.py")):
        rel = path.relative_to(MONITOR).as_posix()
        if rel in BUILDERS or rel in EXEMPT:
            continue
        found += [f"monitor/{rel}:{line}: {t!r}" for line, t in matcher_text(path.read_text(encoding="utf-8"))]
    assert not found, ("label-matcher text written outside monitor/promql.py; pass (label, op, value) matchers to "
                       "monitor.promql (select, selector, aggregate, rate_sum, ...) instead:\n" + "\n".join(found))


# The escaping functions that write PromQL literals and matcher sets: a module that imports them can glue a
# selector from pieces (f"{metric}{matchers(labels)}") without writing a brace the scan above would see.
QUOTING = {"matchers", "promql_string", "promql_regex_literal"}
QUOTERS = {
    "promql.py": "the builder",
    "generate/promtool_tests.py": "the label sets of promtool's expected samples (exp_samples), not selectors",
}


def test_only_the_builder_quotes_promql_values():
    found = []
    for path in sorted(MONITOR.rglob("*.py")):
        rel = path.relative_to(MONITOR).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "monitor.escaping" and rel not in QUOTERS:
                found += [f"monitor/{rel}:{node.lineno}: {a.name}" for a in node.names if a.name in QUOTING]
            elif (isinstance(node, ast.Attribute) and node.attr in QUOTING and isinstance(node.value, ast.Name)
                  and node.value.id == "escaping" and rel not in QUOTERS):
                found.append(f"monitor/{rel}:{node.lineno}: .{node.attr}")
    assert not found, "PromQL values quoted outside monitor/promql.py:\n" + "\n".join(found)


def test_the_exemptions_still_exist():
    for rel in (*BUILDERS, *EXEMPT, *QUOTERS):
        assert (MONITOR / rel).is_file(), rel
