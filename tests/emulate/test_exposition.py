"""Emulated /metrics parse like the real SGLang 0.5.23 output: names, label names, bucket edges."""

from __future__ import annotations

import gzip
import re

from prometheus_client.parser import text_string_to_metric_families

from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.exposition import render_npu, render_server

OPENMETRICS = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"


def shape(families) -> dict[str, tuple[str, frozenset[str], tuple[str, ...]]]:
    out = {}
    for f in families:
        names = frozenset(k for s in f.samples for k in s.labels if k != "le")
        les = tuple(sorted({s.labels["le"] for s in f.samples if "le" in s.labels and s.name.endswith("_bucket")}))
        out[f.name] = (f.type, names, les)
    return out


def emulated(config, name: str, seconds: float = 1800, seed: int = 3) -> EmulatedDeployment:
    dep = EmulatedDeployment(config.deployment(name), seed=seed)
    dep.advance(seconds)
    return dep


def test_text_exposition_has_the_real_families_labels_and_buckets(config, fixtures):
    real = shape(text_string_to_metric_families((fixtures / "sglang_0.5.23_server_metrics.txt").read_text()))
    dep = emulated(config, "mixed")
    body, headers = render_server(dep, dep.servers[0], None)
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    ours = shape(text_string_to_metric_families(body.decode()))
    assert set(ours) == set(real)
    for name, want in real.items():
        assert ours[name] == want, name


SAMPLE_RE = re.compile(r'^([^{\s]+)(?:\{(.*)\})? ')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def om_shape(text: str) -> tuple[set[str], dict[str, frozenset[str]], dict[str, set[str]]]:
    """TYPE lines, label names per sample name, `le` values per sample name, read line by line.

    prometheus_client's own OpenMetrics parser rejects SGLang's real output (metadata says
    `sglang:x`, samples say `sglang_x`: "Clashing name"), so compare the text itself."""
    types, labels, les = set(), {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            types.add(line)
        elif line and not line.startswith("#"):
            name, body = SAMPLE_RE.match(line).groups()
            pairs = dict(LABEL_RE.findall(body or ""))
            labels[name] = frozenset(k for k in pairs if k not in ("le", "pid")) | labels.get(name, frozenset())
            if "le" in pairs:
                les.setdefault(name, set()).add(pairs["le"])
    return types, labels, les


def test_openmetrics_exposition_uses_the_underscore_names_like_the_real_one(config, fixtures):
    real = om_shape((fixtures / "sglang_0.5.23_server_metrics.openmetrics.txt").read_text())
    dep = emulated(config, "mixed")
    body, headers = render_server(dep, dep.servers[0], OPENMETRICS)
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    assert "# TYPE sglang:num_requests counter" in text  # metadata keeps the colon, samples do not
    assert "sglang_num_requests_total{" in text
    assert "_created" not in text
    ours = om_shape(text)
    assert ours[0] == real[0]
    assert ours[1] == real[1]
    assert ours[2] == real[2]


def test_gzip_when_asked(config):
    dep = emulated(config, "mixed", 60)
    body, headers = render_server(dep, dep.servers[0], None, "gzip, deflate")
    assert headers["Content-Encoding"] == "gzip"
    assert b"sglang:num_running_reqs" in gzip.decompress(body)


def test_request_families_have_no_rank_labels_and_scheduler_families_do(config):
    dep = emulated(config, "pd")
    decode = next(s for s in dep.servers if s.spec.role == "decode")
    fams = {f.name: f for f in text_string_to_metric_families(render_server(dep, decode, None)[0].decode())}
    for name in ("sglang:time_to_first_token_seconds", "sglang:num_requests", "sglang:request_time_per_output_token_seconds"):
        labels = {k for s in fams[name].samples for k in s.labels}
        assert not labels & {"tp_rank", "dp_rank", "pp_rank", "moe_ep_rank"}, name
        assert {s.labels["engine_type"] for s in fams[name].samples} == {"decode"}
    running = fams["sglang:num_running_reqs"].samples
    assert sorted(s.labels["dp_rank"] for s in running) == ["0", "1", "2", "3"]
    # DP attention: tp_rank is the global rank of each attention group's first scheduler.
    assert sorted(int(s.labels["tp_rank"]) for s in running) == [0, 4, 8, 12]
    retracted = fams["sglang:num_retracted_reqs"].samples
    assert all("pid" in s.labels for s in retracted)
    assert "sglang:num_decode_prealloc_queue_reqs" in fams and "sglang:num_decode_transfer_queue_reqs" in fams


def test_prefill_server_records_no_ttft_tpot_itl_but_kv_transfer(config):
    dep = emulated(config, "pd")
    prefill = next(s for s in dep.servers if s.spec.role == "prefill")
    fams = {f.name: f for f in text_string_to_metric_families(render_server(dep, prefill, None)[0].decode())}
    for name in ("sglang:time_to_first_token_seconds", "sglang:request_time_per_output_token_seconds",
                 "sglang:inter_token_latency_seconds"):
        assert name not in fams
    assert fams["sglang:e2e_request_latency_seconds"].samples
    kv = [s for s in fams["sglang:kv_transfer_latency_ms"].samples if s.name.endswith("_count")]
    assert kv and kv[0].value > 0
    assert {s.labels["engine_type"] for s in fams["sglang:num_requests"].samples} == {"prefill"}
    assert "dp_rank" not in fams["sglang:num_running_reqs"].samples[0].labels  # prefill has no DP here


def test_deployment_buckets_are_respected(config):
    dep_cfg = config.deployment("mixed").model_copy(update={"buckets": {"tpot": [0.05, 0.1, 0.2]}})
    dep = EmulatedDeployment(dep_cfg, seed=1)
    dep.advance(900)
    fams = {f.name: f for f in text_string_to_metric_families(render_server(dep, dep.servers[0], None)[0].decode())}
    les = {s.labels["le"] for s in fams["sglang:request_time_per_output_token_seconds"].samples if "le" in s.labels}
    assert les == {"0.05", "0.1", "0.2", "+Inf"}


def test_npu_exporter_uses_the_real_label_names(config, fixtures):
    sample = (fixtures / "npu_exporter_sample.txt").read_text().replace("...\n", "")
    real = next(f for f in text_string_to_metric_families(sample) if f.name == "npu_chip_info_aicore_current_freq")
    want = set(real.samples[0].labels)
    dep = emulated(config, "pd", 120)
    fams = {f.name: f for f in text_string_to_metric_families(render_npu(dep, 4))}
    for name in ("npu_chip_info_temperature", "npu_chip_info_hbm_used_memory", "npu_chip_info_hbm_total_memory",
                 "npu_chip_info_utilization", "npu_chip_info_power", "npu_chip_info_health_status"):
        assert len(fams[name].samples) == 4
        assert set(fams[name].samples[0].labels) == want
        assert fams[name].samples[0].timestamp is not None
