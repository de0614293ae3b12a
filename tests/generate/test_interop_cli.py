"""`generate --format openslo|sloth` writes specs, and `recipe import` takes OpenSLO back in."""

from __future__ import annotations

import json

import yaml

from monitor.cli import main
from monitor.config import load_config

EXAMPLE = "examples/kimi-k2.6-ascend.yaml"


def test_openslo_out_and_back_in_keeps_the_targets(tmp_path, capsys):
    assert main(["generate", "-c", EXAMPLE, "--format", "openslo", "--out", str(tmp_path)]) == 0
    files = sorted(str(p) for p in (tmp_path / "openslo").glob("*.yaml"))
    assert files
    out = tmp_path / "back.json"
    assert main(["recipe", "import", *files, "-o", str(out)]) == 0
    back = {d["name"]: d for d in json.loads(out.read_text())["deployments"]}
    original = {d.name: d for d in load_config(EXAMPLE).deployments if d.slis}
    assert set(back) == set(original)
    for name, dep in original.items():
        assert back[name]["tpot_target_seconds"] == dep.tpot_target_seconds
        assert back[name].get("objective", 0.99) == dep.objective


def test_sloth_specs_are_written_per_deployment(tmp_path):
    assert main(["generate", "-c", EXAMPLE, "--format", "sloth", "--out", str(tmp_path)]) == 0
    specs = [yaml.safe_load(p.read_text()) for p in (tmp_path / "sloth").glob("*.yaml")]
    assert specs and all(s["version"] == "prometheus/v1" for s in specs)
