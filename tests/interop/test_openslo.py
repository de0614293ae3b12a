from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from monitor.config import ConfigError
from monitor.interop.load import load_config
from monitor.interop.openslo import config_from_openslo, render_openslo

SLO_FIELDS = ("ttft_target_seconds", "tpot_target_seconds", "itl_target_seconds", "e2e_target_seconds",
              "objective", "goodput_objective", "period")


def _load(files: dict[str, str]) -> list[dict]:
    return [d for text in files.values() for d in yaml.safe_load_all(text)]


def test_documents_are_openslo_v1_slos_with_exact_le(small_config):
    docs = _load(render_openslo(small_config))
    assert {d["apiVersion"] for d in docs} == {"openslo/v1"} and {d["kind"] for d in docs} == {"SLO"}
    ttft = next(d for d in docs if d["metadata"]["labels"] == {"deployment": "kimi-pd", "sli": "ttft"})
    ratio = ttft["spec"]["indicator"]["spec"]["ratioMetric"]
    assert 'le="2.0"' in ratio["good"]["metricSource"]["spec"]["query"]
    assert ratio["total"]["metricSource"]["spec"]["query"].startswith("sglang:time_to_first_token_seconds_count{")
    assert ttft["spec"]["objectives"][0]["target"] == 0.99
    assert ttft["spec"]["timeWindow"] == [{"duration": "30d", "isRolling": True}]
    assert all(len(d["metadata"]["name"]) <= 63 for d in docs)


def test_round_trip_reproduces_targets_and_objectives(small_config, tmp_path: Path):
    files = render_openslo(small_config)
    back = config_from_openslo(_load(files), "test")
    assert [d.name for d in back.deployments] == [d.name for d in small_config.deployments]
    for orig, new in zip(small_config.deployments, back.deployments):
        assert {f: getattr(new, f) for f in SLO_FIELDS} == {f: getattr(orig, f) for f in SLO_FIELDS}
        assert [t.id for t in new.targets] == [t.id for t in orig.targets]
        assert (new.model, new.mode, new.approximate) == (orig.model, orig.mode, orig.approximate)
    # The config loader takes the same file (multi-document YAML with apiVersion openslo/v1).
    path = tmp_path / "kimi-pd.yaml"
    path.write_text(files["openslo/kimi-pd.yaml"])
    loaded = load_config(path)
    assert loaded.deployments[0].ttft_target_seconds == 2.0 and loaded.deployments[0].tpot_target_seconds == 0.04


def test_foreign_openslo_without_annotations_uses_le_and_service():
    doc = {"apiVersion": "openslo/v1", "kind": "SLO", "metadata": {"name": "chat-ttft"},
           "spec": {"service": "chat", "timeWindow": [{"duration": "28d", "isRolling": True}],
                    "objectives": [{"targetPercent": 99.5}],
                    "indicatorRef": "chat-ttft-sli"}}
    sli = {"apiVersion": "openslo/v1", "kind": "SLI", "metadata": {"name": "chat-ttft-sli"},
           "spec": {"ratioMetric": {"counter": True,
                    "good": {"metricSource": {"type": "Prometheus", "spec": {
                        "query": 'sglang_time_to_first_token_seconds_bucket{le="1.0"}'}}},
                    "total": {"metricSource": {"type": "Prometheus", "spec": {
                        "query": "sglang_time_to_first_token_seconds_count"}}}}}}
    dep = config_from_openslo([sli, doc], "x.yaml").deployments[0]
    assert (dep.name, dep.ttft_target_seconds, dep.objective, dep.period, dep.targets) == ("chat", 1.0, 0.995, "28d", [])


def test_non_openslo_document_is_refused_with_its_number():
    with pytest.raises(ConfigError, match=r"x.yaml: document 2: not an OpenSLO document"):
        config_from_openslo([{"apiVersion": "openslo/v1", "kind": "Service"}, {"deployments": []}], "x.yaml")
