"""Paths the real page does not take: --enable-metrics present, custom ports, mismatches."""

from __future__ import annotations

import pytest

from monitor.recipes import import_recipe


@pytest.fixture(scope="module")
def result(synthetic_path):
    return import_recipe(synthetic_path)


def test_markdown_page_with_fenced_and_indented_commands(result):
    pd, mixed = result.deployments
    assert (pd.name, mixed.name) == ("demo-pd", "demo-mixed")
    assert [(t.role, t.url) for t in pd.targets] == [
        ("prefill", "http://10.0.0.1:31001/metrics"),
        ("decode", "http://10.0.0.2:31002/metrics"),
        ("router", "http://127.0.0.1:29100/metrics"),  # --prometheus-port, router bound to 0.0.0.0
    ]
    assert [(t.role, t.url) for t in mixed.targets] == [("server", "http://127.0.0.1:30000/metrics")]
    assert not any("--enable-metrics" in w for d in result.deployments for w in d.warnings)


def test_mismatches_become_warnings(result):
    text = "\n".join(result.deployments[0].warnings)
    assert "bootstrap port 9002" in text and "9001" in text
    assert "targets port 8001, but requests enter at 8000" in text
    assert "exceeds --max-running-requests 4" in text
    assert "--disable-radix-cache" in text
    assert "45 ms is not an edge" in text
    assert result.deployments[0].prefix_cache_hit == 0.5


def test_section_without_row_is_reported(result):
    assert any("'Orphan'" in w and "matches no table row" in w for w in result.warnings)


def test_row_without_section_keeps_the_row_and_warns():
    page = ("Model\tCards\tDeploy Mode\tDataset\tTPOT\nM\t1\tPD Mixed\t1K+1K\t40ms\n")
    (d,) = import_recipe(page, source="p").deployments
    assert d.targets == [] and d.tpot_target_seconds == 0.04
    assert any("no 'Optimal Configuration' section" in w for w in d.warnings)
