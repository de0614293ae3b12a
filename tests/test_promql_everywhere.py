"""PromQL from one builder: no module but `monitor/promql.py` (and the escaping it calls) writes PromQL text.
Rules, dashboards, promtool tests, the interop specs and the analyzer hand data to `monitor.promql`: (label, op,
value) matchers, which it escapes and checks; function names, operators and their modifiers, which it checks
against PromQL's. Text such as f'{metric}{{deployment="{d}"}}' or f"histogram_quantile({q}, {hist})" written
anywhere else would bypass both (and would not list its metrics in a panel description).

The scan reads each module's syntax tree: f-strings, `+` concatenations, `.format` and `%` templates and
plain literals (docstrings excepted), with each interpolated value standing for "anything". Two kinds of text
are PromQL written by hand:
- label-matcher text: a selector's opening brace after a metric name or an interpolated value, or a matcher
  (`label="`, `label=~"`, `label!="`, `label!~"`) at the start of a text or after `{` or `,`;
- expression text: a PromQL function or aggregation called (`rate(`, `histogram_quantile(`, `sum by (`), a
  range or offset after a selector (`{sel}[5m]`, `offset 1h`), vector matching or `bool`, a binary operator
  between operands (`{a} / {b}`, `{x} > 0`, an operator at the start of a line as the rules lay them out),
  or `and`/`or`/`unless` between expressions. An operator alone (`binop(a, "/", b)`'s argument) is not.
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from monitor.promql import AGGREGATIONS, FUNCTIONS

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


# --- expression text: functions, aggregations, ranges, offsets, modifiers and operators ----------------
# The builder's lists, and the calls every generated file makes whatever those lists become.
PROMQL_CALLS = FUNCTIONS | AGGREGATIONS | {"histogram_quantile", "histogram_fraction", "rate", "increase", "vector",
                                          "absent", "clamp_min", "sum_over_time", "round", "sum", "max", "count"}
_NAMES = "|".join(sorted(PROMQL_CALLS, key=len, reverse=True))
_AGGREGATION = "|".join(sorted(AGGREGATIONS, key=len, reverse=True))
_DURATION = rf"(?:\d+(?:ms|[smhdwy]))+|\$\w+|\{{\{{\s*\.window\s*\}}\}}|{ANY}"
# Operands: an interpolated value or a number (`{t}s` and `5%` are units in prose, not operands), or a group.
_VALUE_LEFT = rf"(?:{ANY}|(?<![\w.])\d+(?:\.\d+)?)"
_VALUE_RIGHT = rf"(?:{ANY}(?![A-Za-z%])|\d+(?:\.\d+)?(?![\w%]))"
_LEFT = rf"(?:{_VALUE_LEFT}|\)|\])"
_RIGHT = rf"(?:{_VALUE_RIGHT}|\()"
_OPERATOR = r"(?:[-+*/%^]|==|!=|>=|<=|>|<)"
EXPRESSION_TEXT = {
    "function call": re.compile(rf"(?<![\w:.$])(?:{_NAMES})\("),
    "aggregation": re.compile(rf"(?<![\w:.$])(?:{_AGGREGATION})\s+(?:by|without)\s*\("),
    "vector matching": re.compile(r"(?:[-+*/%^<>=]|\band|\bor|\bunless|\bbool)\s+(?:on|ignoring)\s*\("
                                  r"|\bgroup_(?:left|right)\b"),
    "bool": re.compile(r"(?:==|!=|>=|<=|>|<)\s+bool\b"),
    "offset": re.compile(rf"\boffset\s+-?(?:{_DURATION})"),
    "range": re.compile(rf"(?:{ANY}|\}})\[(?:{_DURATION})\]|[A-Za-z0-9_:]\[(?:\d+(?:ms|[smhdwy]))+\]"),
    # One space (or a line break) on each side, as every rule and query writes them: tables and prose that
    # pad columns (`0    / 0`) or glue a ratio (`5m/1m`) are not operands; between two groups, see below.
    "binary operator": re.compile(rf"{_VALUE_LEFT}(?: |\n[ \t]*){_OPERATOR}(?: |\n){_RIGHT}"
                                  rf"|{_LEFT}(?: |\n[ \t]*){_OPERATOR}(?: |\n){_VALUE_RIGHT}"
                                  rf"|{_LEFT}\n[ \t]*{_OPERATOR}(?: |\n){_RIGHT}"),
    "set operator": re.compile(rf"\n[ \t]*(?:and|or|unless)\b|{ANY}\s+(?:and|or|unless)\s+(?:\(|\d)"),
}
# An operator between two groups, in a text that interpolates a value (`({a}) / ({b})`); without one it is a
# formula in words (`(e2e - ttft) / (tokens - 1)` in a HELP text).
_BETWEEN_GROUPS = re.compile(rf"\)\s(?:{_OPERATOR}|and|or|unless)\s\(")
# Text that reads like an expression to the scan and is not PromQL (by module: a piece of the text, and why).
NOT_PROMQL = {
    "analyze/fmt.py": {f"{ANY} / {ANY}": "a report's table cell: bad events / events"},
    "emulate/catalog.py": {"": "SGLang's metric HELP texts, verbatim (`rate(sum of *_hit)`)"},
    "telemetry/npu_smi_table.py": {"unknown npu-smi table layout": "an error quoting npu-smi's table header"},
}


def _expression_kinds(template: str) -> list[str]:
    kinds = [kind for kind, pattern in EXPRESSION_TEXT.items() if pattern.search(template)]
    if ANY in template and _BETWEEN_GROUPS.search(template):
        kinds.append("operator between groups")
    return kinds


def expression_text(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, template) of each text in `source` that writes a PromQL function, aggregation, range,
    offset, modifier or operator."""
    return sorted({(line, kind, t) for line, t in _templates(ast.parse(source)) for kind in _expression_kinds(t)})


