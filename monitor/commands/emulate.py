"""`slo-monitor emulate`: serve emulated SGLang deployments from a config on 127.0.0.1."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

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


def _run(args: argparse.Namespace) -> int:
    from monitor.emulate.server import run_emulator
    from monitor.emulate.topology import localize

    config = load_config(args.config)
    if args.write_config:
        local = localize(config, args.base_port, args.request_log)
        data = local.model_dump(mode="json", exclude_none=True)
        with open(args.write_config, "w", encoding="utf-8") as fh:
            yaml.safe_dump(data, fh, sort_keys=False)

    def ready(emu: Any) -> None:
        print(json.dumps({"control_url": emu.control_url, "deployments": {
            name: [s["name"] + " " + str(s["port"]) for s in st["servers"]]
            for name, st in emu.state()["deployments"].items()}}), flush=True)

    run_emulator(config, args.base_port, speed=args.speed, seed=args.seed, incidents=args.incident,
                 request_log_dir=args.request_log, ready=ready, synthetic=not args.no_synthetic)
    return 0
