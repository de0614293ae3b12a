"""monitor.feeds: which targets and matchers supply a number, the one definition the sidecar and the
generated PromQL both apply."""

from __future__ import annotations

import ast
from pathlib import Path

from monitor.config import Deployment
from monitor.conventions.slis import COUNTER_ROLES, ENGINE_ROLES, SLI_RECORDS
from monitor.feeds import feed, sli_feed

PD = Deployment(name="d", mode="pd-disaggregated", targets=[
    {"role": "prefill", "url": "http://p:1/metrics"},
    {"role": "decode", "url": "http://a:1/metrics"},
    {"role": "router", "source": "router-engine-metrics", "url": "http://r:1/engine_metrics"},
])


def test_a_request_sli_counts_where_the_request_is_answered():
    f = sli_feed(PD, "tpot")
    assert f.counts("decode") and f.counts("server") and not f.counts("prefill") and not f.counts(None)
    assert [t.role for t in f.direct] == ["decode"] and [t.role for t in f.merged] == ["router"]
    assert ("engine_type", "!=", "prefill") in f.matchers


def test_queue_time_counts_where_the_request_is_admitted():
    f = sli_feed(PD, "queue_time")
    assert f.counts("prefill") and f.counts("server") and not f.counts("decode")
    assert f.matchers[0] == ("role", "=~", "prefill|router") and ("engine_type", "!=", "decode") in f.matchers


def test_workers_scraped_directly_are_left_out_of_the_merge_in_the_sidecar_and_in_promql():
    f = feed(PD, ENGINE_ROLES)
    assert not f.reads_worker("http://a:1") and not f.reads_worker("http://p:1") and f.reads_worker("http://b:2")
    assert f.reads_worker("")  # series without worker_addr: the router's own, read
    assert ("worker_addr", "!~", r"http://a:1|http://p:1") in f.matchers
    assert not any(label == "engine_type" for label, _, _ in f.matchers)  # every engine role counts


def test_without_a_merge_no_worker_matcher_and_without_a_config_only_roles():
    direct = Deployment(name="d", targets=[{"role": "server", "url": "http://s:1/metrics"}])
    assert feed(direct, COUNTER_ROLES["requests_total"]).matchers == (
        ("role", "=~", "server"), ("engine_type", "!=", "prefill"))
    assert feed(None, ("server", "decode")).matchers == (("role", "=~", "decode|server"), ("engine_type", "!=", "prefill"))


def test_a_worker_address_with_regex_characters_is_escaped():
    d = Deployment(name="d", targets=[{"role": "decode", "url": "http://10.0.0.1:30000/metrics"},
                                      {"role": "router", "source": "router-engine-metrics", "url": "http://r:1/engine_metrics"}])
    assert ("worker_addr", "!~", r"http://10\.0\.0\.1:30000") in feed(d, ENGINE_ROLES).matchers


def test_every_sli_record_names_a_target_field_on_the_deployment():
    for sli in SLI_RECORDS:
        assert sli.target_field in Deployment.model_fields
        d = Deployment(name="d", **{sli.target_field: 1.0})
        assert d.slis == [sli.key] and d.target_seconds(sli.key) == 1.0


# --- the label rules live here only --------------------------------------------------------------------
# How a series is told apart inside a router's merged /engine_metrics (`engine_type`, `worker_addr`, which
# engine_type is which role) and the per-SLI role table derived from the records: named only by the modules
# that define them, `feeds.py` (which applies them) and `parse/gateway.py` (which reads the merge). Any other
# module asks `feed(...)` for its matchers or targets.
LABEL_RULES = {"ENGINE_TYPE_LABEL", "ENGINE_TYPE_ROLES", "PREFILL_ENGINE_TYPE", "WORKER_ADDR_LABEL", "SLI_ROLES"}
RULE_OWNERS = {"conventions/names.py", "conventions/slis.py", "feeds.py", "parse/gateway.py"}
MONITOR = Path(__file__).resolve().parents[1] / "monitor"


def names_used(source: str) -> set[str]:
    """Every identifier a module names: loads, attributes and imported names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found.update(a.name for a in node.names)
    return found


def rule_users(root: Path) -> dict[str, set[str]]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        used = names_used(path.read_text()) & LABEL_RULES
        if used and rel not in RULE_OWNERS:
            out[rel] = used
    return out


def test_the_merge_label_rules_are_applied_only_in_feeds():
    assert not rule_users(MONITOR), "apply roles through monitor.feeds.feed, not the label rules themselves"


def test_the_label_rule_check_sees_an_attribute_an_import_and_a_name(tmp_path):
    (tmp_path / "a.py").write_text("from monitor.conventions.slis import ENGINE_TYPE_LABEL\n")
    (tmp_path / "b.py").write_text("from monitor.conventions import slis\nx = slis.SLI_ROLES['ttft']\n")
    (tmp_path / "c.py").write_text("def f(d):\n    return d[WORKER_ADDR_LABEL]\n")
    (tmp_path / "feeds.py").write_text("from monitor.conventions.slis import ENGINE_TYPE_ROLES\n")
    assert set(rule_users(tmp_path)) == {"a.py", "b.py", "c.py"}


# The likelier break: a module writing the label itself, `("engine_type", "!=", "prefill")`, with no constant to
# name. The label names are string constants only in their owners; the emulator's SGLang writes them on its own
# series (it applies no rule) and `inspect` names a JSON field of its report after one.
LABEL_NAMES = {"engine_type", "worker_addr"}
LABEL_EXEMPT = {"emulate/sim.py": "the emulated SGLang labels its series as the real one does",
                "inspect_exposition.py": "a field of inspect's JSON report"}


def label_spellers(root: Path) -> dict[str, int]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in RULE_OWNERS or rel in LABEL_EXEMPT:
            continue
        n = sum(isinstance(node, ast.Constant) and node.value in LABEL_NAMES
                for node in ast.walk(ast.parse(path.read_text())))
        if n:
            out[rel] = n
    return out


def test_no_other_module_writes_the_merge_labels_by_hand():
    assert not label_spellers(MONITOR), "ask monitor.feeds.feed for the matchers"
    for rel in LABEL_EXEMPT:  # an exemption whose module no longer writes a label leaves the list
        assert any(name in (MONITOR / rel).read_text() for name in LABEL_NAMES), rel


def test_the_label_spelling_check_catches_a_planted_matcher(tmp_path):
    (tmp_path / "generate").mkdir()
    (tmp_path / "generate" / "rules.py").write_text('M = ("engine_type", "!=", "prefill")\nN = {"worker_addr": "x"}\n')
    (tmp_path / "feeds.py").write_text('M = ("engine_type", "!=", "prefill")\n')
    (tmp_path / "other.py").write_text('M = ("role", "=", "engine_type is a word in prose")\n')
    assert label_spellers(tmp_path) == {"generate/rules.py": 2}
