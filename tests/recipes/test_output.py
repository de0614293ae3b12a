"""What import prints is a config: parse_config reads the JSON and load_config the YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from monitor.commands.recipe import generate
from monitor.config import load_config, parse_config
from monitor.recipes import default_config, import_recipe, render

REPO = Path(__file__).resolve().parents[2]

JSON_KEYS = ["name", "model", "hardware", "cards", "mode", "input_tokens", "output_tokens", "prefix_cache_hit",
             "tpot_target_seconds", "ttft_target_seconds", "quantization", "targets", "launch", "warnings"]


@pytest.mark.parametrize("add_bucket_flags", [False, True])
def test_json_form_has_the_documented_keys_and_parses(k26_path, k3_path, add_bucket_flags):
    ds = [*import_recipe(k26_path, add_bucket_flags=add_bucket_flags).deployments,
          *import_recipe(k3_path, add_bucket_flags=add_bucket_flags).deployments]
    data = json.loads(render(ds, "json"))
    assert list(data) == ["deployments"]
    for d in data["deployments"]:
        assert set(JSON_KEYS) <= set(d)
    config = parse_config(data, "import.json")
    assert [d.name for d in config.deployments] == [d.name for d in ds]
    assert config.deployments == ds  # nothing lost on the way through JSON


def test_yaml_form_loads_with_load_config(tmp_path: Path, k26_path, k3_path):
    ds = [*import_recipe(k26_path, add_bucket_flags=True).deployments, *import_recipe(k3_path).deployments]
    path = tmp_path / "config.yaml"
    path.write_text(render(ds, "yaml", header="generated for a test"), encoding="utf-8")
    assert path.read_text().startswith("# generated for a test\n")
    assert load_config(path).deployments == ds


def test_default_config_is_the_embedded_page_and_pr():
    config = default_config()
    assert len(config.deployments) == 12
    assert config.deployments[-1].baseline is not None
    assert sum(1 for d in config.deployments if d.buckets) == 3
    assert len(default_config(add_bucket_flags=False).deployments) == 12


def test_example_config_is_up_to_date(monkeypatch):
    """examples/kimi-k2.6-ascend.yaml is exactly what the importer writes (regenerate it if this fails)."""
    files = ["monitor/recipes/data/kimi-k2.6-ascend-a3.txt", "monitor/recipes/data/kimi-k3-a5-pr39589.txt"]
    example = REPO / "examples" / "kimi-k2.6-ascend.yaml"
    monkeypatch.chdir(REPO)
    text, _ = generate(files, add_bucket_flags=True, output="examples/kimi-k2.6-ascend.yaml")
    assert example.read_text(encoding="utf-8") == text
    config = load_config(example)
    assert len(config.deployments) == 12
    assert [d.name for d in config.deployments] == [d.name for d in default_config().deployments]


def test_minimal_example_loads():
    config = load_config(REPO / "examples" / "minimal.yaml")
    roles = [[t.role for t in d.targets] for d in config.deployments]
    assert roles == [["server"], ["prefill", "decode", "router"]]
    assert config.deployments[0].targets[0].url == "http://127.0.0.1:30000/metrics"


def test_yaml_is_plain_safe_yaml(k3_path):
    data = yaml.safe_load(render(import_recipe(k3_path).deployments))
    assert data["deployments"][0]["baseline"]["tpot_mean_seconds"] == 0.02302
