"""The emulated servers answer real requests over HTTP on the scheduler's clock and record them in SGLang's
metrics the way its TokenizerManager does (timings here are loose: a shared machine)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import parse_config
from monitor.emulate import Emulator

CONFIG = parse_config({"deployments": [
    {"name": "mix", "model": "m", "tpot_target_seconds": 0.02, "ttft_target_seconds": 0.2, "input_tokens": 64,
     "output_tokens": 16, "launch": {"max_running_requests": 8}},
    {"name": "pd", "model": "m", "mode": "pd-disaggregated", "tpot_target_seconds": 0.02,
     "ttft_target_seconds": 0.2, "input_tokens": 64, "output_tokens": 16, "launch": {"max_running_requests": 8}},
]})
PROMPT = " ".join(f"w{i}" for i in range(64))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


@contextlib.asynccontextmanager
async def serving():
    """An emulator with no synthetic load, a client session, and the mixed server's URL."""
    async with Emulator(CONFIG, 0, synthetic=False) as emu, aiohttp.ClientSession() as s:
        yield emu, s, emu.layout.deployment("mix").servers[0].url


async def stream(s: aiohttp.ClientSession, url: str, body: dict) -> list[tuple[float, dict | str]]:
    """(arrival, parsed chunk or "[DONE]") for every SSE line."""
    out = []
    async with s.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            line = line.strip()
            if line.startswith(b"data: "):
                data = line[6:].decode()
                out.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
    return out


async def metrics(s: aiohttp.ClientSession, url: str) -> dict[tuple[str, tuple], float]:
    async with s.get(url + "/metrics") as r:
        text = await r.text()
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


def total(m: dict, name: str, **labels: str) -> float:
    return sum(v for (n, lab), v in m.items() if n == name and set(labels.items()) <= set(lab))


def gen(n: int, **extra) -> dict:
    return {"text": PROMPT, "stream": True, "sampling_params": {"max_new_tokens": n, "ignore_eos": True}, **extra}


def test_streamed_generate_sends_cumulative_chunks_over_time_then_done():
    async def main():
        async with serving() as (emu, s, url):
            chunks = await stream(s, url + "/generate", gen(16))
            assert chunks[-1][1] == "[DONE]"
            body = [c for _, c in chunks[:-1]]
            assert [c["meta_info"]["completion_tokens"] for c in body] == sorted({c["meta_info"]["completion_tokens"]
                                                                                  for c in body})
            last = body[-1]
            assert last["meta_info"]["completion_tokens"] == 16 and last["text"] == " ".join(f"w{1000 + i}" for i in range(16))
            assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 16}
            assert all(c["meta_info"]["finish_reason"] is None for c in body[:-1])
            assert last["meta_info"]["prompt_tokens"] == 64
            assert {"e2e_latency", "first_token_latency", "request_received_ts", "decode_throughput"} <= set(last["meta_info"])
            # Tokens leave as the scheduler produces them (~13 ms apart), not in one burst.
            assert len(body) >= 8 and chunks[-2][0] - chunks[0][0] > 0.05

    run(main())


def test_metrics_record_real_requests_like_the_tokenizer_manager():
    async def main():
        async with serving() as (emu, s, url):
            runs = await asyncio.gather(*(stream(s, url + "/generate", gen(8 + i)) for i in range(6)))
            async with s.post(url + "/generate", json={**gen(5), "stream": False}) as r:
                whole = await r.json()
            m = await metrics(s, url)
            metas = [c[-2][1]["meta_info"] for c in runs] + [whole["meta_info"]]
            assert total(m, "sglang:num_requests_total", is_streaming="true") == 6
            assert total(m, "sglang:num_requests_total", is_streaming="false") == 1
            assert total(m, "sglang:generation_tokens_total") == sum(x["completion_tokens"] for x in metas)
            assert total(m, "sglang:time_to_first_token_seconds_count") == 7
            # TPOT per request = (e2e - ttft) / (completion_tokens - 1), exactly what meta_info reports.
            want = sum((x["e2e_latency"] - x["first_token_latency"]) / (x["completion_tokens"] - 1) for x in metas)
            assert total(m, "sglang:request_time_per_output_token_seconds_sum") == pytest.approx(want, rel=1e-9)
            assert total(m, "sglang:time_to_first_token_seconds_sum") == pytest.approx(
                sum(x["first_token_latency"] for x in metas), rel=1e-9)
            # ITL is token-weighted and its sum is the decode time of every request.
            assert total(m, "sglang:inter_token_latency_seconds_count") == sum(x["completion_tokens"] - 1 for x in metas)
            assert total(m, "sglang:inter_token_latency_seconds_sum") == pytest.approx(
                sum(x["e2e_latency"] - x["first_token_latency"] for x in metas), rel=1e-9)
            assert total(m, "sglang:http_requests_total", endpoint="/generate", method="POST") == 7
            assert total(m, "sglang:http_responses_total", endpoint="/generate", status_code="200") == 7

    run(main())


