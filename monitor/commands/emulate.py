"""`slo-monitor emulate`: serve emulated SGLang deployments from a config on 127.0.0.1.

A deployment whose config has a router target gets the real gateway `slo-monitor demo` starts (smg 1.13 by
default, started by demo's own code), so every target of the localized config (`--write-config`) is served:
with `--gateway none`, or when the default gateway is not installed or does not start, that deployment's
router target is left out of the localized config and one line says so.

The built-in (synthetic) load of a deployment is Poisson arrivals at the rate that keeps its recipe's
bench_serving `--max-concurrency` (`launch.bench.max_concurrency`) in flight on average (Little's law,
monitor/emulate/model.py `recipe_concurrency`, `nominal_rate`); the recipe's TPOT is taken as measured at that
concurrency. `--concurrency N` puts N in place of that number for every deployment, for the emulator only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from monitor.commands.demo import start_routers, with_routers
from monitor.config import Config
from monitor.conventions.names import DEFAULT_GATEWAY, GATEWAYS
from monitor.interop.load import load_config
from monitor.signals import on_stop_signals

if TYPE_CHECKING:
    from monitor.emulate.router import RouterProcess

NO_GATEWAY = "none"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "emulate",
        help="serve emulated SGLang servers (requests, /metrics, /health) and npu-exporters for a config",
        description="Emulate every deployment of CONFIG on 127.0.0.1: SGLang 0.5.23 servers that answer "
        "/generate and the OpenAI routes (streamed, on the emulated scheduler's clock), /metrics with real "
        "names, labels and buckets, /health, /server_info, an npu-exporter per deployment, a real gateway in "
        "front of each deployment that has a router target, and a control endpoint on BASE_PORT for incidents.",
    )
    p.add_argument("-c", "--config", required=True, help="sidecar config (YAML/JSON)")
    p.add_argument("--base-port", type=int, default=31000, help="control port; servers follow (default 31000)")
    p.add_argument("--incident", action="append", default=[], metavar="SPEC",
                   help="DEPLOYMENT[/ROLE]:KIND[:FACTOR][@START+DURATION][~RAMP], e.g. kimi:tpot_regression:2@+5m "
                        "(~2m: ramp in over 2 minutes instead of a step; npu_overheat heats and cools on its own)")
    p.add_argument("--request-log", metavar="DIR", help="write SGLang-format per-request metrics files here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speed", type=float, default=1.0, help="emulated seconds per real second (0: frozen)")
    p.add_argument("--no-synthetic", action="store_true",
                   help="no built-in load: serve only the requests clients send (/generate, /v1/...)")
    # A string, parsed in _run: argparse's own type errors come with the usage text, not in one line.
    p.add_argument("--concurrency", metavar="N",
                   help="built-in load of every deployment: N requests in flight on average (Poisson arrivals "
                        "by Little's law) in place of the recipe's launch.bench.max_concurrency (default: that, "
                        "per deployment)")
    p.add_argument("--gateway", choices=(*GATEWAYS, NO_GATEWAY), default=None,
                   help="real gateway to start in front of each deployment that has a router target (default "
                        f"{DEFAULT_GATEWAY} when installed, as `slo-monitor demo`; none: start none and leave the "
                        "router targets out of the localized config)")
    p.add_argument("--write-config", metavar="FILE", help="write the localized config (targets on these ports)")
    p.set_defaults(func=_run)


def _write_config(path: str, config: Config) -> None:
    """Write `config` to `path` whole or not at all (a reader polling for the file never sees half of it)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            yaml.safe_dump(config.model_dump(mode="json", exclude_none=True), fh, sort_keys=False)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ValueError(f"--write-config {path}: {err.strerror or err}") from err  # one line, exit 2 (cli.main)


def _error(line: str) -> int:
    print(f"slo-monitor: error: {line}", file=sys.stderr)
    return 2


def _parse_concurrency(value: str | None, synthetic: bool) -> int | None:
    """--concurrency as a positive int (None: the recipe's); ValueError with the one line to print."""
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"--concurrency {value!r}: not a whole number; pass N >= 1 (requests in flight)") from None
    if n < 1:
        raise ValueError(f"--concurrency {value}: must be at least 1 (requests in flight; --no-synthetic "
                         "runs no built-in load)")
    if not synthetic:
        raise ValueError(f"--concurrency {value} sets the built-in load, which --no-synthetic turns off: "
                         "pass one of them")
    return n


def _with_concurrency(config: Config, concurrency: int) -> Config:
    """`config` with every deployment's recipe bench_serving --max-concurrency set to `concurrency`: the
    emulator derives its synthetic load (Little's law) and the decode batch its latency model is calibrated
    at from that one number, so in flight follows the flag as it follows the recipe's. Only a rate, with the
    model still calibrated at the recipe's number, would feed back: each added request slows every decode
    step, keeps the others in flight longer, and at 3x the recipe's concurrency the queue grew past 8x."""
    deployments = []
    for dep in config.deployments:
        launch = dict(dep.launch) if isinstance(dep.launch, dict) else {}
        bench = launch.get("bench")
        launch["bench"] = {**(bench if isinstance(bench, dict) else {}), "max_concurrency": concurrency}
        deployments.append(dep.model_copy(update={"launch": launch}))
    return config.model_copy(update={"deployments": deployments})


