"""Capture the real gateways' expositions and measure what their families record (tests/fixtures/gateway/).

    .venv/bin/python -m tools.gateway_capture [--out tests/fixtures/gateway] [--gateway NAME ...] [--mode regular|pd]

For each gateway (smg 1.13, sglang-router 0.3.2) and mode (regular: two workers; PD: one prefill, one
decode), this starts capture workers (worker.py) and the real gateway in front of them (the project's
launcher, monitor/emulate/router.py), drives the probes below through the gateway with an aiohttp client,
and writes:
  <gateway>_<version>_<mode>_metrics.txt          the Prometheus listener after all probes
  <gateway>_<version>_<mode>_engine_metrics.txt   GET /engine_metrics (its body, also when it is an error)
  measurements.json                               per probe: what the client saw (status, times), what the
                                                  workers saw (their request log), and every gateway sample
                                                  that changed across the probe (scraped before and after)
Nothing here runs at test time; the tests read only what it wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from monitor.conventions.names import GATEWAY_SGLANG_ROUTER, GATEWAY_SMG, GATEWAYS
from monitor.emulate.router import RouterProcess, find_gateway, gateway_argv
from tests.conftest import free_port
from tools.gateway_capture.worker import CaptureWorker

ROOT = Path(__file__).resolve().parents[2]
SGLANG_METRICS = ROOT / "tests" / "fixtures" / "real" / "sglang_0.5.23_server_metrics.txt"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the model_name of the real SGLang capture the workers serve
BOOTSTRAP_PORT = 8998
SETTLE = 1.0  # seconds after a probe before the "after" scrape (counters at the last frame, health ticks)
# Runtime noise that changes on its own between scrapes: left out of a probe's changes.
NOISE = re.compile(r"^smg_(tokio|allocator|http_connections_active|engine_load_polls|worker_health_checks|"
                   r"http_requests_total\{.*/workers|http_request_duration_seconds_.*/workers|"
                   r"http_responses_total\{.*path=\"/(workers|engine_metrics))")
FILE_PREFIX = {GATEWAY_SMG: "smg_1.13.0", GATEWAY_SGLANG_ROUTER: "sglang_router_0.3.2"}


def worker_metrics(role: str) -> str:
    """The real SGLang 0.5.23 exposition, as a server of `role` writes it: `engine_type` is the role
    (DisaggregationMode.to_engine_type); a PD decode server runs DP attention, so its scheduler series
    (those with tp_rank) carry dp_rank, and a prefill server's do not (the label sets differ: smg#805)."""
    text = SGLANG_METRICS.read_text()
    engine_type = {"server": "unified"}.get(role, role)
    text = text.replace('engine_type="unified"', f'engine_type="{engine_type}"')
    if role == "decode":
        text = re.sub(r'(tp_rank="\d+")', r'dp_rank="0",\1', text)
    return text


def samples(text: str) -> dict[str, float]:
    """Every sample as `name{labels}` -> value (labels sorted), parsed by prometheus_client."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def changes(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Samples that changed (or appeared) between two scrapes: after - before (the change, for a gauge too).
    Histogram buckets are left out: `_sum` and `_count` say what was observed (the fixtures show the buckets)."""
    out = {}
    for key, value in after.items():
        old = before.get(key, 0.0)
        if key.split("{")[0].endswith("_bucket") or NOISE.match(key):
            continue
        if value != old and not (math.isnan(value) and math.isnan(old)):
            out[key] = round(value - old, 6)
    return dict(sorted(out.items()))


