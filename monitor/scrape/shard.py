"""`--shard i/N`: split targets across sidecars by a stable hash, like Prometheus `hashmod`."""

from __future__ import annotations

import hashlib

from monitor.config import Config


def parse_shard(text: str) -> tuple[int, int]:
    i, sep, n = text.partition("/")
    if not sep or not i.isdigit() or not n.isdigit() or int(n) < 1 or int(i) >= int(n):
        raise ValueError(f"--shard expects i/N with 0 <= i < N, got {text!r}")
    return int(i), int(n)


def shard_of(key: str, n: int) -> int:
    # md5 as Prometheus's hashmod uses: stable across processes and Python versions.
    return int.from_bytes(hashlib.md5(key.encode()).digest()[8:], "big") % n


def apply_shard(config: Config, spec: str) -> Config:
    """Keep whole deployments whose name hashes to this shard: an SLO needs all its servers."""
    i, n = parse_shard(spec)
    kept = [d for d in config.deployments if shard_of(d.name, n) == i]
    return config.model_copy(update={"deployments": kept})