def _fronted(config: Config) -> list[str]:
    """Deployments whose config names a router target: the ones a gateway is started for."""
    return [d.name for d in config.deployments if any(t.role == "router" for t in d.targets)]


def _choose_gateway(requested: str | None, config: Config) -> tuple[str | None, str]:
    """(gateway to start or None, why none is started). A gateway asked for by name that is not installed
    is an error (ValueError, one line); the default one missing only leaves the router targets out."""
    from monitor.emulate.router import GatewayNotFound, find_gateway, gateway_spec

    if not _fronted(config):
        if requested not in (None, NO_GATEWAY):  # asked for, but there is nothing to put it in front of
            print(f"slo-monitor emulate: --gateway {requested}: no deployment of this config has a router target; "
                  "no gateway started", file=sys.stderr, flush=True)
        return None, ""
    if requested == NO_GATEWAY:
        return None, "--gateway none starts no gateway"
    name = requested or DEFAULT_GATEWAY
    try:
        find_gateway(name)
    except GatewayNotFound as err:
        if requested:
            raise ValueError(f"--gateway {name}: {err}") from None
        return None, f"the default gateway {name} is not installed (install it with {gateway_spec(name).install})"
    return name, ""


async def _serve(args: argparse.Namespace, config: Config, emulated: Config, gateway: str | None,
                 why_none: str) -> None:
    """Run the emulator on `emulated` (`config` with --concurrency applied), and the gateways, until
    SIGINT/SIGTERM; stop everything started. The localized config written is `config`'s."""
    from monitor.emulate.server import Emulator

    stop = asyncio.Event()
    on_stop_signals(stop.set)  # before the gateways start (seconds): a SIGTERM meanwhile still stops cleanly
    emu = Emulator(emulated, args.base_port, speed=args.speed, seed=args.seed, incidents=args.incident,
                   request_log_dir=args.request_log, synthetic=not args.no_synthetic)
    await emu.start()
    routers: dict[str, RouterProcess] = {}
    tmp = Path(tempfile.mkdtemp(prefix="slo-monitor-emulate-"))  # the gateways' logs
    try:
        local = emu.localized_config(args.request_log)
        # The recipe's launch record, not the emulator's --concurrency: the load is this run's, not the recipe's.
        local = local.model_copy(update={"deployments": [
            d.model_copy(update={"launch": orig.launch}) for d, orig in zip(local.deployments, config.deployments)]})
        fronted = _fronted(config)
        if gateway is not None:
            # demo's code, so both commands start the same gateway the same way (retry, failures said).
            only = local.model_copy(update={"deployments": [d for d in local.deployments if d.name in fronted]})
            # Its banner lines speak of demo's load generator; the lines below say what holds here (a failure's
            # cause is in the warnings it logs).
            routers, _ = await start_routers(emu, only, tmp, gateway)
            if routers:  # stderr: stdout's first line is the ready JSON that scripts read
                label = next(iter(routers.values())).label
                print(f"slo-monitor emulate: real gateway {label} in front of "
                      + ", ".join(f"{name} ({r.url})" for name, r in routers.items()), file=sys.stderr, flush=True)
        # Router targets exactly where a gateway runs: a written config names no target nobody serves.
        local = with_routers(local, routers, gateway or DEFAULT_GATEWAY)
        missing = [name for name in fronted if name not in routers]
        if missing:
            why = why_none or f"{gateway} did not start for them (the warnings above say why)"
            print(f"slo-monitor emulate: left out the router targets of {len(missing)} deployment(s) "
                  f"({', '.join(missing)}): {why}; `slo-monitor demo` or --gateway {DEFAULT_GATEWAY} starts a real "
                  "gateway in front of each", file=sys.stderr, flush=True)
        if args.write_config:
            # From the ports bound, once they are: with --base-port 0 the OS picked them, and the plan made
            # before binding pointed every target at ports 1, 2, 3...
            _write_config(args.write_config, local)
        print(json.dumps({
            "control_url": emu.control_url,
            "deployments": {name: [s["name"] + " " + str(s["port"]) for s in st["servers"]]
                            for name, st in emu.state()["deployments"].items()},
            "gateways": {name: r.url for name, r in routers.items()},
        }), flush=True)
        await stop.wait()
    finally:
        # All at once: smg 1.13 takes ~5 s to shut down after SIGTERM.
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in routers.values()))
        await emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _run(args: argparse.Namespace) -> int:
    from monitor.emulate.server import PortUnavailable
    from monitor.emulate.topology import plan

    config = load_config(args.config)
    count = plan(config, 0).port_count
    if args.base_port != 0 and not 1 <= args.base_port <= 65536 - count:
        return _error(f"--base-port {args.base_port}: this config needs {count} consecutive ports from it, within "
                      "1-65535; pass another, or 0 to let the OS pick free ports")
    try:
        concurrency = _parse_concurrency(args.concurrency, synthetic=not args.no_synthetic)
        gateway, why_none = _choose_gateway(args.gateway, config)
    except ValueError as err:
        return _error(str(err))
    emulated = _with_concurrency(config, concurrency) if concurrency is not None else config
    try:
        asyncio.run(_serve(args, config, emulated, gateway, why_none))
    except PortUnavailable as err:  # a port in use is the user's to choose around: one line, not a traceback
        return _error(f"{err}: pass another --base-port (this config needs {count} consecutive free ports from "
                      "it), or --base-port 0 to let the OS pick free ports")
    return 0
