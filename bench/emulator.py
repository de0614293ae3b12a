"""Benchmark 4: real requests per second and streamed tokens per second the emulator sustains.

The emulator (`slo-monitor emulate --no-synthetic`, one mixed server, its own process) serves streamed
`/generate` requests from the built-in load generator (monitor/emulate/loadgen.py, another process's
worth of work in this one), straight to the server (no gateway: the gateway's cost is its own). Each
step offers more load, as more closed-loop clients:
  - tokens: 200-token outputs at ~10 ms TPOT (the step's client count is the recipe concurrency the
    emulator calibrates at), so chunks dominate (one SSE chunk per token, as SGLang streams);
  - requests: 2-token outputs with a ~20 ms TTFT, so per-request work dominates.
A step is *sustained* while the client-side TPOT (first to last chunk) stays within 2 % of the TPOT the
server's own histogram recorded for the same requests (the agreement test's tolerance) and nothing
failed: past that, the emulator delivers tokens later than its scheduler produced them. Tokens per
chunk shows when a stream that woke late sent several due tokens at once (SGLang's tokenizer manager
coalesces the same way). The emulator's CPU per 1000 tokens and per request is the cost of that load.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.procs import HOST, cpu_seconds
from bench.table import markdown
from monitor.config import parse_config
from monitor.emulate import find_free_base_port, plan
from monitor.emulate.loadgen import LoadGenerator, LoadShape, Servers
from monitor.parse.exposition import parse

TPOT = "sglang:request_time_per_output_token_seconds"
TOLERANCE = 0.02


def _config(kind: str, clients: int) -> dict[str, Any]:
    # TPOT target 15 ms -> ~10 ms per token: the emulator calibrates TPOT at the recipe's concurrency, here the
    # step's client count, so each step offers ~clients x 100 tokens/s. TTFT 20-90 ms.
    out = 200 if kind == "tokens" else 2
    return {"deployments": [{"name": "bench", "model": "bench/model", "tpot_target_seconds": 0.015,
                             "ttft_target_seconds": 0.2 if kind == "tokens" else 0.05, "input_tokens": 64,
                             "output_tokens": out,
                             "launch": {"max_running_requests": 1024, "bench": {"max_concurrency": clients}}}]}


async def _server_tpot(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    async with session.get(url, headers={"Accept": "text/plain"}) as resp:
        text = await resp.text()
    s = c = 0.0
    for smp in parse(text, {TPOT + "_sum", TPOT + "_count"}).selected:
        if smp.name.endswith("_sum"):
            s += smp.value
        else:
            c += smp.value
    return s, c


async def _step(server: str, pid: int, kind: str, clients: int, seconds: float) -> dict[str, Any]:
    out = 200 if kind == "tokens" else 2
    gen = LoadGenerator("bench", LoadShape(clients, 64, out), servers=Servers(mixed=(server,)), seed=clients)
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as session:
        task = asyncio.create_task(gen.run(stop))
        await asyncio.sleep(min(2.0, seconds / 4))  # warm: every client has a request in flight
        s0, c0 = await _server_tpot(session, server + "/metrics")
        done0, tok0, tp0, tpn0 = gen.stats.completed, gen.stats.tokens, gen.stats.tpot_sum, gen.stats.tpot_count
        chunks0 = gen.stats.chunks
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(seconds)
        cpu1, t1 = cpu_seconds(pid), time.monotonic()
        done1, tok1, tp1, tpn1 = gen.stats.completed, gen.stats.tokens, gen.stats.tpot_sum, gen.stats.tpot_count
        chunks1 = gen.stats.chunks
        s1, c1 = await _server_tpot(session, server + "/metrics")
        stop.set()
        await task
    span = t1 - t0
    server_tpot = (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan")
    client_tpot = (tp1 - tp0) / (tpn1 - tpn0) if tpn1 > tpn0 else float("nan")
    lag = client_tpot / server_tpot - 1 if server_tpot == server_tpot and client_tpot == client_tpot else 0.0
    requests, tokens, cpu = done1 - done0, tok1 - tok0, cpu1 - cpu0
    return {"kind": kind, "clients": clients, "req_s": requests / span, "tok_s": tokens / span,
            "cpu": cpu / span, "cpu_per_1k_tokens": cpu / tokens * 1000 if tokens else float("nan"),
            "cpu_per_request": cpu / requests if requests else float("nan"), "tpot_lag": lag,
            "tokens_per_chunk": tokens / (chunks1 - chunks0) if chunks1 > chunks0 else float("nan"),
            "failed": gen.stats.failed, "sustained": gen.stats.failed == 0 and (kind == "requests" or abs(lag) < TOLERANCE)}


def _start(kind: str, clients: int, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    config = _config(kind, clients)
    cfg = tmp / f"{kind}-{clients}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    base = find_free_base_port(plan(parse_config(config), 0).port_count)
    proc = subprocess.Popen([sys.executable, "-m", "monitor", "emulate", "-c", str(cfg), "--base-port", str(base),
                             "--no-synthetic"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    line, seen = b"", []
    while not line.startswith(b"{"):
        line = proc.stdout.readline()
        seen.append(line.decode(errors="replace"))
        if not line:
            proc.wait(10)
            raise RuntimeError(f"the emulator exited ({proc.returncode}) before it was ready: {''.join(seen)[-2000:]}")
    # Keep reading what it logs, so a full pipe never blocks it.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    port = int(json.loads(line)["deployments"]["bench"][0].split()[-1])
    return proc, f"http://{HOST}:{port}"


def run(*, seconds: float = 10.0, token_clients: tuple[int, ...] = (10, 30, 60, 120, 240),
        request_clients: tuple[int, ...] = (16, 64, 256)) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory() as d:
        for kind, levels in (("tokens", token_clients), ("requests", request_clients)):
            for n in levels:
                proc, url = _start(kind, n, Path(d))
                try:
                    results.append(asyncio.run(_step(url, proc.pid, kind, n, seconds)))
                finally:
                    proc.terminate()
                    proc.wait(10)
    return results


def render(results: list[dict[str, Any]]) -> str:
    rows = [[r["kind"], str(r["clients"]), f"{r['req_s']:.0f}", f"{r['tok_s']:.0f}", f"{r['cpu'] * 100:.0f} %",
             f"{r['cpu_per_1k_tokens'] * 1000:.0f} ms" if r["kind"] == "tokens" else f"{r['cpu_per_request'] * 1e3:.2f} ms",
             f"{r['tpot_lag'] * 100:+.1f} %" if r["kind"] == "tokens" else "–",
             f"{r['tokens_per_chunk']:.2f}" if r["kind"] == "tokens" else "–",
             "yes" if r["sustained"] else f"no ({r['failed']} failed)" if r["failed"] else "no"] for r in results]
    table = markdown(["load", "clients", "requests/s", "tokens/s", "emulator CPU", "CPU per 1k tokens / request",
                      "client TPOT vs server", "tokens/chunk", "sustained"], rows)
    tok = [r for r in results if r["kind"] == "tokens" and r["sustained"]]
    req = [r for r in results if r["kind"] == "requests" and r["sustained"]]
    lines = [table, ""]
    if tok:
        best = max(tok, key=lambda r: r["tok_s"])
        single = [r for r in tok if r["tokens_per_chunk"] < 1.05] or tok
        one = max(single, key=lambda r: r["tok_s"])
        lines.append(f"- Streamed tokens: {best['tok_s']:.0f} tokens/s sustained here "
                     f"({best['tokens_per_chunk']:.2f} tokens per chunk: a late stream sends what is due in one "
                     f"chunk, as SGLang's tokenizer manager does); one chunk per token up to {one['tok_s']:.0f} "
                     f"tokens/s, at {one['cpu_per_1k_tokens'] * 1000:.0f} ms of emulator CPU per 1000 tokens.")
    if req:
        best = max(req, key=lambda r: r["req_s"])
        lines.append(f"- Requests: {best['req_s']:.0f} requests/s sustained; ~{best['cpu_per_request'] * 1e3:.2f} ms "
                     f"of emulator CPU each, ~{1 / best['cpu_per_request']:.0f} requests/s per full core.")
    lines.append("- The demo's load generator stays under these (`slo-monitor demo --max-tokens-per-second`), "
                 "and the agreement test streams ~500 tokens/s.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(run(seconds=5.0, token_clients=(5, 20), request_clients=(16,))))
