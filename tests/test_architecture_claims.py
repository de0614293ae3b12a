"""Guards for the claims of docs/architecture.md ("Where facts live") that no other test holds, each with a
self-check that plants the most likely violation (in a copy of the source, or on a synthetic input) and must
see the guard fail, as tests/test_architecture.py does for the layering.

Each scan is a function of a package directory, so that its self-check runs it on a copy with one planted
line. A hit the scan cannot avoid is an exemption, with why; each exemption must still match, so one that is
fixed leaves the list.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from monitor.config import Gateway, Role, Source, Target
from monitor.conventions.names import (
    AVAILABILITY_SERIES,
    CLIENT_CLOSED_SERIES,
    GATEWAYS,
    LATENCY_FAMILIES,
    SOURCES,
    URL_SOURCES,
)
from monitor.conventions.policy import (
    ACCEL_MEMORY_RATIO,
    ACCEL_TEMPERATURE_CELSIUS,
    BURN_RATE_ALERTS,
    KV_FULL_RATIO,
    REGRESSION_FACTOR,
)

MONITOR = Path(__file__).resolve().parents[1] / "monitor"


def trees(root: Path) -> Iterator[tuple[str, ast.AST]]:
    """(path relative to the package, parsed module) of every module of the package in `root`."""
    for path in sorted(root.rglob("*.py")):
        yield path.relative_to(root).as_posix(), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def planted(tmp_path: Path, rel: str, old: str, new: str) -> Path:
    """A copy of the package with one edit in module `rel` (`old` must be there): a maintainer's mistake."""
    root = tmp_path / "monitor"
    shutil.copytree(MONITOR, root, ignore=shutil.ignore_patterns("__pycache__"))
    path = root / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{rel} no longer has {old!r}: update the self-check"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return root


