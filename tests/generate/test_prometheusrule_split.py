"""deploy/kubernetes/prometheusrule.yaml at fleet scale: Kubernetes refuses objects over ~1.5 MiB, so the rule
groups are spread over PrometheusRule objects of under 1 MiB each, every group whole and in exactly one."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.config import parse_config
from monitor.escaping import yaml_item_text
from monitor.generate.kubernetes import MAX_OBJECT_BYTES, RULE_NAME, pack, prometheus_rules
from monitor.generate.options import Options
from monitor.generate.rules import slo_groups
from monitor.generate.symptoms import symptom_groups
from monitor.slo_plan import plan_slis

MINIMAL = Path(__file__).resolve().parents[2] / "examples" / "minimal.yaml"
FLEET = 500
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # an 18 MB stream: pure-Python YAML takes a minute
DOCUMENT_START = re.compile(r"^---\n", re.MULTILINE)  # every other line of an object is indented or a key
GROUP_NAME = re.compile(r"^  - name: (.+)$", re.MULTILINE)  # items of spec.groups; rules sit deeper
OBJECT_NAME = re.compile(r"^  name: (.+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def fleet() -> tuple[list[dict[str, Any]], str]:
    """The rule groups of 500 deployments (examples/minimal.yaml's first, renamed) and their PrometheusRule
    text, as `generate` builds them."""
    dep = yaml.safe_load(MINIMAL.read_text())["deployments"][0]
    config = parse_config({"deployments": [{**dep, "name": f"fleet-{i:03d}"} for i in range(FLEET)]})
    opts = Options()
    groups = [g for d in config.deployments
              for g in slo_groups(d, plan_slis(d, opts.approximate), opts) + symptom_groups(d, opts)]
    return [g.data() for g in groups], prometheus_rules([g.item_text() for g in groups], opts)


def _documents(text: str) -> list[str]:
    return DOCUMENT_START.split(text)


def test_500_deployments_give_several_objects_each_under_1_mib(fleet):
    _, text = fleet
    docs = _documents(text)
    assert len(text.encode()) > 8 * MAX_OBJECT_BYTES  # one object of this would be refused
    assert len(docs) >= 8
    assert max(len(doc.encode()) for doc in docs) < MAX_OBJECT_BYTES


def test_500_deployments_objects_hold_every_group_once_in_order_with_numbered_names(fleet):
    groups, text = fleet
    docs = _documents(text)
    assert [n for doc in docs for n in GROUP_NAME.findall(doc)] == [g["name"] for g in groups]
    assert [OBJECT_NAME.search(doc).group(1) for doc in docs] == (
        [RULE_NAME] + [f"{RULE_NAME}-{i}" for i in range(2, len(docs) + 1)])


def test_500_deployments_first_and_last_objects_read_back_as_their_groups(fleet):
    groups, text = fleet
    docs = _documents(text)
    first, last = yaml.load(docs[0], Loader=_Loader), yaml.load(docs[-1], Loader=_Loader)
    assert first["kind"] == last["kind"] == "PrometheusRule"
    assert last["metadata"] == {**first["metadata"], "name": f"{RULE_NAME}-{len(docs)}"}
    assert first["spec"]["groups"] == groups[:len(first["spec"]["groups"])]
    assert last["spec"]["groups"] == groups[-len(last["spec"]["groups"]):]
    # What the API server stores (JSON) is smaller than the YAML measured against the bound.
    assert len(json.dumps(first, separators=(",", ":")).encode()) < len(docs[0].encode())


def _group(i: int, rules: int) -> dict[str, Any]:
    return {"name": f"g{i}", "rules": [{"record": f"r{i}_{j}", "expr": f'sum(rate(x{{a="{i}"}}[5m]))\nby (b)',
                                        "labels": {"note": "ü —"}} for j in range(rules)]}


@pytest.mark.parametrize("limit", [1_500, 3_000, 10**6])
def test_the_objects_read_back_as_the_groups_whatever_the_bound(limit):
    groups = [_group(i, rules) for i, rules in enumerate([1, 5, 2, 9, 1, 1, 4, 3])]
    text = prometheus_rules([yaml_item_text(g) for g in groups], Options(namespace="obs"), limit=limit)
    objects = list(yaml.safe_load_all(text))
    assert [g for o in objects for g in o["spec"]["groups"]] == groups
    assert all(o["metadata"]["namespace"] == "obs" for o in objects)
    assert all(len(doc.encode()) < limit for doc in _documents(text))
    assert (len(objects) == 1) == (limit == 10**6)


def test_one_object_keeps_the_unnumbered_name_so_a_growing_fleet_updates_it_in_place():
    text = prometheus_rules([yaml_item_text(_group(0, 1))], Options())
    assert [o["metadata"]["name"] for o in yaml.safe_load_all(text)] == [RULE_NAME]


def test_pack_fills_runs_in_order_and_gives_an_oversized_item_its_own(caplog):
    assert pack([4, 4, 2, 5, 1], budget=10) == [[0, 1, 2], [3, 4]]
    assert pack([3, 12, 3], budget=10) == [[0], [1], [2]]
    assert "a rule group of 12 bytes cannot fit" in caplog.text
    assert pack([], budget=10) == [[]]
