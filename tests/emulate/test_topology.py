from __future__ import annotations

import pytest

from monitor.emulate.incidents import effects, parse_spec
from monitor.emulate.topology import launch_for, localize, plan


def test_port_layout_is_deterministic(config):
    layout = plan(config, 40000)
    assert layout.control_port == 40000
    mixed, pd = layout.deployments
    assert [s.port for s in mixed.servers] == [40001]
    assert (mixed.npu_port, mixed.router_port, mixed.router_metrics_port) == (40002, 40003, 40004)
    assert [(s.role, s.port) for s in pd.servers] == [("prefill", 40005), ("decode", 40006)]
    assert pd.npu_port == 40007
    assert layout.port_count == 1 + 4 + 5


def test_localize_points_targets_at_the_emulator(config):
    local = localize(config, 40000, request_log_dir="/tmp/rl")
    mixed, pd = local.deployments
    assert [(t.role, t.source, t.url) for t in mixed.targets if t.url] == [
        ("server", "sglang", "http://127.0.0.1:40001/metrics"),
        ("npu", "npu-exporter", "http://127.0.0.1:40002/metrics"),
    ]
    roles = [t.role for t in pd.targets]
    assert roles == ["prefill", "decode", "npu", "router", "request-log"]
    assert next(t for t in pd.targets if t.role == "router").url == "http://127.0.0.1:40009/metrics"
    assert next(t for t in pd.targets if t.role == "request-log").path == "/tmp/rl/pd-decode-0"
    assert local.deployments[0].tpot_target_seconds == config.deployments[0].tpot_target_seconds


def test_localize_keeps_which_gateway_a_router_target_is(config):
    pd = config.deployments[1]
    said = pd.model_copy(update={"targets": [t.model_copy(update={"gateway": "sglang-router-0.3.2"})
                                             if t.role == "router" else t for t in pd.targets]})
    local = localize(config.model_copy(update={"deployments": [config.deployments[0], said]}), 40000)
    router = next(t for t in local.deployments[1].targets if t.role == "router")
    assert router.gateway == "sglang-router-0.3.2" and local.deployments[1].gateway == "sglang-router-0.3.2"
    assert next(t for t in localize(config, 40000).deployments[1].targets if t.role == "router").gateway is None


def test_launch_flags_per_role_and_in_flag_spelling():
    launch = {"--tp-size": 8, "decode": {"dp-size": 2, "enable_dp_attention": "true"}}
    assert launch_for(launch, "prefill") == {"tp_size": 8}
    assert launch_for(launch, "decode") == {"tp_size": 8, "dp_size": 2, "enable_dp_attention": "true"}


def test_incident_specs():
    inc = parse_spec("pd/decode:tpot_regression:2.5@60+5m", now=100.0)
    assert (inc.deployment, inc.role, inc.kind, inc.factor, inc.start, inc.duration) == (
        "pd", "decode", "tpot_regression", 2.5, 160.0, 300.0)
    assert parse_spec("pd:restart").duration is None
    assert parse_spec("pd:queue_buildup").factor == 3.0
    assert effects([inc], "decode", 200.0).tpot == 2.5
    assert effects([inc], "prefill", 200.0).tpot == 1.0
    assert effects([inc], "decode", 461.0).tpot == 1.0
    with pytest.raises(ValueError):
        parse_spec("pd:melted")
    with pytest.raises(ValueError):
        parse_spec("nokind")


def test_recipe_importer_launch_shape_is_read():
    from monitor.config import parse_config

    cfg = parse_config({"deployments": [{"name": "k", "mode": "pd-disaggregated", "launch": {"servers": [
        {"role": "prefill", "line": 3, "command": "python3", "tp_size": 16, "max_running_requests": 8},
        {"role": "decode", "line": 9, "command": "python3", "tp_size": 16, "dp_size": 16,
         "enable_dp_attention": True, "speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4},
    ]}}]})
    prefill, decode = plan(cfg, 41000).deployments[0].servers
    assert (prefill.role, prefill.tp_size, prefill.dp_size, prefill.max_running_requests) == ("prefill", 16, 1, 8)
    assert (decode.role, decode.dp_size, decode.enable_dp_attention) == ("decode", 16, True)
    assert decode.speculative_num_draft_tokens == 4
    assert decode.rank_labels(3)[0] == {"tp_rank": "3", "pp_rank": "0", "moe_ep_rank": "0", "dp_rank": "3"}


def test_free_ports_are_chosen_below_the_kernels_ephemeral_range():
    # A port inside the ephemeral range that is free now can be taken by any outgoing connection before the
    # gateway binds it (the demo lost a gateway that way on a loaded CI machine).
    from monitor.emulate.topology import _ephemeral_low, find_free_base_port, find_free_port

    lo = _ephemeral_low()
    for _ in range(50):
        base = find_free_base_port(55)
        assert base + 55 <= lo
        assert find_free_port() < lo