class Client:
    """Sends one request through the gateway and records what the client saw, with wall-clock times."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def send(self, path: str, body: dict[str, Any] | str, *, read_chunks: int | None = None,
                   mid: Any = None) -> dict[str, Any]:
        """read_chunks: close the connection after that many data chunks (a client disconnect).
        mid: an async callable run once the response head has arrived (e.g. a scrape mid-stream)."""
        t0 = time.time()
        seen: dict[str, Any] = {"path": path, "sent": t0}
        data = body if isinstance(body, str) else json.dumps(body)
        try:
            async with self.session.post(self.base + path, data=data,
                                         headers={"Content-Type": "application/json"}) as resp:
                seen["status"] = resp.status
                seen["head"] = time.time() - t0
                mid_task = asyncio.create_task(mid()) if mid is not None else None
                chunks, first, body_bytes, frames = 0, None, b"", []
                try:
                    async for line in resp.content:
                        body_bytes += line
                        if line.startswith(b"data: "):
                            frames.append(line.decode(errors="replace").strip()[:300])
                        if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                            chunks += 1
                            first = first if first is not None else time.time() - t0
                            if read_chunks is not None and chunks >= read_chunks:
                                seen["client_closed_after_chunks"] = chunks
                                resp.close()
                                break
                except aiohttp.ClientPayloadError as err:
                    seen["body_error"] = f"{type(err).__name__}: {err}"
                seen["first_data"] = first
                seen["data_chunks"] = chunks
                seen["done_marker"] = b"data: [DONE]" in body_bytes
                if frames:
                    seen["last_frames"] = frames[-2:]
                seen["end"] = time.time() - t0
                if chunks == 0:
                    seen["body"] = body_bytes[:400].decode(errors="replace")
                if mid_task is not None:
                    seen["mid"] = await mid_task
        except aiohttp.ClientError as err:
            seen["error"] = f"{type(err).__name__}: {err}"
            seen["end"] = time.time() - t0
        return seen


def generate(prompt: str, stream: bool = False, tokens: int = 8) -> dict[str, Any]:
    return {"text": prompt, "stream": stream, "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}


def chat(prompt: str, stream: bool = False, tokens: int = 8) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def completions(prompt: str, stream: bool = False, tokens: int = 8) -> dict[str, Any]:
    return {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "stream": stream}


# (name, what it checks, path, body, client options). Markers: see worker.py.
COMMON_PROBES: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("generate", "non-streamed /generate succeeds", "/generate", generate("[id=generate] hello"), {}),
    ("generate-stream", "streamed /generate succeeds", "/generate", generate("[id=generate-stream] hello", True), {}),
    ("completions", "non-streamed /v1/completions", "/v1/completions", completions("[id=completions] hi"), {}),
    ("completions-stream", "streamed /v1/completions", "/v1/completions",
     completions("[id=completions-stream] hi", True), {}),
    ("chat", "non-streamed /v1/chat/completions", "/v1/chat/completions", chat("[id=chat] hi"), {}),
    ("chat-stream", "streamed /v1/chat/completions with a usage chunk", "/v1/chat/completions",
     chat("[id=chat-stream] hi", True), {}),
    ("nonstream-timing", "non-streamed request whose answer takes 1.2 s: what the duration histograms record",
     "/generate", generate("[id=nonstream-timing][first=1.0][itl=0.1][tokens=3] x"), {}),
    ("client-disconnect", "the client closes a stream after 3 chunks (a 30-token stream at 0.3 s/token)",
     "/generate", generate("[id=client-disconnect][itl=0.3][tokens=30] x", True), {"read_chunks": 3}),
    ("worker-400", "the worker answers 400 (a client error the worker found)", "/generate",
     generate("[id=worker-400][status=400] x"), {}),
    ("stream-broken", "the worker resets the connection after 2 of 10 token chunks (a stream broken mid-body)",
     "/generate", generate("[id=stream-broken][break=2][itl=0.05][tokens=10] x", True), {}),
    ("stream-broken-close", "the worker closes the connection after 2 of 10 token chunks, without the last "
     "chunk of the chunked body", "/generate",
     generate("[id=stream-broken-close][break=2][cut=close][itl=0.05][tokens=10] x", True), {}),
    ("stream-broken-partial", "the worker sends half an SSE event after 2 token chunks, then resets",
     "/generate", generate("[id=stream-broken-partial][break=2][cut=partial][itl=0.05][tokens=10] x", True), {}),
    ("chat-stream-broken", "the worker resets a streamed chat completion after 2 chunks",
     "/v1/chat/completions", chat("[id=chat-stream-broken][break=2][itl=0.05][tokens=10] hi", True), {}),
    ("nonstream-broken", "non-streamed: the worker's head declares the length, half the body follows, then a "
     "reset", "/generate", generate("[id=nonstream-broken][break=1] x"), {}),
    ("gateway-400", "malformed JSON to /v1/chat/completions (the gateway answers itself)",
     "/v1/chat/completions", '{"model": ', {}),
]
# A success between them resets the breakers' consecutive-failure counts, so each failure is seen alone.
RECOVER = ("recover", "a plain request between failure probes", "/generate", generate("[id=recover] hello"), {})
# Last, because they trip the workers' circuit breakers (10 consecutive failures open one for 60 s):
# the final probe shows what a client gets then.
FAILURE_PROBES: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("worker-500", "every worker answers 500 to a non-streamed request", "/generate",
     generate("[id=worker-500][status=500] x"), {}),
    RECOVER,
    ("worker-500-stream", "every worker answers 500 to a streamed request (before any byte)", "/generate",
     generate("[id=worker-500-stream][status=500] x", True), {}),
    ("worker-500-again", "every worker answers 500 again, right after the previous failure", "/generate",
     generate("[id=worker-500-again][status=500] x"), {}),
    ("after-failures", "a plain request after the failures above", "/generate",
     generate("[id=after-failures] hello"), {}),
]
# Streamed request with head, first token and end far apart; scraped once mid-stream (before the first
# token) and once between first token and end, to see when each counter moves.
REGULAR_PROBES: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("stream-timing", "streamed /generate: head at 0.3 s, first token at 1.8 s, end at 3.0 s", "/generate",
     generate("[id=stream-timing][head=0.3][first=1.5][itl=0.3][tokens=5] x", True), {"mid_scrapes": (1.0, 2.4)}),
    ("stream-head-first", "streamed /generate as SGLang answers it (Starlette sends the head at once): head at "
     "0 s, first token at 2.0 s, end at 2.6 s", "/generate",
     generate("[id=stream-head-first][first=2.0][itl=0.3][tokens=3] x", True), {}),
]
PD_PROBES: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("pd-ttft-stream-head-first", "streamed PD /generate as SGLang answers it (Starlette sends the head at once): "
     "prefill answers at 0.1 s, decode's head at 0 s, its first token at 2.0 s, its end at 2.6 s", "/generate",
     generate("[id=pd-ttft-stream-head-first][prefill.head=0.1][decode.first=2.0][decode.itl=0.3][decode.tokens=3] x",
              True), {}),
    ("pd-ttft-stream", "streamed PD /generate: prefill answers at 0.4 s, decode's head at 0.8 s, its first "
     "token at 2.0 s, its end at 2.9 s", "/generate",
     generate("[id=pd-ttft-stream][prefill.head=0.4][decode.head=0.8][decode.first=1.2][decode.itl=0.3]"
              "[decode.tokens=4] x", True), {"mid_scrapes": (0.6, 1.7)}),
    ("pd-ttft-stream-slow-prefill", "streamed PD /generate: decode's head at 0.2 s and first token at 0.6 s, "
     "prefill answers only at 1.5 s, decode ends at 1.2 s", "/generate",
     generate("[id=pd-ttft-stream-slow-prefill][prefill.head=1.5][decode.head=0.2][decode.first=0.4]"
              "[decode.itl=0.2][decode.tokens=4] x", True), {}),
    ("pd-ttft-nonstream", "non-streamed PD /generate: prefill at 0.4 s, decode answers at 2.0 s", "/generate",
     generate("[id=pd-ttft-nonstream][prefill.head=0.4][decode.first=1.7][decode.itl=0.1][decode.tokens=4] x"),
     {}),
    ("pd-stream-broken-decode", "streamed PD: decode resets the connection after 2 of 10 token chunks",
     "/generate", generate("[id=pd-stream-broken-decode][decode.break=2][itl=0.05][tokens=10] x", True), {}),
]
PD_FAILURE_PROBES: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("pd-prefill-500", "the prefill worker answers 500", "/generate",
     generate("[id=pd-prefill-500][prefill.status=500] x"), {}),
    RECOVER,
    ("pd-decode-500", "the decode worker answers 500", "/generate",
     generate("[id=pd-decode-500][decode.status=500] x"), {}),
    RECOVER,
]


async def scrape(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url, headers={"Accept": "text/plain;version=0.0.4"}) as resp:
        return resp.status, await resp.text()


async def run_probe(session: aiohttp.ClientSession, router: RouterProcess, workers: list[CaptureWorker],
                    probe: tuple[str, str, str, Any, dict[str, Any]]) -> dict[str, Any]:
    name, what, path, body, opts = probe
    client = Client(session, router.url)
    _, text = await scrape(session, router.metrics_url)
    before = samples(text)
    marks = {id(w): len(w.log) for w in workers}
    mid = None
    if "mid_scrapes" in opts:
        async def mid() -> list[dict[str, Any]]:
            out, start, last = [], time.time(), before
            for at in opts["mid_scrapes"]:
                await asyncio.sleep(max(0.0, at - (time.time() - start)))
                _, now_text = await scrape(session, router.metrics_url)
                now = samples(now_text)
                out.append({"at_seconds_after_head": at, "changes": changes(last, now)})
                last = now
            return out
    seen = await client.send(path, body, read_chunks=opts.get("read_chunks"), mid=mid)
    await asyncio.sleep(SETTLE)
    _, text = await scrape(session, router.metrics_url)
    worker_log = [dict(role=w.role, **rec.as_dict()) for w in workers for rec in w.log[marks[id(w)]:]]
    for rec in worker_log:  # times relative to the client's send, like the client's own
        for key in ("arrived", "head", "first_token", "end"):
            if rec[key] is not None:
                rec[key] = round(rec[key] - seen["sent"], 4)
    seen = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in seen.items() if k != "sent"}
    return {"name": name, "what": what, "client": seen, "workers": worker_log,
            "changes": changes(before, samples(text))}


async def shutdown(router: RouterProcess, workers: list[CaptureWorker]) -> None:
    await asyncio.to_thread(router.stop)
    for w in workers:
        await w.stop()


def merged_into(path: Path, runs: dict[str, Any]) -> None:
    """Write `runs` into the JSON document at `path`, keeping the runs it already holds under other keys."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update(runs)
    path.write_text(json.dumps(dict(sorted(doc.items())), indent=1) + "\n")


