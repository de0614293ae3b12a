"""Prometheus's rule file format as typed objects: every generator builds these, and this module is the one
place they become YAML (a group's text is shared by its rules file and the PrometheusRule objects).

Field names and order are the rule file's (https://prometheus.io/docs/prometheus/latest/configuration/
recording_rules/): a recording rule is `record`, `expr`, `labels`; an alerting rule `alert`, `expr`, `for`,
`labels`, `annotations`; a group `name`, `rules`. Labels and annotations keep the order the builder gives them.
An `expr` is the text `monitor.promql` built.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from monitor.escaping import yaml_item_text, yaml_text

# What promtool's rule-file check refuses, refused when a rule is built instead.
MetricName = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")]
LabelName = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")]
Duration = Annotated[str, StringConstraints(pattern=r"^(?:[0-9]+(?:ms|[smhdwy]))+$")]
Expression = Annotated[str, StringConstraints(min_length=1)]


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RecordingRule(_Rule):
    record: MetricName
    expr: Expression
    labels: dict[LabelName, str] = Field(default_factory=dict)

    def data(self) -> dict[str, object]:
        """The rule as the rule file writes it (`labels` always, even when empty)."""
        return {"record": self.record, "expr": self.expr, "labels": self.labels}


class AlertingRule(_Rule):
    alert: MetricName
    expr: Expression
    for_: Duration | None = Field(default=None, alias="for")
    labels: dict[LabelName, str] = Field(default_factory=dict)
    annotations: dict[LabelName, str] = Field(default_factory=dict)

    def data(self) -> dict[str, object]:
        """The rule as the rule file writes it (no `for` when it fires at once)."""
        out: dict[str, object] = {"alert": self.alert, "expr": self.expr}
        if self.for_:
            out["for"] = self.for_
        out["labels"] = self.labels
        out["annotations"] = self.annotations
        return out


Rule = RecordingRule | AlertingRule


class RuleGroup(_Rule):
    name: Annotated[str, StringConstraints(min_length=1)]
    rules: list[Rule]

    @property
    def recordings(self) -> list[RecordingRule]:
        return [r for r in self.rules if isinstance(r, RecordingRule)]

    @property
    def alerts(self) -> list[AlertingRule]:
        return [r for r in self.rules if isinstance(r, AlertingRule)]

    def data(self) -> dict[str, object]:
        return {"name": self.name, "rules": [r.data() for r in self.rules]}

    def item_text(self) -> str:
        """The group as an entry (`- name: ...`) of a `groups:` list: what a rules file and a PrometheusRule's
        `spec.groups` are made of."""
        return yaml_item_text(self.data())


class RuleFile(_Rule):
    groups: list[RuleGroup]

    def data(self) -> dict[str, object]:
        return {"groups": [g.data() for g in self.groups]}

    def text(self) -> str:
        return yaml_text(self.data())


def groups_text(group_texts: list[str]) -> str:
    """A rule file's body from its groups' `item_text`s: byte for byte `RuleFile(groups=...).text()`."""
    return "groups:\n" + "".join(group_texts) if group_texts else "groups: []\n"


def all_rules(groups: list[RuleGroup]) -> list[Rule]:
    return [r for g in groups for r in g.rules]
