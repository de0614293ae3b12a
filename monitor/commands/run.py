"""`slo-monitor run -c CONFIG`: the sidecar."""

from __future__ import annotations

import argparse
import asyncio

from monitor.config import Config, ConfigError
from monitor.interop.load import load_config


def parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--listen expects HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the sidecar: scrape targets, compute SLO state, serve /metrics")
    p.add_argument("-c", "--config", required=True, help="deployment config (YAML)")
    p.add_argument("--listen", help="HOST:PORT to serve on (default from config: 127.0.0.1:9464)")
    p.add_argument("--shard", help="i/N: scrape only this sidecar's share of the targets")
    p.add_argument("--recording-reset", action="store_true",
                   help="if the recording (sidecar.recording_path) is damaged, move it aside to "
                        "<file>.corrupt-<time> and start a fresh one (default: refuse to start)")
    p.set_defaults(func=_run)


def load_checked(path: str, shard: str | None = None) -> Config:
    """The config `run` starts with, and what SIGHUP / POST /-/reload read again: parsed, validated,
    refused when it leaves nothing to monitor, cut to this sidecar's shard."""
    config = load_config(path)
    if not config.deployments:  # a sidecar with nothing to watch would look healthy and watch nothing
        raise ConfigError(f"{path}: no deployments: nothing to monitor; add at least one under "
                          "`deployments:` (examples/minimal.yaml shows the shape)")
    if shard:
        from monitor.scrape.shard import apply_shard

        total = len(config.deployments)
        config = apply_shard(config, shard)
        if not config.deployments:
            raise ConfigError(f"{path}: --shard {shard} holds none of the {total} deployment"
                              f"{'' if total == 1 else 's'} of the config; run fewer shards")
    return config


def _run(args: argparse.Namespace) -> int:
    from monitor.sidecar import serve

    config = load_checked(args.config, args.shard)
    host, port = parse_listen(args.listen) if args.listen else (None, None)
    asyncio.run(serve(config, host=host, port=port, recording_reset=args.recording_reset,
                      loader=lambda: load_checked(args.config, args.shard)))
    return 0
