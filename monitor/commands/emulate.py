"""`slo-monitor emulate`: serve emulated SGLang deployments from a config on 127.0.0.1."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

import yaml

from monitor.config import Config
from monitor.interop.load import load_config


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "emulate",
        help="serve emulated SGLang servers (requests, /metrics, /health) and npu-exporters for a config",
        description="Emulate every deployment of CONFIG on 127.0.0.1: SGLang 0.5.23 servers that answer "
        "/generate and the OpenAI routes (streamed, on the emulated scheduler's clock), /metrics with real "
        "names, labels and buckets, /health, /server_info, an npu-exporter per deployment, and a control "
        "endpoint on BASE_PORT for incidents.",
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


def _run(args: argparse.Namespace) -> int:
    from monitor.emulate.server import PortUnavailable, run_emulator
    from monitor.emulate.topology import plan

    config = load_config(args.config)
    count = plan(config, 0).port_count
    if args.base_port != 0 and not 1 <= args.base_port <= 65536 - count:
        print(f"slo-monitor: error: --base-port {args.base_port}: this config needs {count} consecutive ports "
              f"from it, within 1-65535; pass another, or 0 to let the OS pick free ports", file=sys.stderr)
        return 2

    def ready(emu: Any) -> None:
        if args.write_config:
            # From the ports bound, once they are: with --base-port 0 the OS picked them, and the plan made
            # before binding (written here before) pointed every target at ports 1, 2, 3...
            _write_config(args.write_config, emu.localized_config(args.request_log))
        print(json.dumps({"control_url": emu.control_url, "deployments": {
            name: [s["name"] + " " + str(s["port"]) for s in st["servers"]]
            for name, st in emu.state()["deployments"].items()}}), flush=True)

    try:
        run_emulator(config, args.base_port, speed=args.speed, seed=args.seed, incidents=args.incident,
                     request_log_dir=args.request_log, ready=ready, synthetic=not args.no_synthetic)
    except PortUnavailable as err:  # a port in use is the user's to choose around: one line, not a traceback
        print(f"slo-monitor: error: {err}: pass another --base-port (this config needs {count} consecutive "
              "free ports from it), or --base-port 0 to let the OS pick free ports", file=sys.stderr)
        return 2
    return 0