def added(tmp_path: Path, rel: str, line: str) -> Path:
    """A copy of the package with `line` appended to module `rel`."""
    root = tmp_path / "monitor"
    shutil.copytree(MONITOR, root, ignore=shutil.ignore_patterns("__pycache__"))
    path = root / rel
    path.write_text(path.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")
    return root


def exempted(found: list[tuple[str, str]], exemptions: dict[tuple[str, str], str]) -> list[str]:
    """The hits (module, what) no exemption covers."""
    return [f"{rel}: {what}" for rel, what in found if (rel, what) not in exemptions]


def stale(found: list[tuple[str, str]], exemptions: dict[tuple[str, str], str]) -> list[tuple[str, str]]:
    return [key for key in exemptions if key not in found]


def strings(tree: ast.AST) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node


# --- One record per SLI: its family is spelled in conventions/names.py only -------------------------------
# The likely break: a module writing `"sglang:time_to_first_token_seconds_bucket"` (or the underscore spelling
# the router's /engine_metrics uses) instead of taking the family from the record. Prose (text with spaces,
# e.g. a panel description) may name a family.
_BASES = sorted(f.split(":", 1)[1] for f in LATENCY_FAMILIES)
FAMILY_TEXT = re.compile(r"(?<![\w:])sglang[:_](?:" + "|".join(map(re.escape, _BASES))
                         + r")(?:_bucket|_sum|_count)?(?![\w:])")
FAMILY_OWNERS = {"conventions/names.py"}


def family_spellings(root: Path) -> list[tuple[str, str]]:
    return [(rel, node.value) for rel, tree in trees(root) if rel not in FAMILY_OWNERS for node in strings(tree)
            if not re.search(r"\s", node.value) and FAMILY_TEXT.search(node.value)]


def test_no_module_but_names_spells_an_sli_family():
    found = family_spellings(MONITOR)
    assert not found, f"take the family from the SLI record (conventions.slis), not by hand: {found}"


def test_the_family_scan_catches_a_planted_family_and_f_string(tmp_path):
    root = added(tmp_path, "generate/rules.py", 'HAND = "sglang:time_to_first_token_seconds_bucket"\n'
                 'SEL = f"sglang_e2e_request_latency_seconds_sum{{role={HAND}}}"\n'
                 'NOTE = "SGLang\'s sglang:queue_time_seconds, in prose"')
    assert [v for _, v in family_spellings(root)] == ["sglang:time_to_first_token_seconds_bucket",
                                                      "sglang_e2e_request_latency_seconds_sum{role="]


# --- The sidecar and the generated rules compute the same SLI ---------------------------------------------
# The likely break: one side stops applying the feed (here the rules count the PD decode server's queue, whose
# wait is the KV transfer's, instead of the prefill server's). The agreement test must then fail.


def test_the_agreement_test_fails_when_the_rules_side_counts_another_role(tmp_path, prometheus_build, monkeypatch):
    import monitor.slo_plan
    from monitor.conventions.slis import SLI_BY_KEY
    from tests.generate.test_rules_agree_with_sidecar import (
        test_pd_sli_events_ratios_and_means_agree_between_sidecar_and_generated_rules as agreement,
    )

    real = monitor.slo_plan.feed
    queue_roles = SLI_BY_KEY["queue_time"].roles

    def wrong_feed(dep, roles, *args, **kwargs):
        return real(dep, ("decode",) if tuple(roles) == tuple(queue_roles) else roles, *args, **kwargs)

    monkeypatch.setattr(monitor.slo_plan, "feed", wrong_feed)
    with pytest.raises(AssertionError, match="queue_time"):
        agreement(tmp_path, prometheus_build)


# --- Policy: burn-rate factors and symptom thresholds are not written again in a generator ---------------------
# The likely break: a generator writing `14.4` or `0.95` instead of importing the policy's name. Windows are
# exempt by the claim ("apart from names": a rule's name carries its window, e.g. `5m`).
THRESHOLDS = {f for _, _, _, f in BURN_RATE_ALERTS if f > 1} | {KV_FULL_RATIO, REGRESSION_FACTOR,
                                                                  ACCEL_MEMORY_RATIO, ACCEL_TEMPERATURE_CELSIUS}
GENERATORS = ("generate/", "interop/", "slo_plan.py", "promql.py")
THRESHOLD_EXEMPTIONS = {
    ("generate/dashboards/deployment.py", "0.95"):
        "left: the KV-cache panel's red line is KV_FULL_RATIO written again (that module's owner: use the name)",
    ("generate/promtool_tests.py", "1.5"): "a test case's load 1.5x slower than the target, not REGRESSION_FACTOR",
}


def threshold_spellings(root: Path) -> list[tuple[str, str]]:
    return [(rel, repr(node.value)) for rel, tree in trees(root) if rel.startswith(GENERATORS)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and type(node.value) is float and node.value in THRESHOLDS]


def test_no_generator_writes_a_policy_threshold_again():
    found = threshold_spellings(MONITOR)
    assert not exempted(found, THRESHOLD_EXEMPTIONS), "import the threshold from conventions.policy"
    assert not stale(found, THRESHOLD_EXEMPTIONS), "an exemption no longer matches: remove it"


def test_the_threshold_scan_catches_a_planted_burn_rate_factor(tmp_path):
    root = added(tmp_path, "generate/rules.py", "PAGE = 14.4\nKV = 0.95")
    assert exempted(threshold_spellings(root), THRESHOLD_EXEMPTIONS) == ["generate/rules.py: 14.4",
                                                                         "generate/rules.py: 0.95"]


# `le` values are spelled by conventions.units.format_le (prometheus_client's text, `1.0` not `1`): the likely
# break is an `le` matcher or label written with str(), repr(), format() or an f-string.
LE_OWNERS = {"conventions/units.py"}


def _hand_formatted(value: ast.AST) -> bool:
    return isinstance(value, ast.JoinedStr) or (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in {"str", "repr", "format"}
    ) or (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod))


def le_spellings(root: Path) -> list[tuple[str, str]]:
    found = []
    for rel, tree in trees(root):
        if rel in LE_OWNERS:
            continue
        for node in ast.walk(tree):
            values: list[ast.AST] = []
            if isinstance(node, ast.Dict):
                values = [v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "le"]
            elif isinstance(node, ast.Tuple | ast.Call):
                items = node.elts if isinstance(node, ast.Tuple) else node.args
                if len(items) == 3 and isinstance(items[0], ast.Constant) and items[0].value == "le":
                    values = [items[2]]
                if isinstance(node, ast.Call):
                    values += [kw.value for kw in node.keywords if kw.arg == "le"]
            found += [(rel, ast.unparse(v)) for v in values if _hand_formatted(v)]
    return found


def test_every_le_value_is_spelled_by_format_le():
    assert not le_spellings(MONITOR), "write `le` values with conventions.units.format_le"


def test_the_le_scan_catches_a_planted_str_and_f_string(tmp_path):
    root = added(tmp_path, "slo_plan.py", 'A = {"le": str(1)}\nB = ("le", "=", f"{2}")\nC = {"le": format_le(1.0)}')
    assert le_spellings(root) == [("slo_plan.py", "str(1)"), ("slo_plan.py", "f'{2}'")]


