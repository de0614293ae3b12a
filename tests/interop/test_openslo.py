from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from monitor.config import ConfigError
from monitor.conventions.slis import SLI_RECORDS
from monitor.interop.load import load_config
from monitor.interop.openslo import config_from_openslo, render_openslo

SLO_FIELDS = (*(s.target_field for s in SLI_RECORDS), "objective", "goodput_objective", "period")


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
    # The queue-time SLO counts the prefill queue: the prefill servers' series, never the decode side's.
    queue = next(d for d in docs if d["metadata"]["labels"] == {"deployment": "kimi-pd", "sli": "queue_time"})
    total = queue["spec"]["indicator"]["spec"]["ratioMetric"]["total"]["metricSource"]["spec"]["query"]
    assert total.startswith("sglang:queue_time_seconds_count{") and 'role=~"prefill"' in total
    assert 'engine_type!="decode"' in total


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


def test_an_error_shows_an_excerpt_of_a_long_query_and_name_only():
    doc = {"apiVersion": "openslo/v1", "kind": "SLO", "metadata": {"name": "n" * 50_000},
           "spec": {"objectives": [{"target": 0.99}], "indicator": {"spec": {"ratioMetric": {
               "good": {"metricSource": {"spec": {"query": "x" * 100_000}}},
               "total": {"metricSource": {"spec": {"query": "y_count"}}}}}}}}
    with pytest.raises(ConfigError) as err:
        config_from_openslo([doc], "x.yaml")
    msg = str(err.value)
    assert msg.startswith("x.yaml: document 1 ('nnn") and "cannot tell the SLI" in msg and "(100,000 characters)" in msg
    assert len(msg) < 500


def test_an_alias_bomb_under_api_version_is_refused_before_anything_walks_it(tmp_path: Path):
    """`str()` of the apiVersion in the OpenSLO detection took 39 s and 3.1 GB on a 9-level file."""
    levels = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 6)]
    p = tmp_path / "slo.yaml"
    p.write_text("\n".join(levels) + "\napiVersion: *a5\n---\nkind: SLO\n")
    with pytest.raises(ConfigError, match=r"slo.yaml: line \d+: aliases expand to more than 10,000 nodes"):
        load_config(p)
