"""Request parsing and response bodies follow SGLang 0.5.23 (defaults from its source; chat chunks are
compared with SGLang's own `build_sse_content` from the wheel)."""

from __future__ import annotations

import json

import pytest

from monitor.emulate import wire
from monitor.emulate.bench_serving import prepare_imports, sglang_dir


def test_generate_defaults_and_fields():
    r = wire.parse_generate({"text": "w1 w2  w3\nw4"})
    assert (r.prompt_tokens, r.max_new_tokens, r.ignore_eos, r.stream, r.log_metrics) == (4, 128, False, False, True)
    r = wire.parse_generate({"input_ids": list(range(70)), "stream": True, "rid": "abc",
                             "sampling_params": {"max_new_tokens": 5, "ignore_eos": True},
                             "bootstrap_host": "10.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 7})
    assert (r.prompt_tokens, r.max_new_tokens, r.ignore_eos, r.stream, r.rid) == (70, 5, True, True, "abc")
    assert (r.bootstrap_host, r.bootstrap_port, r.bootstrap_room) == ("10.0.0.1", 8998, 7)
    assert len(r.blocks) == 70 // wire.CACHE_BLOCK


def test_openai_defaults_usage_options_and_chat_template_tokens():
    c = wire.parse_completions({"prompt": "a b c", "stream": True, "stream_options": {"include_usage": True}})
    assert (c.max_new_tokens, c.include_usage, c.continuous_usage) == (16, True, False)  # CompletionRequest.max_tokens
    chat = wire.parse_chat({"messages": [{"role": "system", "content": "be brief"},
                                         {"role": "user", "content": [{"type": "text", "text": "hi there"}]}],
                            "max_tokens": 9, "max_completion_tokens": 7})
    assert chat.prompt_tokens == 4 + 2 * wire.CHAT_TEMPLATE_TOKENS
    assert chat.max_new_tokens == 7 and chat.model is None


def test_equal_prefixes_give_equal_leading_cache_blocks():
    shared = " ".join(f"w{i}" for i in range(64))
    a = wire.parse_generate({"text": shared + " x1 " + " ".join(["y"] * 40)})
    b = wire.parse_generate({"text": shared + " x2 " + " ".join(["y"] * 40)})
    assert a.blocks[:2] == b.blocks[:2] and a.blocks[2] != b.blocks[2]


@pytest.mark.parametrize("body, field", [
    ({"text": ["a", "b"]}, "batch"),
    ({}, "text"),
    ({"text": "a", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    ({"text": "a", "sampling_params": {"max_new_tokens": 1.5}}, "max_new_tokens"),
    ({"text": "a", "stream": "yes"}, "stream"),
    ({"text": "a", "bootstrap_room": "r"}, "bootstrap_room"),
    ([1], "object"),
])
def test_bad_generate_bodies_name_the_field(body, field):
    with pytest.raises(wire.WireError, match=field):
        wire.parse_generate(body)


def test_native_chunks_carry_cumulative_text_and_meta_info():
    p = wire.Progress(rid="r1", prompt_tokens=10, completion_tokens=3, cached_tokens=2)
    chunk = wire.native_chunk(p)
    assert chunk["text"] == "w1000 w1001 w1002" and chunk["output_ids"] == [1000, 1001, 1002]
    assert {"id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "weight_version",
            "num_retractions", "reasoning_tokens"} <= set(chunk["meta_info"])
    done = wire.Progress(rid="r1", prompt_tokens=10, completion_tokens=3, cached_tokens=2, finish="length")
    assert wire.native_chunk(done)["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert wire.sse(chunk).startswith(b"data: {") and wire.sse(chunk).endswith(b"}\n\n")
    # The text of n tokens re-tokenizes to n words, whatever n (bench_serving's retokenized count).
    assert len(wire.output_text(5000).split()) == 5000
    assert wire.output_text(3) + wire.delta_text(3, 5) == wire.output_text(5)


def test_completion_usage_chunk_drops_nones_like_exclude_none():
    c = wire.parse_completions({"prompt": "a b", "stream": True, "stream_options": {"include_usage": True}})
    p = wire.Progress(rid="r", prompt_tokens=2, completion_tokens=4, cached_tokens=0, finish="length")
    u = wire.completion_usage_chunk(c, p, "m")
    assert u["choices"] == [] and u["usage"] == {"prompt_tokens": 2, "total_tokens": 6, "completion_tokens": 4,
                                                 "reasoning_tokens": 0}
    chunk = wire.completion_chunk(c, p, 1, "m")
    assert chunk["choices"][0]["text"] == " w1001 w1002 w1003" and chunk["usage"] is None


def test_chat_chunks_are_what_sglangs_build_sse_content_writes():
    prepare_imports(sglang_dir())
    from sglang.srt.entrypoints.openai.sse_utils import build_sse_content  # SGLang 0.5.23's own code

    req = wire.parse_chat({"messages": [{"role": "user", "content": "hi"}], "stream": True})
    p = wire.Progress(rid="r9", prompt_tokens=6, completion_tokens=2, cached_tokens=0, finish="stop")

    def theirs(**kw) -> dict:
        return json.loads(build_sse_content(chunk_id="r9", created=req.created_wall, model="m", index=0, **kw)[6:])

    assert wire.chat_chunk(req, p, "m", role=True, content="") == theirs(role="assistant", content="")
    assert wire.chat_chunk(req, p, "m", content=" w1001") == theirs(content=" w1001")
    assert wire.chat_chunk(req, p, "m", finish="stop") == theirs(finish_reason="stop", matched_stop=wire.EOS_TOKEN_ID)
