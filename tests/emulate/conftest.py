from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import Config, parse_config
from tests.conftest import REAL_FIXTURES

FIXTURES = REAL_FIXTURES


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def make_config() -> Config:
    return parse_config({"deployments": [
        {"name": "mixed", "model": "meta-llama/Llama-3.1-8B-Instruct", "tpot_target_seconds": 0.1,
         "ttft_target_seconds": 2.0, "input_tokens": 3500, "output_tokens": 300, "prefix_cache_hit": 0.3,
         "launch": {"tp_size": 8, "max_running_requests": 32, "speculative_algorithm": "EAGLE",
                    "speculative_num_draft_tokens": 4}},
        {"name": "pd", "model": "moonshotai/Kimi-K2.6", "hardware": "Atlas 800I A3", "cards": 16,
         "mode": "pd-disaggregated", "tpot_target_seconds": 0.1, "input_tokens": 8000, "output_tokens": 300,
         "prefix_cache_hit": 0.9,
         "launch": {"prefill": {"tp_size": 16}, "decode": {"tp_size": 16, "dp_size": 4, "enable_dp_attention": True,
                                                         "max_running_requests": 64}},
         "targets": [{"role": "router", "url": "http://10.0.0.1:29000/metrics"}]},
    ]})


@pytest.fixture
def config() -> Config:
    return make_config()
