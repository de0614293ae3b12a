from __future__ import annotations

import yaml

from monitor.generate.options import Options
from monitor.generate.plan import SLIPlan, plan_slis
from monitor.generate.rules import sli_recordings
from monitor.interop.sloth import render_sloth

WINDOW = "1h"


def test_sloth_specs_are_prometheus_v1_per_deployment(small_config):
    files = render_sloth(small_config)
    assert set(files) == {"sloth/kimi-pd.yaml", "sloth/llama-unified.yaml"}
    spec = yaml.safe_load(files["sloth/llama-unified.yaml"])
    assert spec["version"] == "prometheus/v1" and spec["service"] == "llama-unified"
    assert [s["name"] for s in spec["slos"]] == ["tpot", "itl", "e2e", "availability"]
    assert {s["name"]: s["objective"] for s in spec["slos"]} == {"tpot": 99.9, "itl": 99.9, "e2e": 99.9, "availability": 99.5}
    for s in spec["slos"]:
        assert "{{.window}}" in s["sli"]["events"]["errorQuery"] and "{{.window}}" in s["sli"]["events"]["totalQuery"]
        assert s["alerting"]["pageAlert"]["labels"]["severity"] == "page"
        assert s["alerting"]["ticketAlert"]["labels"]["severity"] == "ticket"
    assert "--default-slo-period=28d" in files["sloth/llama-unified.yaml"].splitlines()[0]


def test_sloth_queries_are_the_generators_good_and_total_for_a_window(small_config):
    """errorQuery/totalQuery at a window == 1 - good/total of the project's sli_good/sli_total rules."""
    opts = Options()
    for dep in small_config.deployments:
        spec = yaml.safe_load(render_sloth(small_config)[f"sloth/{dep.name}.yaml"])
        by_name = {s["name"]: s for s in spec["slos"]}
        for plan in plan_slis(dep, Options(approximate=True)):
            rules = {(r["record"]): r["expr"] for r in sli_recordings(dep, plan, opts)}
            good = rules[f"slo_monitor:sli_good:rate{WINDOW}"]
            total = rules[f"slo_monitor:sli_total:rate{WINDOW}"]
            events = by_name[plan.sli]["sli"]["events"]
            assert events["totalQuery"].replace("{{.window}}", WINDOW) == total
            assert events["errorQuery"].replace("{{.window}}", WINDOW) == f"({total})\n- ({good})"
            assert by_name[plan.sli]["objective"] == round(plan.objective * 100, 6)
            if isinstance(plan, SLIPlan) and not plan.approximate:
                assert f'le="{plan.le}"' in good
