"""Benchmark 7: /healthz while N /metrics requests run at once, with the page cache and without (issue 24 item 2).

One child process holds a real `Sidecar` of `deployments` deployments whose windows hold a few snapshots of
the real SGLang 0.5.23 exposition (tests/fixtures/real; no scraping: the state is fed directly), and
serves it twice on two ports from one event loop:

- cached: the shipped server (`Sidecar.start_http`): the page rendered at most once per scrape cycle, the
  state read on the loop in slices, the text and its gzip made in a worker thread;
- uncached: /metrics as it was before (prometheus_client's encoder over the registry, on the event loop,
  for every request; it ignored Accept-Encoding), beside the same /healthz.

This process is the client: for each round, each mode (alternating which goes first) and each N, a new
scrape cycle is simulated (the cached page is stale: the trial includes one render), N /metrics requests
are sent at once (Accept-Encoding: gzip, as Prometheus sends), and /healthz is probed every 20 ms from
its own connection until they are all answered. Reported: medians over rounds of the probes' p50, p99 and
max, the time to answer all N, and the ratio uncached / cached, measured side by side in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from bench import procs
from bench.table import markdown, median, quantile

MODES = ("uncached", "cached")
PROBE_EVERY = 0.02
GOAL_HEALTHZ_P99 = 0.1  # /healthz p99 under 30 concurrent /metrics at 200 deployments, with the cache


async def _child(deployments: int, cycles: int) -> None:
    from aiohttp import web
    from prometheus_client.exposition import choose_encoder

    from bench.growth import _config, _cycle, _Feed
    from monitor.sidecar import Sidecar

    clock = [1_800_000_000.0]
    sidecar = Sidecar(_config(deployments, None), clock=lambda: clock[0])
    feed = _Feed()
    for _ in range(cycles):
        clock[0] += 5.0
        _cycle(sidecar, feed, clock[0])
    cached = await sidecar.start_http(procs.HOST, 0)

    async def metrics(request: web.Request) -> web.Response:  # the handler before the cache, verbatim
        encoder, ctype = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(sidecar.registry), headers={"Content-Type": ctype})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok" if not sidecar.problems() else "unhealthy"})

    async def new_cycle(request: web.Request) -> web.Response:
        sidecar.scraper.cycles += 1  # what a completed scrape cycle does to the page's freshness
        return web.json_response({"renders": sidecar.metrics_page.renders})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/bench/cycle", new_cycle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, procs.HOST, 0)
    await site.start()
    uncached = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print("PORT", json.dumps({"cached": cached, "uncached": uncached}), flush=True)
    await asyncio.Event().wait()


async def _get(session, url: str) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    async with session.get(url) as r:
        body = await r.read()
    return time.perf_counter() - began, len(body)


async def _trial(base: str, control: str, n: int) -> dict[str, object]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=600)
    # auto_decompress off: "bytes" is what crossed the wire (the gzip body where the server sent one).
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout,
                                     auto_decompress=False) as s, aiohttp.ClientSession(timeout=timeout) as probe:
        await _get(probe, base + "/healthz")  # its connection is open before the load
        async with s.get(control + "/bench/cycle") as r:
            before = (await r.json())["renders"]
        began = time.perf_counter()
        pages = [asyncio.create_task(_get(s, base + "/metrics")) for _ in range(n)]
        probes: list[float] = []
        while not all(p.done() for p in pages):
            probes.append((await _get(probe, base + "/healthz"))[0])
            await asyncio.sleep(PROBE_EVERY)
        done = await asyncio.gather(*pages)
        took = time.perf_counter() - began
        async with s.get(control + "/bench/cycle") as r:
            renders = (await r.json())["renders"] - before
    return {"probes": probes, "all_answered": took, "bytes": done[0][1], "renders": renders}


def run(*, deployments: int = 200, cycles: int = 5, concurrency: tuple[int, ...] = (10, 30),
        rounds: int = 3) -> dict[str, object]:
    cmd = procs.python("-m", "bench.metrics_page", "--child", "--deployments", str(deployments),
                       "--cycles", str(cycles))
    trials: dict[str, list[dict[str, object]]] = {f"{m} {n}": [] for m in MODES for n in concurrency}
    with procs.started(cmd) as proc:
        assert proc.stdout is not None
        line = ""
        while not line.startswith("PORT "):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError(f"metrics_page child failed: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
        ports = json.loads(line[5:])
        urls = {m: f"http://{procs.HOST}:{ports[m]}" for m in MODES}
        control = urls["uncached"]
        for mode in MODES:  # warm-up: the first render of each imports and allocates what later ones reuse
            asyncio.run(_trial(urls[mode], control, 1))
        for r in range(rounds):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):  # alternate which goes first
                for n in concurrency:
                    trials[f"{mode} {n}"].append(asyncio.run(_trial(urls[mode], control, n)))
    return {"deployments": deployments, "cycles": cycles, "concurrency": list(concurrency), "rounds": rounds,
            "trials": trials}


def summary(res: dict[str, object]) -> dict[str, dict[str, float]]:
    out = {}
    for key, runs in res["trials"].items():  # type: ignore[attr-defined]
        out[key] = {
            "p50": median([quantile(t["probes"], 0.5) for t in runs]),
            "p99": median([quantile(t["probes"], 0.99) for t in runs]),
            "max": median([max(t["probes"]) for t in runs]),
            "all": median([t["all_answered"] for t in runs]),
            "bytes": median([t["bytes"] for t in runs]),
            "renders": median([t["renders"] for t in runs]),
            "probes": median([len(t["probes"]) for t in runs]),
        }
    return out


def render(res: dict[str, object]) -> str:
    s = summary(res)
    rows = []
    for n in res["concurrency"]:  # type: ignore[attr-defined]
        u, c = s[f"uncached {n}"], s[f"cached {n}"]
        for mode, v in (("uncached", u), ("cached", c)):
            rows.append([str(n), mode, f"{v['p50'] * 1e3:.1f}", f"{v['p99'] * 1e3:.1f}", f"{v['max'] * 1e3:.1f}",
                         f"{v['all']:.2f}", f"{v['bytes'] / 1e3:,.0f}", f"{v['renders']:.0f}"])
        rows.append([str(n), "ratio uncached / cached", f"{u['p50'] / c['p50']:.1f}x", f"{u['p99'] / c['p99']:.1f}x",
                     f"{u['max'] / c['max']:.1f}x", f"{u['all'] / c['all']:.1f}x", "", ""])
    table = markdown(["concurrent /metrics", "server", "/healthz p50 ms", "p99 ms", "max ms", "all answered s",
                      "kB on the wire per answer", "renders"], rows)
    return "\n".join([
        f"{res['deployments']} deployments, {res['cycles']} snapshots of the real SGLang exposition each; medians "
        f"over {res['rounds']} rounds, the two servers alternating within each round (one process, two ports, one "
        "event loop). \"uncached\" is /metrics as before issue 24 item 2 (rendered on the event loop per request, "
        "no gzip); \"cached\" is the shipped server, each trial starting with a stale page (one render). Clients "
        "send Accept-Encoding: gzip as Prometheus does; \"renders\" counts the cached server's renders in the trial.",
        "", table])


def goal_lines(res: dict[str, object]) -> list[tuple[str, str, str, str]]:
    s = summary(res)
    n = max(res["concurrency"])  # type: ignore[type-var]
    c = s[f"cached {n}"]
    return [(f"7. /healthz p99 under {n} concurrent /metrics, {res['deployments']} deployments (cached)",
             f"{c['p99'] * 1e3:.0f} ms (uncached {s[f'uncached {n}']['p99'] * 1e3:.0f} ms)",
             f"<= {GOAL_HEALTHZ_P99 * 1e3:.0f} ms", "met" if c["p99"] <= GOAL_HEALTHZ_P99 else "missed"),
            (f"7. renders for {n} concurrent /metrics in one cycle", f"{c['renders']:.0f}", "1",
             "met" if c["renders"] <= 1 else "missed")]


def _main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.metrics_page", description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--deployments", type=int, default=200)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.child:
        asyncio.run(_child(args.deployments, args.cycles))
        return
    res = run(deployments=args.deployments, cycles=args.cycles, concurrency=tuple(args.concurrency),
              rounds=args.rounds)
    print(render(res))
    for goal in goal_lines(res):
        print(" | ".join(goal))


if __name__ == "__main__":
    _main()