async def make_unhealthy(session: aiohttp.ClientSession, router: RouterProcess, worker: CaptureWorker,
                         timeout: float = 60.0) -> dict[str, Any]:
    """Make `worker` answer 503 to health checks and wait until the gateway lists it unhealthy."""
    worker.healthy = False
    start = time.time()
    while time.time() - start < timeout:
        async with session.get(router.url + "/workers") as resp:
            listed = (await resp.json()).get("workers", [])
        if any(w.get("url") == worker.url and not w.get("is_healthy", True) for w in listed):
            return {"url": worker.url, "seconds_until_listed_unhealthy": round(time.time() - start, 1)}
        await asyncio.sleep(0.5)
    return {"url": worker.url, "seconds_until_listed_unhealthy": None}


async def capture(gateway_name: str, mode: str, out: Path, logs: Path) -> dict[str, Any]:
    gateway = find_gateway(gateway_name)
    roles = ["server", "server"] if mode == "regular" else ["prefill", "decode"]
    workers = [await CaptureWorker(role, MODEL, worker_metrics(role), dp_size=1).start() for role in roles]
    port, metrics_port = free_port(), free_port()
    if mode == "regular":
        argv = gateway_argv(gateway, worker_urls=[w.url for w in workers], port=port, metrics_port=metrics_port,
                            log_level="info")
    else:
        argv = gateway_argv(gateway, prefill=[(workers[0].url, BOOTSTRAP_PORT)], decode=[workers[1].url],
                            port=port, metrics_port=metrics_port, log_level="info")
    log_path = logs / f"{FILE_PREFIX[gateway_name]}_{mode}.log"
    router = RouterProcess(argv, port, metrics_port, log_path, expected_workers=len(workers), gateway=gateway)
    result: dict[str, Any] = {"gateway": gateway_name, "version": gateway.version, "mode": mode,
                              "argv": [Path(argv[0]).name, *argv[1:]], "probes": []}
    try:
        await asyncio.to_thread(router.start, 60)
        probes = (COMMON_PROBES + REGULAR_PROBES + FAILURE_PROBES if mode == "regular"
                  else COMMON_PROBES + PD_PROBES + PD_FAILURE_PROBES + FAILURE_PROBES)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.sleep(2.0)  # a load poll and a health check have run
            for probe in probes:
                result["probes"].append(await run_probe(session, router, workers, probe))
                print(f"  {gateway_name} {mode} {probe[0]}: {result['probes'][-1]['client'].get('status')}",
                      file=sys.stderr)
            await asyncio.sleep(2.0)
            code, engine = await scrape(session, router.url + "/engine_metrics")
            if mode == "regular":  # one worker fails its health checks: what the gateway reports then
                result["unhealthy_worker"] = await make_unhealthy(session, router, workers[1])
            _, metrics = await scrape(session, router.metrics_url)
        stem = FILE_PREFIX[gateway_name] + "_" + mode
        (out / f"{stem}_metrics.txt").write_text(metrics)
        suffix = "engine_metrics.txt" if code == 200 else f"engine_metrics_http_{code}.txt"
        (out / f"{stem}_{suffix}").write_text(engine)
        result["engine_metrics_status"] = code
    finally:
        await shutdown(router, workers)
    return result


async def main_async(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="gateway-capture-"))
    runs = {}
    for gateway in args.gateway or GATEWAYS:
        for mode in [args.mode] if args.mode else ["regular", "pd"]:
            print(f"capturing {gateway} {mode} (router log in {logs})", file=sys.stderr)
            runs[f"{gateway} {mode}"] = await capture(gateway, mode, out, logs)
    merged_into(out / "measurements.json", runs)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "gateway"))
    p.add_argument("--gateway", action="append", choices=GATEWAYS)
    p.add_argument("--mode", choices=["regular", "pd"])
    return asyncio.run(main_async(p.parse_args()))