def scan_expressions(root: Path) -> list[str]:
    """Every expression text written outside the builder in the modules under `root` (monitor/, or a tree
    laid out like it)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in BUILDERS:
            continue
        allowed = NOT_PROMQL.get(rel, {})
        found += [f"monitor/{rel}:{line}: {kind}: {t!r}"
                  for line, kind, t in expression_text(path.read_text(encoding="utf-8"))
                  if not any(piece in t for piece in allowed)]
    return found


PLANTED_EXPRESSIONS = [
    "q = f'histogram_quantile({q}, {hist})'",
    "q = f'rate({sel}[{w}])'",
    "q = f'sum by (deployment) (rate({sel}[5m]))'",
    "q = f'histogram_quantile(0.99, sum by (le) (rate({sel}[$__rate_interval])))'",
    "q = 'histogram_fraction(-Inf, ' + t + ', ' + h + ')'",
    "q = 'increase({}[{}]) > 0'.format(sel, w)",
    "q = 'absent(%s)' % sel",
    "q = f'vector({x})'",
    "q = f'{sel} / {budget}'",
    "q = f'{sel} > 0'",
    "q = f'1 - ({good} / ({total} > 0))'",
    "q = f'{a} > {f}\\nand\\n{b} > {f}'",
    "q = f'{good}\\n/ ({count} > 0)'",
    "q = f'max by (deployment) ({both})'",
    "q = f'{age} > ignoring (loop) group_left () {n}'",
    "op = '>= bool on (deployment, sli)'",
    "q = f'{sel} offset 1h'",
    "q = f'{sel}[30d]'",
    "q = f'({total})\\n- ({good})'",
    "q = f'(sum({s}) or vector(0))'",
    "q = f'({a}) / ({b})'",
    "q = '(' + a + ') / (' + b + ')'",
    "q = f'({a}) unless ({b})'",
    "q = f'{a} unless on (deployment) {b}'",
]
NOT_EXPRESSIONS = [
    "binop(a, '/', b)",
    "binop(a, 'and', b, before='\\n', after='\\n')",
    "range_call('rate', sel, '5m')",
    "call('histogram_quantile', 0.99, h)",
    "s = f'({severity}: > {fac}x over {long_w} and {short_w})'",
    "s = f' (time-scaled 1/{n}: {a}/{b})'",
    "s = f'{pct}% of {what} with {name} <= {target}s'",
    "s = f'between {lo} and {hi} (fix: {fix})'",
    "s = 'Health level {{ $value }} (2 alarm/unhealthy, 3 critical)'",
    "s = f'histogram_sum/histogram_count of {family}'",
    "s = 'histogram_quantile over the native histogram'",
    "s = f'budget (1 - objective = {b})'",
    "s = f'messages[{i}] must be an object'",
    "s = f'label_values({sel}, {label})'",
    "s = f'query_result({expr})'",
    "s = f'{tokens / max(seconds, 1e-9):.0f} tokens/s'",
    "s = '0    / 0'",
    "s = ' and '.join(parts)",
    "s = '(e2e latency - time to first token) / (completion tokens - 1)'",
    "s = 'Error-budget burn rate over the window: (1 - SLI) / (1 - objective).'",
    "s = 'a deployment (any role) or (with --all) every deployment'",
    "def f():\n    '''A docstring may show `rate(m[5m]) > 0`.'''",
]


@pytest.mark.parametrize("source", PLANTED_EXPRESSIONS)
def test_the_scan_catches_a_planted_expression(source):
    assert expression_text(source), source


@pytest.mark.parametrize("source", NOT_EXPRESSIONS)
def test_the_scan_leaves_builder_calls_and_prose_alone(source):
    assert not expression_text(source), source


def test_the_guard_fails_on_a_histogram_quantile_or_rate_f_string_planted_in_a_module(tmp_path):
    """The whole guard, over a tree with one module that writes its own PromQL: it fails, naming the lines."""
    (tmp_path / "generate").mkdir()
    (tmp_path / "generate" / "planted.py").write_text(
        "def p99(sel):\n    return f'histogram_quantile(0.99, sum by (le) ({sel}))'\n\n\n"
        "def per_second(sel, w):\n    return f'rate({sel}[{w}])'\n", encoding="utf-8")
    (tmp_path / "promql.py").write_text("def q(sel):\n    return f'rate({sel}[5m])'\n", encoding="utf-8")
    found = scan_expressions(tmp_path)
    assert any(f.startswith("monitor/generate/planted.py:2: function call:") for f in found), found
    assert any(f.startswith("monitor/generate/planted.py:6: function call:") for f in found), found
    assert not any("promql.py" in f for f in found)  # the builder writes it


def test_no_module_but_the_builder_writes_functions_or_operators():
    found = scan_expressions(MONITOR)
    assert not found, ("PromQL functions, aggregations or operators written outside monitor/promql.py; build them "
                       "with monitor.promql (call, range_call, aggregate, binop, chain, paren, offset, number, "
                       "...) instead:\n" + "\n".join(found))


def test_each_not_promql_exemption_still_matches_its_text():
    """An exemption whose text is gone would exempt whatever is written there next."""
    for rel, pieces in NOT_PROMQL.items():
        templates = [t for _, t in _templates(ast.parse((MONITOR / rel).read_text(encoding="utf-8")))]
        for piece in pieces:
            assert any(piece in t and _expression_kinds(t) for t in templates), (rel, piece)


def test_the_exemptions_still_exist():
    for rel in (*BUILDERS, *EXEMPT, *QUOTERS, *NOT_PROMQL):
        assert (MONITOR / rel).is_file(), rel
