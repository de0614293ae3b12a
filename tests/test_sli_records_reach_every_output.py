"""A new SLI is one record (`conventions.slis.SLI_RECORDS`): every output follows from it. A deployment that sets
every record's target gets, for each SLI, its config field, sidecar state, status-table cell, recording rules and
alerts, promtool cases, a dashboard row, an OpenSLO document and a Sloth SLO. An output that lists SLIs by hand
fails here as soon as a record is added."""

from __future__ import annotations

import json

import pytest
import yaml

from monitor.commands.status import render_table
from monitor.config import parse_config
from monitor.conventions.slis import SLI_RECORDS
from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.interop.openslo import render_openslo
from monitor.interop.sloth import render_sloth
from monitor.sidecar import Sidecar

# Each SLI's target on one of its default edges (exact on both sides).
CONFIG = parse_config({"deployments": [{
    "name": "every-sli", "mode": "pd-disaggregated",
    **{s.target_field: s.buckets[len(s.buckets) // 2] for s in SLI_RECORDS},
    "targets": [{"role": "prefill", "url": "http://10.0.0.1:30000/metrics"},
                {"role": "decode", "url": "http://10.0.0.2:30000/metrics"}],
}]})
KEYS = [s.key for s in SLI_RECORDS]


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return generate(CONFIG, Options(config_name="reach"))


def test_the_config_has_every_sli():
    assert CONFIG.deployments[0].slis == KEYS


def test_the_sidecar_state_and_the_status_table_show_every_sli():
    status = Sidecar(CONFIG).status()
    assert [s.sli for s in status.deployments[0].slis] == KEYS
    table = render_table(status, color=False)
    for sli in SLI_RECORDS:
        assert sli.title.split()[0] in table, sli.key


def test_rules_alerts_and_promtool_cases_cover_every_sli(files):
    rules = yaml.safe_load(files["alerts/rules/every-sli.rules.yml"])
    recorded = {r["labels"]["sli"] for g in rules["groups"] for r in g["rules"] if "record" in r and "sli" in r.get("labels", {})}
    assert set(KEYS) <= recorded
    tests = yaml.safe_load(files["alerts/tests/every-sli.test.yml"])
    named = " ".join(t["name"] for t in tests["tests"])
    assert all(f"{s.title}" in named or s.key in named for s in SLI_RECORDS), named[:400]


def test_the_deployment_dashboard_has_a_row_per_sli(files):
    dash = json.loads(files["dashboards/sglang-deployment.json"])
    titles = [p["title"] for p in dash["panels"] if p.get("type") == "row"]
    for sli in SLI_RECORDS:
        assert f"{sli.title} ({sli.long_name})" in titles


def test_openslo_and_sloth_export_every_sli():
    openslo = [d for text in render_openslo(CONFIG).values() for d in yaml.safe_load_all(text)]
    assert {d["metadata"]["labels"]["sli"] for d in openslo} == set(KEYS)
    sloth = [yaml.safe_load(text) for text in render_sloth(CONFIG).values()]
    names = {slo["name"] for spec in sloth for slo in spec["slos"]}
    assert all(any(k.replace("_", "-") in n or k in n for n in names) for k in KEYS), names
