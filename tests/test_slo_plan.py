from __future__ import annotations

import pytest

from monitor.config import Deployment
from monitor.slo_plan import GenerateError, engine_matchers, resolve_sli


def dep(**kw) -> Deployment:
    return Deployment(name="d", targets=[{"role": "server", "url": "http://127.0.0.1:1/metrics"}], **kw)


def test_target_on_a_bucket_edge_uses_sglangs_le_spelling():
    assert resolve_sli(dep(ttft_target_seconds=1), "ttft", False).le == "1.0"
    assert resolve_sli(dep(tpot_target_seconds=0.04), "tpot", False).le == "0.04"
    assert resolve_sli(dep(itl_target_seconds=0.01), "itl", False).le == "0.01"


def test_target_between_edges_is_refused_with_the_flag_and_full_value_list():
    with pytest.raises(GenerateError) as err:
        resolve_sli(dep(tpot_target_seconds=0.05), "tpot", False)
    msg = str(err.value)
    assert "--bucket-inter-token-latency" in msg
    assert "0.04 0.05 0.06" in msg and msg.count("0.002") == 2  # edge list and the fixed list
    assert "approximate" in msg


def test_approximation_interpolates_between_neighbouring_edges():
    plan = resolve_sli(dep(tpot_target_seconds=0.05, approximate=True), "tpot", False)
    assert (plan.lower, plan.upper) == (0.04, 0.06)
    assert plan.fraction == pytest.approx(0.5)
    assert "interpolated" in plan.approximation_note()
    assert resolve_sli(dep(tpot_target_seconds=0.05), "tpot", True).approximate  # --approximate


def test_custom_buckets_from_the_config_count_as_edges():
    plan = resolve_sli(dep(tpot_target_seconds=0.05, buckets={"tpot": [0.025, 0.05, 0.1]}), "tpot", False)
    assert not plan.approximate and plan.le == "0.05"


def test_target_above_the_last_finite_edge_is_refused_even_when_approximating():
    with pytest.raises(GenerateError, match="above the last finite bucket"):
        resolve_sli(dep(ttft_target_seconds=1000, approximate=True), "ttft", True)


def test_engine_matchers_read_direct_servers_and_the_merge_for_the_other_workers():
    d = Deployment(name="d", targets=[{"role": "decode", "url": "http://a:1/metrics"},
                                      {"role": "router", "source": "router-engine-metrics", "url": "http://r:1/engine_metrics"}])
    regex, neq, nregex = engine_matchers(d, ("server", "decode"))
    assert regex == {"role": "decode|router"} and neq == {"engine_type": "prefill"}
    assert nregex == {"worker_addr": "http://a:1"}
    only_router = Deployment(name="d", targets=[{"role": "router", "source": "router-engine-metrics",
                                                 "url": "http://r:1/engine_metrics"}])
    assert engine_matchers(only_router, ("server", "decode")) == ({"role": "router"}, {"engine_type": "prefill"}, {})
