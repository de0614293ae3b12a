"""The KV pool's token budget as SGLang 0.5.23 keeps it (monitor/emulate/kv_budget.py), and what it does to a
healthy deployment whose pool is smaller than its slots can fill: retractions in healthy long decodes."""

from __future__ import annotations

import pytest

from monitor.config import parse_config
from monitor.emulate import kv_budget as kb
from monitor.emulate.engine import EmulatedDeployment


def test_the_new_token_ratio_falls_from_0_7_to_0_098_over_600_steps():
    assert kb.INIT_NEW_TOKEN_RATIO == 0.7
    assert kb.MIN_NEW_TOKEN_RATIO == pytest.approx(0.098)  # noqa: SIM300
    assert kb.decayed(0.7, 300) == pytest.approx((0.7 + 0.098) / 2)
    assert kb.decayed(0.7, 600) == pytest.approx(0.098) and kb.decayed(0.7, 10_000) == pytest.approx(0.098)


def test_running_requests_reserve_the_ratio_of_what_they_may_still_write_unless_ignore_eos():
    chat = kb.Writing(held=1100, written=100, max_new=1000, ignore_eos=False)
    bench = kb.Writing(held=1100, written=100, max_new=1000, ignore_eos=True)
    assert chat.expected(0.1) == pytest.approx(90.0) and bench.expected(0.1) == pytest.approx(900.0)
    huge = kb.Writing(held=10, written=0, max_new=100_000, ignore_eos=True)
    assert huge.expected(0.5) == kb.CLIP_MAX_NEW_TOKENS  # the estimate is clipped at 4096


def test_a_new_request_needs_its_prompt_and_all_it_may_write_beside_the_reservation():
    running = [kb.Writing(held=1000, written=0, max_new=1000, ignore_eos=False)] * 4  # 4 x 100 at ratio 0.1
    assert kb.admits(2000, running, 0.1, extend=500, may_write=1000)  # 1500 < 2000 - 400
    assert not kb.admits(1900, running, 0.1, extend=500, may_write=1000)  # 1500 >= 1500
    assert not kb.admits(2000, running, 0.7, extend=500, may_write=1000)  # a fresh ratio reserves 2800


def test_retraction_takes_the_fewest_written_first_keeps_one_and_stops_once_a_step_fits():
    decoding = [kb.Writing(held=1200, written=200, max_new=1000, ignore_eos=False),
                kb.Writing(held=1050, written=50, max_new=1000, ignore_eos=False),
                kb.Writing(held=2050, written=50, max_new=1000, ignore_eos=False),
                kb.Writing(held=1500, written=500, max_new=1000, ignore_eos=False)]
    prompts = [1000, 1000, 2000, 1000]
    assert kb.retraction(0, decoding, prompts) == [2]  # 50 written and the longer prompt: 2050 freed, 3 fit
    assert kb.retraction(-3000, decoding, prompts) == [2, 1]
    assert kb.retraction(-100_000, decoding, prompts) == [2, 1, 0]  # never the last one
    assert kb.retraction(-5, decoding[:1], prompts[:1]) == []
    kept = [decoding[0], decoding[3]]
    assert kb.ratio_after_retraction(kept) == pytest.approx((700 + 40) / 2001)


def test_a_pd_decode_server_keeps_512_tokens_for_each_request_it_holds():
    assert kb.decode_admits(3000, holding=3, prompt=1464)
    assert not kb.decode_admits(3000, holding=3, prompt=1465)


def _tight(pool: int) -> EmulatedDeployment:
    cfg = parse_config({"deployments": [
        {"name": "long", "model": "meta-llama/Llama-3.1-8B-Instruct", "tpot_target_seconds": 0.1,
         "ttft_target_seconds": 2.0, "input_tokens": 3500, "output_tokens": 300, "prefix_cache_hit": 0.3,
         "launch": {"tp_size": 8, "max_running_requests": 32, "max_total_tokens": pool}}]})
    return EmulatedDeployment(cfg.deployment("long"), seed=8)


def test_a_healthy_server_whose_pool_is_smaller_than_its_slots_retracts_and_resumes():
    dep = _tight(60_000)  # room for about 17 of its 32 slots' requests
    rank = dep.servers[0].ranks[0]
    ratios = []
    for _ in range(60):
        dep.advance(10)
        ratios.append(rank.new_token_ratio)
        assert dep.kv.held(rank) <= rank.max_total_tokens + len(rank.decoding)
    retracted = rank.store.counter_value("sglang:num_retracted_requests")
    assert retracted >= 3  # SGLang's own retractions, nothing injected
    assert rank.store.counter_value("sglang:num_retracted_output_tokens") >= retracted
    assert min(ratios) == pytest.approx(kb.MIN_NEW_TOKEN_RATIO) and max(ratios) > 0.3  # decays, reset by each
    finished = dep.finished
    dep.advance(120)
    assert dep.finished > finished and all(not r.retracted or r in rank.waiting for r in rank.retracted)


def test_a_pool_that_holds_every_slot_never_retracts_in_healthy_serving():
    dep = _tight(32 * 3800)
    dep.advance(600)
    assert dep.servers[0].ranks[0].store.counter_value("sglang:num_retracted_requests") == 0


def test_a_recipes_max_total_tokens_sizes_the_emulated_pool():
    from monitor.recipes.commands import scan
    from monitor.recipes.launch import server_launch

    cmd = scan(["python3 -m sglang.launch_server --model-path m --max-running-requests 24 --max-total-tokens 8000"],
               1, "recipe.md")[0]
    launch = server_launch(cmd)
    assert launch["max_total_tokens"] == 8000
    cfg = parse_config({"deployments": [{"name": "d", "model": "m", "launch": launch}]})
    rank = EmulatedDeployment(cfg.deployment("d"), seed=1, rate=0).servers[0].ranks[0]
    assert rank.max_total_tokens == 8000 and rank.capacity == 24
