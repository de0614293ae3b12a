"""`slo-monitor demo` (what `make demo` runs): the main job on the embedded default, on real traffic.

Emulated SGLang servers for the seed recipe's rows, a real gateway in front of each deployment (smg 1.13
by default, `--gateway sglang-router-0.3.2` for the older one), and a built-in load generator per
deployment shaped like the row's bench_serving command (concurrency, input/output lengths, prefix-cache
share) sending real streamed requests through its gateway. The emulated servers run no synthetic load:
the gateways' own metrics, the request logs and the SLO state all come from the requests that flowed.
The sidecar scrapes all of it; a live status table, and a printed line saying how to inject an incident
and watch the burn rate climb. A gateway that is not installed or does not start is said on the screen,
and its deployments get their traffic from the load generator directly (it plays the gateway's part).
Runs until Ctrl-C (or `--duration`), then stops every process it started.

The recipes' concurrencies stream far more tokens than a laptop serves (~17k tokens/s for the embedded
rows), so every row's concurrency is scaled down by one factor to fit `--max-tokens-per-second`
(bench/emulator.py measures what the emulator sustains); the banner shows the recipe's and the
demo's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from monitor.commands.status import render_table
from monitor.config import Config, Target, load_config
from monitor.conventions.names import DEFAULT_GATEWAY, GATEWAYS
from monitor.signals import on_stop_signals

log = logging.getLogger(__name__)
DEFAULT_TOKENS_PER_SECOND = 1000.0  # about half a core for emulator, clients and sidecar together


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="emulated seed-recipe deployments on real traffic + the sidecar + a live table")
    p.add_argument("-c", "--config", help="deployments to emulate (default: the embedded Kimi-K2.6 recipe)")
    p.add_argument("--base-port", type=int, default=31000, help="first emulator port (control endpoint)")
    p.add_argument("--listen", default="127.0.0.1:9464", help="sidecar HOST:PORT")
    p.add_argument("--interval", type=float, default=2.0, help="scrape interval seconds")
    p.add_argument("--speed", type=float, default=1.0, help="emulated seconds per wall second")
    p.add_argument("--incident", action="append", default=[], metavar="SPEC",
                   help="inject at start, e.g. 'DEPLOYMENT:tpot_regression:3@+60s+5m'")
    p.add_argument("--gateway", choices=GATEWAYS, default=DEFAULT_GATEWAY,
                   help=f"which real gateway to put in front of each deployment (default {DEFAULT_GATEWAY})")
    p.add_argument("--no-router", action="store_true",
                   help="no gateway: the load generator sends to the servers itself (PD: both halves)")
    p.add_argument("--max-tokens-per-second", type=float, default=DEFAULT_TOKENS_PER_SECOND,
                   help="scale every row's bench concurrency by one factor so all traffic streams about this "
                        f"many tokens a second (default {DEFAULT_TOKENS_PER_SECOND:g})")
    p.add_argument("--synthetic", action="store_true",
                   help="the emulator's built-in synthetic load instead of real requests")
    p.add_argument("--recording", help="SQLite recording path (default: a temp file)")
    p.add_argument("--duration", type=float, default=0.0, help="stop after N seconds (0: until Ctrl-C)")
    p.add_argument("--no-table", action="store_true", help="log instead of redrawing the status table")
    p.set_defaults(func=_demo)


def demo_config(path: str | None) -> Config:
    if path:
        return load_config(path)
    from monitor.recipes import default_config

    return default_config(add_bucket_flags=True)


def _with_sidecar(cfg: Config, listen: str, interval: float, recording: str) -> Config:
    from monitor.commands.run import parse_listen

    host, port = parse_listen(listen)
    side = cfg.sidecar.model_copy(update={
        "listen_host": host, "listen_port": port, "scrape_interval_seconds": interval,
        "scrape_timeout_seconds": min(cfg.sidecar.scrape_timeout_seconds, interval),
        "recording_path": recording, "recording_interval_seconds": max(interval, 5.0),
    })
    return cfg.model_copy(update={"sidecar": side})


def with_routers(cfg: Config, routers: dict[str, Any], gateway: str) -> Config:
    """Router targets exactly for the deployments that have a running router (its Prometheus port), each
    saying which gateway it is (the sidecar reads that version's counters)."""
    deps = []
    for d in cfg.deployments:
        targets = [t for t in d.targets if t.role != "router"]
        if d.name in routers:
            targets.append(Target(role="router", url=routers[d.name].metrics_url, name=f"{d.name}-router",
                                  gateway=gateway))
        deps.append(d.model_copy(update={"targets": targets}))
    return cfg.model_copy(update={"deployments": deps})


def plan_load(emulator: Any, cfg: Config, budget: float) -> dict[str, Any]:
    """Each deployment's LoadShape from its recipe row, concurrencies scaled by one factor to fit `budget`."""
    from monitor.emulate.loadgen import LoadShape

    shapes = {d.name: LoadShape.from_deployment(d) for d in cfg.deployments}
    rates = {}
    for name, shape in shapes.items():
        model = emulator.deployments[name].model
        out = shape.output_tokens * (1 + shape.range_ratio) / 2
        uncached = shape.input_tokens * (1 + shape.range_ratio) / 2 * (1 - shape.prefix_share)
        seconds = model.ttft_nominal * (0.15 + 0.85 * uncached / model.uncached_nominal) + out * model.tpot_median
        rates[name] = shape.concurrency * out / max(seconds, 1e-3)
    scale = min(1.0, budget / max(sum(rates.values()), 1e-9))
    return {name: shape.scaled(scale) for name, shape in shapes.items()}


async def start_routers(emulator: Any, cfg: Config, tmp: Path, gateway: str) -> tuple[dict[str, Any], list[str]]:
    """A real gateway per deployment; returns those that run and the banner lines (failures said plainly)."""
    from monitor.emulate.router import GatewayNotFound, find_gateway, launch_router

    try:
        gw = find_gateway(gateway)
    except GatewayNotFound as err:
        line = f"NO GATEWAY: {gateway} did not start, the deployments run without one: {err}"
        log.warning("%s", line)
        return {}, [line]

    async def one(name: str) -> tuple[str, Any]:
        # Twelve gateways starting at once on two cores: one that is slow or loses a race for its port gets a
        # second try before the demo goes on without it.
        err: Exception | None = None
        for attempt in range(2):
            try:
                return name, await asyncio.to_thread(launch_router, emulator.layout.deployment(name),
                                                     log_path=tmp / f"gateway-{name}.log", gateway=gw)
            except Exception as e:  # noqa: BLE001 - the demo goes on without this gateway, and says so on screen
                err = e
                log.warning("gateway for %s did not start (attempt %d): %s", name, attempt + 1, e)
        return name, err

    results = dict(await asyncio.gather(*(one(d.name) for d in cfg.deployments)))
    routers = {n: r for n, r in results.items() if not isinstance(r, Exception)}
    failed = {n: r for n, r in results.items() if isinstance(r, Exception)}
    lines = []
    if routers:
        first = next(iter(routers.values()))
        lines.append(f"real gateway {first.label} in front of {len(routers)} deployment(s), e.g. {first.url}/generate "
                     "(its metrics are scraped too)")
    if failed:
        name, err = next(iter(failed.items()))
        lines.append(f"NO GATEWAY: {gateway} did not start for {len(failed)} deployment(s), which run without one "
                     f"(the load generator sends to their servers); {name}: {err}")
        log.warning("%s", lines[-1])
    return routers, lines


def _traffic_line(gens: dict[str, Any], seconds: float) -> str:
    done = sum(g.stats.completed for g in gens.values())
    failed = sum(g.stats.failed for g in gens.values())
    tokens = sum(g.stats.tokens for g in gens.values())
    line = (f"real traffic: {done} requests answered, {failed} failed, "
            f"{tokens / max(seconds, 1e-9):.0f} tokens/s streamed")
    errs = [f"{n}: {g.stats.last_error}" for n, g in gens.items() if g.stats.last_error]
    return line + (f"; last error {errs[-1]}" if errs else "")


async def run_demo(args: argparse.Namespace) -> int:
    from monitor.emulate import INCIDENT_KINDS, Emulator
    from monitor.emulate.loadgen import LoadGenerator, Servers
    from monitor.sidecar import Sidecar

    base = demo_config(args.config)
    tmp = Path(tempfile.mkdtemp(prefix="slo-monitor-demo-"))
    # The emulated servers also write SGLang's per-request log, which the sidecar tails for goodput.
    emulator = Emulator(base, args.base_port, speed=args.speed, incidents=args.incident,
                        request_log_dir=tmp / "request-logs", synthetic=args.synthetic)
    routers: dict[str, Any] = {}
    gens: dict[str, LoadGenerator] = {}
    load_tasks: list[asyncio.Task[None]] = []
    load_stop = asyncio.Event()
    sidecar = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    on_stop_signals(stop.set)
    try:
        await emulator.start()
        cfg = emulator.localized_config()
        gateway_lines: list[str] = []
        if not args.no_router:
            routers, gateway_lines = await start_routers(emulator, cfg, tmp, args.gateway)
        cfg = with_routers(cfg, routers, args.gateway)
        cfg = _with_sidecar(cfg, args.listen, args.interval, args.recording or str(tmp / "recording.sqlite"))
        shapes = {} if args.synthetic else plan_load(emulator, cfg, args.max_tokens_per_second)
        recipe = {} if args.synthetic else plan_load(emulator, cfg, float("inf"))
        for i, (name, shape) in enumerate(shapes.items()):
            layout = emulator.layout.deployment(name)
            servers = Servers(mixed=tuple(s.url for s in layout.by_role("server")),
                              prefill=tuple(s.url for s in layout.by_role("prefill")),
                              decode=tuple(s.url for s in layout.by_role("decode")))
            gateway = routers[name].url if name in routers else None
            gens[name] = LoadGenerator(name, shape, gateway=gateway, servers=servers, seed=i)
            load_tasks.append(asyncio.create_task(gens[name].run(load_stop)))
        sidecar = Sidecar(cfg)
        port = await sidecar.start_http()
        task = asyncio.create_task(sidecar.run())
        first = cfg.deployments[0].name
        url = f"http://{cfg.sidecar.listen_host}:{port}"
        banner = [
            f"emulated {len(cfg.deployments)} deployments from the recipe; control endpoint {emulator.control_url}",
            f"sidecar: {url}/metrics  {url}/api/v1/status  (live table below; Ctrl-C stops everything)",
        ]
        banner += gateway_lines  # in the banner, so the table's redraw does not wipe a failure off the screen
        if gens:
            banner.append("load generators (bench_serving's shape; clients: demo/recipe, in+out tokens, prefix): "
                          + "; ".join(f"{n} {s.concurrency}/{recipe[n].concurrency} {s.input_tokens}+"
                                      f"{s.output_tokens}{f' {s.prefix_share:.0%}' if s.prefix_share else ''}"
                                      for n, s in shapes.items()))
        else:
            banner.append("synthetic load (--synthetic): no real requests")
        banner.append(
            "inject an incident and watch the burn rate climb:\n"
            f"  curl -s -X POST {emulator.control_url}/control/incident -H 'content-type: application/json' "
            + "-d '" + json.dumps({"deployment": first, "kind": "tpot_regression", "factor": 3}) + "'\n"
            f"  (kinds: {' '.join(INCIDENT_KINDS)}; clear: curl -X POST {emulator.control_url}/control/clear)"
        )
        print("\n".join(banner), flush=True)
        started = loop.time()
        deadline = started + args.duration if args.duration else None
        while not stop.is_set():
            await asyncio.sleep(args.interval)
            table = render_table(sidecar.status(), color=sys.stdout.isatty())
            if gens:
                table += "\n" + _traffic_line(gens, loop.time() - started)
            if args.no_table or not sys.stdout.isatty():
                log.info("status\n%s", table)
            else:
                sys.stdout.write("\x1b[H\x1b[2J" + "\n".join(banner) + "\n\n" + table + "\n")
                sys.stdout.flush()
            if deadline is not None and loop.time() >= deadline:
                break
        sidecar.stop()
        await task
        return 0
    finally:
        load_stop.set()
        await asyncio.gather(*load_tasks, return_exceptions=True)
        if sidecar is not None:
            await sidecar.close()
        # All at once: smg 1.13 takes ~5 s to shut down after SIGTERM.
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in routers.values()))
        await emulator.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # router logs and the default recording live here


def _demo(args: argparse.Namespace) -> int:
    return asyncio.run(run_demo(args))