# --- One list of sources and of gateway versions ----------------------------------------------------------------
# The likely break: a hand-written `Literal[...]` of sources or gateways in config.py (one missing `nvml` passed
# the cited tests before), or a module keeping its own list of sources (config.py's sources that need a URL
# did). A list of sources is two or more of them that are not also role names (`router` and `request-log` are
# both); a gateway version is never spelled outside conventions/names.py.
ROLE_NAMES = set(get_args(Role))
SOURCE_ONLY = set(SOURCES) - ROLE_NAMES
SOURCE_OWNERS = {"conventions/names.py"}
SOURCE_EXEMPTIONS = {
    ("slo_plan.py", "('sglang', 'router', 'router-engine-metrics', 'npu-exporter', 'dcgm')"):
        "left: SCRAPED_SOURCES is conventions.names.URL_SOURCES written again (held equal below)",
    ("scrape/loop.py", "('sglang', 'router-engine-metrics')"):
        "left: the sources whose page is an SGLang exposition, not yet a conventions name",
}


def source_lists(root: Path) -> list[tuple[str, str]]:
    found = []
    for rel, tree in trees(root):
        if rel in SOURCE_OWNERS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                if sum(isinstance(e, ast.Constant) and e.value in SOURCE_ONLY for e in node.elts) >= 2:
                    found.append((rel, ast.unparse(node)))
            elif isinstance(node, ast.Constant) and node.value in GATEWAYS:
                found.append((rel, repr(node.value)))
    return found


def test_the_config_accepts_exactly_the_conventions_sources_and_gateways():
    assert get_args(Source) == SOURCES and get_args(Gateway) == GATEWAYS


@pytest.mark.parametrize("source", SOURCES)
def test_a_source_needs_a_url_exactly_when_conventions_say_so(source):
    with pytest.raises(ValueError) as err:  # no url, path or role that fits: refused, for the url or another reason
        Target(role="server", source=source, path="" if source == "request-log" else None,
               npu_smi_details_interval_seconds=1.0)
    assert ("needs `url`" in str(err.value)) == (source in URL_SOURCES), str(err.value)


def test_no_module_keeps_its_own_list_of_sources_or_spells_a_gateway():
    import monitor.slo_plan

    found = source_lists(MONITOR)
    assert not exempted(found, SOURCE_EXEMPTIONS), "take the list from conventions.names (SOURCES, URL_SOURCES, ...)"
    assert not stale(found, SOURCE_EXEMPTIONS), "an exemption no longer matches: remove it"
    assert monitor.slo_plan.SCRAPED_SOURCES == URL_SOURCES


@pytest.mark.parametrize(("old", "new"), [
    ("Literal[SOURCES]", 'Literal["sglang", "router", "router-engine-metrics", "npu-smi", "npu-exporter", "dcgm", '
                         '"request-log"]'),  # nvml missing
    ("Literal[GATEWAYS]", 'Literal["smg-1.13", "sglang-router-0.3.2"]'),
    ("self.source in URL_SOURCES", 'self.source in ("sglang", "router", "router-engine-metrics", "dcgm")'),
], ids=["sources-literal-without-nvml", "gateways-literal", "url-sources-by-hand"])
def test_the_source_scan_catches_a_hand_written_literal_or_list_in_config(tmp_path, old, new):
    assert exempted(source_lists(planted(tmp_path, "config.py", old, new)), SOURCE_EXEMPTIONS)


# --- What the gateway counts is conventions.AVAILABILITY_SERIES, read by the sidecar and by PromQL ---------------
# The likely break: the sidecar's reader (parse/gateway.py) or a rule generator writing its own matcher on one of
# the labels the availability series match (`("status_code", "=~", "5..")`) instead of reading the table.
AVAILABILITY_LABELS = {label for spec in AVAILABILITY_SERIES.values() for s in (spec.total, *spec.bad)
                       for label, _, _ in s.matchers}
AVAILABILITY_LABELS |= {label for s in CLIENT_CLOSED_SERIES.values() if s for label, _, _ in s.matchers}
OPS = {"=", "!=", "=~", "!~"}
AVAILABILITY_OWNERS = {"conventions/names.py"}
AVAILABILITY_EXEMPTIONS = {
    ("generate/dashboards/incident.py", "('status_code', '=~', '5..')"):
        "the incident dashboard's 'router 5xx/s' panel: a diagnosis, not what the availability SLI counts",
    ("generate/dashboards/gateway.py", "('path', '!~', GATEWAY_OWN_PATHS)"):
        "left: the gateway dashboard's serving-path matcher, AVAILABILITY_SERIES[smg].total's written again",
}


def availability_matchers(root: Path) -> list[tuple[str, str]]:
    return [(rel, ast.unparse(node)) for rel, tree in trees(root) if rel not in AVAILABILITY_OWNERS
            for node in ast.walk(tree)
            if isinstance(node, ast.Tuple) and len(node.elts) == 3
            and all(isinstance(e, ast.Constant) for e in node.elts[:2])
            and node.elts[0].value in AVAILABILITY_LABELS and node.elts[1].value in OPS]  # type: ignore[attr-defined]