def test_openai_routes_stream_and_send_usage_only_when_asked():
    async def main():
        async with serving() as (emu, s, url):
            comp = await stream(s, url + "/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "stream": True,
                                                             "stream_options": {"include_usage": True}})
            body = [c for _, c in comp[:-1]]
            assert "".join(c["choices"][0]["text"] for c in body if c["choices"]) == "w1000 w1001 w1002 w1003"
            assert body[-1]["choices"] == [] and body[-1]["usage"]["completion_tokens"] == 4
            assert body[-2]["choices"][0]["finish_reason"] == "length"
            chat = await stream(s, url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                                  "max_completion_tokens": 3, "stream": True})
            body = [c for _, c in chat[:-1]]
            assert body[0]["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
            assert all("usage" not in c for c in body)  # no include_usage: no usage chunk
            assert body[-1]["choices"][0]["finish_reason"] == "length"
            async with s.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                   "max_tokens": 2}) as r:
                whole = await r.json()
            assert whole["object"] == "chat.completion" and whole["usage"]["completion_tokens"] == 2
            async with s.post(url + "/generate", json={"text": PROMPT, "stream": True,
                                                       "sampling_params": {"max_new_tokens": 1000}}) as r:
                lines = [ln async for ln in r.content if ln.startswith(b"data: {")]
            last = json.loads(lines[-1][6:])["meta_info"]
            assert last["finish_reason"] == {"type": "stop", "matched": 2} and last["completion_tokens"] < 1000

    run(main())


def test_pd_halves_pair_by_bootstrap_room_and_only_decode_observes_ttft():
    async def main():
        async with serving() as (emu, s, _):
            prefill, decode = (x.url for x in emu.layout.deployment("pd").servers)
            body = gen(6, bootstrap_host="127.0.0.1", bootstrap_port=8998, bootstrap_room=123)
            p, d = await asyncio.gather(stream(s, prefill + "/generate", body), stream(s, decode + "/generate", body))
            assert p[0][1]["meta_info"]["finish_reason"] == {"type": "length", "length": 0} and p[-1][1] == "[DONE]"
            assert p[0][0] <= d[0][0] + 0.05  # the prefill side answers when its KV left, before decode's first token
            assert d[-2][1]["meta_info"]["completion_tokens"] == 6
            mp, md = await metrics(s, prefill), await metrics(s, decode)
            assert total(mp, "sglang:num_requests_total") == total(md, "sglang:num_requests_total") == 1
            assert total(mp, "sglang:time_to_first_token_seconds_count") == 0
            assert total(md, "sglang:time_to_first_token_seconds_count") == 1
            async with s.post(decode + "/generate", json=gen(3)) as r:  # no bootstrap: not through a gateway
                assert r.status == 400 and "bootstrap" in (await r.json())["error"]["message"]

    run(main())


def test_v1_loads_reports_each_dp_rank_from_the_scheduler():
    async def main():
        async with serving() as (emu, s, url):
            async with s.post(url + "/generate", json=gen(300)) as r:
                await r.content.readline()  # in decode now
                async with s.get(url + "/v1/loads") as lr:
                    loads = await lr.json()
            [load] = loads["loads"]
            assert load["dp_rank"] == 0 and load["num_running_reqs"] == 1 and load["max_running_requests"] == 8
            assert load["disaggregation"]["mode"] == "null" and load["queues"]["waiting"] == 0
            assert loads["version"] == "0.5.23" and 0 < load["token_usage"] < 1

    run(main())


def test_client_disconnect_aborts_the_request_two_seconds_later():
    async def main():
        async with serving() as (emu, s, url):
            async with s.post(url + "/generate", json=gen(200)) as r:
                await r.content.readline()  # the first chunk, then hang up
            await asyncio.sleep(0.5)
            m = await metrics(s, url)
            assert total(m, "sglang:num_aborted_requests_total") == 0  # not yet: SGLang waits 2 s
            await asyncio.sleep(2.5)
            m = await metrics(s, url)
            assert total(m, "sglang:num_aborted_requests_total") == 1
            assert total(m, "sglang:num_requests_total") == 1  # the abort's finish is observed ...
            assert total(m, "sglang:request_time_per_output_token_seconds_count") == 0  # ... without a TPOT
            assert total(m, "sglang:generation_tokens_total") < 200

    run(main())


def test_incidents_act_on_real_requests():
    async def main():
        async with serving() as (emu, s, url):

            async def tpot() -> float:
                meta = (await stream(s, url + "/generate", gen(20)))[-2][1]["meta_info"]
                return 1 / meta["decode_throughput"]

            base = await tpot()
            async with s.post(emu.control_url + "/control/incident",
                              json={"deployment": "mix", "kind": "tpot_regression", "factor": 3}) as r:
                assert r.status == 201
            assert 2.5 < await tpot() / base < 3.5
            # A restart kills the process under an in-flight request: its stream is cut, no [DONE].
            async with s.post(url + "/generate", json=gen(500)) as r:
                await r.content.readline()
                async with s.post(emu.control_url + "/control/incident",
                                  json={"deployment": "mix", "kind": "restart"}) as c:
                    assert c.status == 201
                with pytest.raises(aiohttp.ClientPayloadError):
                    async for _line in r.content:
                        pass

    run(main())
