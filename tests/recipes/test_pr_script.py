"""The Kimi-K3 PR: no table, one `sglang serve` script, measured results kept as the baseline."""

from __future__ import annotations

import pytest

from monitor.recipes import import_recipe


@pytest.fixture(scope="module")
def k3(k3_path):
    result = import_recipe(k3_path)
    assert len(result.deployments) == 1
    return result.deployments[0]


def test_imports_the_launch_script(k3):
    assert k3.name == "kimi-k3-a5-tp32-dspark"
    assert k3.model == "Kimi-K3"
    assert k3.mode == "pd-mixed"
    server = k3.launch["servers"][0]
    assert server["command"] == "sglang serve"
    assert (server["nnodes"], server["tp_size"], server["port"]) == (4, 32, 30543)
    assert server["speculative_algorithm"] == "DSPARK"
    assert server["dist_init_addr"] == "<<first node>>:30143"
    assert [(t.role, t.url) for t in k3.targets] == [("server", "http://127.0.0.1:30543/metrics")]


def test_keeps_measured_results_as_baseline(k3):
    b = k3.baseline
    assert b is not None
    assert b.ttft_mean_seconds == pytest.approx(5.60454)
    assert b.tpot_mean_seconds == pytest.approx(0.02302)
    assert b.output_throughput_tokens_per_second == 47
    assert "sgl-project/sglang#39589" in (b.source or "")
    assert (k3.dataset, k3.input_tokens, k3.output_tokens) == ("128k+1k", 128000, 1000)


def test_invents_no_targets(k3):
    assert k3.tpot_target_seconds is None and k3.ttft_target_seconds is None
    text = "\n".join(k3.warnings)
    assert "no TPOT target" in text and "--ttft-target" in text
    assert "Mean TFTT" in text  # the PR's typo is read, and said
    assert "0.0.0.0" in text and "no --enable-metrics" in text


def test_ttft_target_option_sets_the_target(k3_path):
    d = import_recipe(k3_path, ttft_target=8.0).deployments[0]
    assert d.ttft_target_seconds == 8.0
    assert not any("--ttft-target" in w for w in d.warnings)


def test_non_positive_ttft_target_is_refused(k3_path):
    with pytest.raises(ValueError, match="ttft-target"):
        import_recipe(k3_path, ttft_target=0)