def test_no_module_writes_its_own_availability_matcher():
    found = availability_matchers(MONITOR)
    assert not exempted(found, AVAILABILITY_EXEMPTIONS), "read conventions.AVAILABILITY_SERIES / CLIENT_CLOSED_SERIES"
    assert not stale(found, AVAILABILITY_EXEMPTIONS), "an exemption no longer matches: remove it"


def test_the_availability_scan_catches_a_planted_matcher_in_the_sidecar_s_reader(tmp_path):
    root = added(tmp_path, "parse/gateway.py", 'BAD = ("status_code", "=~", "5..")\nOK = ("model", "=", "x")')
    assert exempted(availability_matchers(root), AVAILABILITY_EXEMPTIONS) == [
        "parse/gateway.py: ('status_code', '=~', '5..')"]


# --- A config value inside another language is escaped by escaping.py -------------------------------------------
# The likely break: a generator escaping by hand: `.replace('"', '\\"')`, `.replace("{{", ...)`, `re.escape` for a
# PromQL regex, its own `yaml.dump` / `json.dumps`. (A value quoted by an f-string is
# tests/test_promql_everywhere.py's `test_only_the_builder_quotes_promql_values`.)
ESCAPERS = ("generate/", "interop/", "slo_plan.py", "promql.py", "feeds.py")
ESCAPE_CALLS = {"escape", "dump", "safe_dump", "dumps"}
ESCAPE_EXEMPTIONS = {
    ("feeds.py", "re.escape(w)"): "left: the worker addresses' regex body; the builder quotes the matcher with "
                                  "escaping.promql_string (escaping.py has no unquoted regex-body function yet)",
    ("generate/dashboards/common.py", "json.dumps(data, cls=DashboardEncoder, sort_keys=True)"):
        "the grafanalib model turned into plain data (json.loads of it at once), not text written out",
    ("interop/openslo.py", "re.escape(base)"): "a Python pattern that reads a query, not text written out",
    ("interop/openslo.py", "json.dumps(_carried(dep), sort_keys=True)"):
        "left: compact JSON of the deployment in an annotation (yaml_text escapes it into the file)",
    ("generate/promtool_tests.py", "m.group(2).replace('{{ . }}', labels[m.group(1)])"):
        "renders an annotation as Prometheus would, for the expected alert (the reverse of template_literal)",
    ("generate/promtool_tests.py", 'text.replace(\'{{ "{{" }}\', \'{{\')'): "the same rendering",
}


def hand_escapes(root: Path) -> list[tuple[str, str]]:
    found = []
    for rel, tree in trees(root):
        if not rel.startswith(ESCAPERS):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name = node.func.attr
            first = node.args[0] if node.args else None
            replaces_quoting = name == "replace" and isinstance(first, ast.Constant) and isinstance(
                first.value, str) and any(c in first.value for c in ('"', "\\", "{{", "}}"))
            escapes = name in ESCAPE_CALLS and isinstance(node.func.value, ast.Name) and node.func.value.id in {
                "re", "yaml", "json"}
            if replaces_quoting or escapes:
                found.append((rel, ast.unparse(node)))
    return found


def test_no_generator_escapes_a_value_by_hand():
    found = hand_escapes(MONITOR)
    assert not exempted(found, ESCAPE_EXEMPTIONS), "escape through monitor.escaping"
    assert not stale(found, ESCAPE_EXEMPTIONS), "an exemption no longer matches: remove it"


def test_the_escape_scan_catches_planted_hand_escapes(tmp_path):
    root = added(tmp_path, "generate/rules.py", "def q(v):\n    return v.replace('\"', '\\\\\"')\n"
                 "def t(v):\n    return v.replace('{{', '')\n"
                 "def r(v):\n    return re.escape(v)\n"
                 "def y(v):\n    return yaml.safe_dump(v)\n"
                 "def fine(v):\n    return v.replace('-', '_')")
    assert [what for rel, what in exempted_hits(hand_escapes(root))] == [
        "v.replace('\"', '\\\\\"')", "v.replace('{{', '')", "re.escape(v)", "yaml.safe_dump(v)"]


def exempted_hits(found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [hit for hit in found if hit not in ESCAPE_EXEMPTIONS]


# --- The emulator's split changed no random draw ---------------------------------------------------------------
# The likely break: a refactor that draws once more (or in another order) from the engine's generator. The
# pinned digests must then differ.


def test_the_engine_digest_changes_when_a_random_draw_is_added(tmp_path, monkeypatch):
    from monitor.emulate.engine import EmulatedDeployment
    from tests.emulate.test_engine_digest import DIGESTS, run

    init = EmulatedDeployment.__init__

    def one_more_draw(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.rng.random()

    monkeypatch.setattr(EmulatedDeployment, "__init__", one_more_draw)
    assert run("mixed", tmp_path) != DIGESTS["mixed"]
