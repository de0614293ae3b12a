"""`slo-monitor demo` (what `make demo` runs): the main job on the embedded default.

Emulated SGLang deployments for the seed recipe's rows, the real gateway (smg 1.13 by default,
`--gateway sglang-router-0.3.2` for the older one) in front of one PD pair, the sidecar scraping all of
it, a live status table, and a printed line saying how to inject an incident and watch the burn rate
climb. A gateway that is not installed or does not start is said on the screen, and the demo goes on
without it. Runs until Ctrl-C (or `--duration`), then stops every process it started.
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

from monitor.commands.status import render_table
from monitor.config import Config, load_config
from monitor.conventions import DEFAULT_GATEWAY, GATEWAYS
from monitor.signals import on_stop_signals

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="emulated seed-recipe deployments + the sidecar + a live status table")
    p.add_argument("-c", "--config", help="deployments to emulate (default: the embedded Kimi-K2.6 recipe)")
    p.add_argument("--base-port", type=int, default=31000, help="first emulator port (control endpoint)")
    p.add_argument("--listen", default="127.0.0.1:9464", help="sidecar HOST:PORT")
    p.add_argument("--interval", type=float, default=2.0, help="scrape interval seconds")
    p.add_argument("--speed", type=float, default=1.0, help="emulated seconds per wall second")
    p.add_argument("--incident", action="append", default=[], metavar="SPEC",
                   help="inject at start, e.g. 'DEPLOYMENT:tpot_regression:3@+60s+5m'")
    p.add_argument("--gateway", choices=GATEWAYS, default=DEFAULT_GATEWAY,
                   help=f"which real gateway to put in front of a PD pair (default {DEFAULT_GATEWAY})")
    p.add_argument("--no-router", action="store_true", help="do not start a real gateway")
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


def _drop_router_targets(cfg: Config, keep: set[str], gateway: str) -> Config:
    """Router targets only where a gateway runs, each saying which one (the sidecar reads its version's counters)."""
    deps = [d.model_copy(update={"targets": [t.model_copy(update={"gateway": gateway}) if t.role == "router" else t
                                             for t in d.targets if t.role != "router" or d.name in keep]})
            for d in cfg.deployments]
    return cfg.model_copy(update={"deployments": deps})


async def run_demo(args: argparse.Namespace) -> int:
    from monitor.emulate import Emulator
    from monitor.sidecar import Sidecar

    base = demo_config(args.config)
    tmp = Path(tempfile.mkdtemp(prefix="slo-monitor-demo-"))
    # The emulated servers also write SGLang's per-request log, which the sidecar tails for goodput.
    emulator = Emulator(base, args.base_port, speed=args.speed, incidents=args.incident,
                        request_log_dir=tmp / "request-logs")
    routers = []
    sidecar = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    on_stop_signals(stop.set)
    try:
        await emulator.start()
        cfg = emulator.localized_config()
        with_router: set[str] = set()
        router_line = None
        pd = next((d for d in cfg.deployments if d.mode == "pd-disaggregated"), None)
        if pd is not None and not args.no_router:
            from monitor.emulate.router import launch_router

            try:
                routers.append(await asyncio.to_thread(
                    launch_router, emulator.layout.deployment(pd.name), log_path=tmp / "router.log",
                    gateway=args.gateway))
                with_router.add(pd.name)
                router_line = f"real gateway {routers[0].label} in front of {pd.name}: {routers[0].metrics_url}"
            except Exception as err:  # the demo goes on without the router, and says so on the screen
                router_line = f"NO GATEWAY: {args.gateway} did not start, {pd.name} runs without one: {err}"
                log.warning("%s", router_line)
        cfg = _drop_router_targets(cfg, with_router, args.gateway)
        cfg = _with_sidecar(cfg, args.listen, args.interval, args.recording or str(tmp / "recording.sqlite"))
        sidecar = Sidecar(cfg)
        port = await sidecar.start_http()
        task = asyncio.create_task(sidecar.run())
        first = cfg.deployments[0].name
        url = f"http://{cfg.sidecar.listen_host}:{port}"
        banner = [
            f"emulated {len(cfg.deployments)} deployments from the recipe; control endpoint {emulator.control_url}",
            f"sidecar: {url}/metrics  {url}/api/v1/status  (live table below; Ctrl-C stops everything)",
        ]
        if router_line:  # part of the banner, so the table's redraw does not wipe a failure off the screen
            banner.append(router_line)
        banner.append(
            "inject an incident and watch the burn rate climb:\n"
            f"  curl -s -X POST {emulator.control_url}/control/incident -H 'content-type: application/json' "
            + "-d '" + json.dumps({"deployment": first, "kind": "tpot_regression", "factor": 3}) + "'\n"
            f"  (kinds: tpot_regression ttft_spike queue_buildup restart down npu_overheat hbm_full kv_transfer_failure "
            f"metrics_disabled; clear: curl -X POST {emulator.control_url}/control/clear)"
        )
        print("\n".join(banner), flush=True)
        deadline = loop.time() + args.duration if args.duration else None
        while not stop.is_set():
            await asyncio.sleep(args.interval)
            table = render_table(sidecar.status(), color=sys.stdout.isatty())
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
        if sidecar is not None:
            await sidecar.close()
        for r in routers:
            await asyncio.to_thread(r.stop)
        await emulator.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # router log and the default recording live here


def _demo(args: argparse.Namespace) -> int:
    return asyncio.run(run_demo(args))
