from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from monitor.generate.options import Options
from monitor.generate.rules import sli_recordings
from monitor.interop.sloth import render_sloth
from monitor.slo_plan import SLIPlan, plan_slis
from tests.components import PROMETHEUS_3, SLOTH

WINDOW = "1h"


def test_sloth_specs_are_prometheus_v1_per_deployment(small_config):
    files = render_sloth(small_config)
    assert set(files) == {"sloth/kimi-pd.yaml", "sloth/llama-unified.yaml"}
    spec = yaml.safe_load(files["sloth/llama-unified.yaml"])
    assert spec["version"] == "prometheus/v1" and spec["service"] == "llama-unified"
    assert [s["name"] for s in spec["slos"]] == ["tpot", "itl", "e2e", "availability"]
    assert {s["name"]: s["objective"] for s in spec["slos"]} == {"tpot": 99.9, "itl": 99.9, "e2e": 99.9, "availability": 99.5}
    for s in spec["slos"]:
        assert "{{.window}}" in s["sli"]["events"]["error_query"] and "{{.window}}" in s["sli"]["events"]["total_query"]
        assert s["alerting"]["page_alert"]["labels"]["severity"] == "page"
        assert s["alerting"]["ticket_alert"]["labels"]["severity"] == "ticket"
    assert "--default-slo-period=28d" in files["sloth/llama-unified.yaml"].splitlines()[0]


def test_sloth_queries_are_the_generators_good_and_total_for_a_window(small_config):
    """error_query/total_query at a window == 1 - good/total of the project's sli_good/sli_total rules."""
    opts = Options()
    for dep in small_config.deployments:
        spec = yaml.safe_load(render_sloth(small_config)[f"sloth/{dep.name}.yaml"])
        by_name = {s["name"]: s for s in spec["slos"]}
        for plan in plan_slis(dep, approximate=True):
            rules = {r.record: r.expr for r in sli_recordings(dep, plan, opts)}
            good = rules[f"slo_monitor:sli_good:rate{WINDOW}"]
            total = rules[f"slo_monitor:sli_total:rate{WINDOW}"]
            events = by_name[plan.sli]["sli"]["events"]
            assert events["total_query"].replace("{{.window}}", WINDOW) == total
            assert events["error_query"].replace("{{.window}}", WINDOW) == f"({total})\n- ({good})"
            assert by_name[plan.sli]["objective"] == round(plan.objective * 100, 6)
            if isinstance(plan, SLIPlan) and not plan.approximate:
                assert f'le="{plan.le}"' in good


def test_the_real_sloth_turns_every_spec_into_rules_promtool_accepts_with_our_labels_and_factors(small_config,
                                                                                                 tmp_path: Path):
    """Sloth 0.16 reads `prometheus/v1` specs by their snake_case keys (`error_query`, `page_alert`): a camelCase key
    (the Kubernetes CRD's spelling) is silently empty there, and Sloth refuses the SLO ("both error and total queries
    can't be the same")."""
    if not SLOTH.exists():
        pytest.fail(f"{SLOTH} is missing (make go-tools)")
    promtool = PROMETHEUS_3.require().tool
    for rel, text in render_sloth(small_config).items():
        spec = tmp_path / rel
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(text)
        period = small_config.deployment(spec.stem).period
        assert f"--default-slo-period={period}" in text.splitlines()[0]
        out = tmp_path / f"{spec.stem}.rules.yml"
        res = subprocess.run([str(SLOTH), "generate", "--no-log", "-i", str(spec), "-o", str(out),
                              f"--default-slo-period={period}"], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr[-2000:]
        check = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
        groups = yaml.safe_load(out.read_text())["groups"]
        alerts = [r for g in groups for r in g["rules"] if "alert" in r]
        spec_slos = yaml.safe_load(text)["slos"]
        assert {a["labels"]["severity"] for a in alerts} == {"page", "ticket"}
        assert len(alerts) == 2 * len(spec_slos)
        assert all(a["labels"]["deployment"] == spec.stem for a in alerts)
        # 28d: the workbook's 30d factors times 28/30, as our burn_factor (14.4 -> 13.44).
        page = next(a["expr"] for a in alerts if a["labels"]["severity"] == "page")
        assert ("13.44 *" if period == "28d" else "14.4 *") in page


def test_the_built_sloth_says_the_version_it_was_built_from():
    """As Sloth's own release build does (#34 item 17): a `dev` would hide which Sloth the comparison ran."""
    if not SLOTH.exists():
        pytest.fail(f"{SLOTH} is missing (make go-tools)")
    pinned = re.search(r"^SLOTH_MODULE=(\S+)", (Path(__file__).parents[2] / "tools" / "go_tools.sh").read_text(), re.M)
    assert pinned is not None
    got = subprocess.run([str(SLOTH), "version"], capture_output=True, text=True, timeout=30).stdout.strip()
    assert got == pinned.group(1), got
