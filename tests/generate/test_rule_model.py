"""The typed rule objects (monitor/generate/rule_model.py): Prometheus's rule file format, serialised in one place.
Every committed rules file reads back into them and writes out byte for byte; what promtool would refuse in a
rule is refused when the rule is built."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from monitor.config import load_config
from monitor.generate.options import Options
from monitor.generate.rule_model import AlertingRule, RecordingRule, RuleFile, RuleGroup, groups_text
from monitor.generate.rules import slo_groups
from monitor.generate.symptoms import symptom_groups
from monitor.promql import binop, select
from monitor.slo_plan import plan_slis
from tests.generate.conftest import SMALL

ROOT = Path(__file__).resolve().parents[2]
COMMITTED_RULES = sorted((ROOT / "alerts" / "rules").glob("*.rules.yml"))


def _body(text: str) -> str:
    """A generated rules file without its header comments."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def test_every_committed_rules_file_reads_back_into_the_models_and_writes_out_unchanged():
    assert COMMITTED_RULES
    for path in COMMITTED_RULES:
        text = path.read_text(encoding="utf-8")
        parsed = RuleFile.model_validate(yaml.safe_load(text))
        assert parsed.text() == _body(text), path.name
        assert parsed.groups and all(g.rules for g in parsed.groups), path.name


def test_the_rules_are_typed_in_the_rule_files_field_order():
    rec = RecordingRule(record="a:b:rate5m", expr=select("m"), labels={"sli": "tpot"})
    assert list(rec.data()) == ["record", "expr", "labels"] and type(rec.expr) is str
    assert RecordingRule(record="r", expr=select("m")).data() == {"record": "r", "expr": "m", "labels": {}}
    fires = AlertingRule(alert="A", expr=binop(select("m"), ">", 0), for_="5m", labels={"severity": "page"},
                         annotations={"summary": "s"})
    assert list(fires.data()) == ["alert", "expr", "for", "labels", "annotations"]
    at_once = AlertingRule.model_validate({"alert": "A", "expr": "m > 0", "labels": {}, "annotations": {}})
    assert "for" not in at_once.data() and at_once.for_ is None
    assert AlertingRule.model_validate({"alert": "A", "expr": "m > 0", "for": "1m"}).for_ == "1m"  # the file's key


@pytest.mark.parametrize("bad", [
    {"record": "not a name", "expr": "m"},
    {"record": "r", "expr": ""},
    {"record": "r", "expr": "m", "labels": {"bad-label": "x"}},
    {"record": "r", "expr": "m", "keep_firing_for": "5m"},  # not a field of a recording rule
])
def test_a_recording_rule_promtool_would_refuse_is_refused(bad):
    with pytest.raises(ValidationError):
        RecordingRule.model_validate(bad)


@pytest.mark.parametrize("bad", [
    {"alert": "A", "expr": "m", "for": "5 minutes"},
    {"alert": "A b", "expr": "m"},
    {"alert": "A", "expr": "m", "annotations": {"run-book": "x"}},
])
def test_an_alerting_rule_promtool_would_refuse_is_refused(bad):
    with pytest.raises(ValidationError):
        AlertingRule.model_validate(bad)


def test_a_group_is_serialised_once_and_a_rule_file_is_its_groups_texts():
    config = load_config(SMALL)
    opts = Options()
    groups = [g for d in config.deployments for g in slo_groups(d, plan_slis(d), opts) + symptom_groups(d, opts)]
    assert all(isinstance(g, RuleGroup) for g in groups)
    assert RuleFile(groups=groups).text() == groups_text([g.item_text() for g in groups])
    assert RuleFile(groups=[]).text() == groups_text([]) == "groups: []\n"
    every = [r for g in groups for r in g.rules]
    assert {type(r) for r in every} == {RecordingRule, AlertingRule}
    assert all(g.rules == [*g.recordings, *g.alerts] for g in groups)  # recordings first: alerts read them
