"""`--shard i/N`: whole deployments, a partition of the config, stable across processes, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from monitor.config import parse_config
from monitor.scrape.shard import apply_shard, parse_shard, shard_of
from tests.deploy.helpers import ROOT

NAMES = [f"model-{i}-pd" for i in range(40)] + ["kimi-k2.6-w4a8-8p-in3k5-out1k5-20ms", "local-mixed", "local-pd"]


def _config():
    return parse_config({
        "sidecar": {"listen_port": 9500},
        "deployments": [
            {"name": n, "tpot_target_seconds": 0.05, "targets": [
                {"role": "prefill", "url": f"http://10.0.0.{i % 250}:30001/metrics"},
                {"role": "decode", "url": f"http://10.0.0.{i % 250}:30002/metrics"}]}
            for i, n in enumerate(NAMES)],
    })


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_shards_partition_the_deployments_and_keep_them_whole(n):
    config = _config()
    seen: list[str] = []
    for i in range(n):
        part = apply_shard(config, f"{i}/{n}")
        assert part.sidecar == config.sidecar
        for dep in part.deployments:
            assert dep == config.deployment(dep.name)  # every target of the deployment stays together
        seen += [d.name for d in part.deployments]
    assert sorted(seen) == sorted(NAMES)  # each deployment in exactly one shard


def test_every_shard_gets_some_work_at_this_size():
    counts = [len(apply_shard(_config(), f"{i}/3").deployments) for i in range(3)]
    assert all(c > 0 for c in counts), counts


def test_assignment_is_stable_across_processes_and_hash_seeds():
    """md5, not Python's salted hash(): every sidecar, in any process, agrees on who owns what."""
    here = [shard_of(n, 7) for n in NAMES]
    code = ("import json; from monitor.scrape.shard import shard_of; "
            f"print(json.dumps([shard_of(n, 7) for n in {NAMES!r}]))")
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        assert json.loads(out.stdout) == here


def test_assignment_is_pinned():
    """Changing the hash would silently move deployments between sidecars already running."""
    assert [shard_of(n, 4) for n in ("local-mixed", "local-pd", "model-0-pd", "model-1-pd")] == [1, 2, 2, 3]


@pytest.mark.parametrize("spec", ["", "1", "2/2", "3/2", "-1/2", "a/b", "1/0", "0/0", "0/", "/2", "1/2/3", " 0/2"])
def test_bad_specs_are_rejected_with_the_expected_form(spec):
    with pytest.raises(ValueError, match=r"--shard expects i/N with 0 <= i < N") as err:
        parse_shard(spec)
    assert f"got {spec!r}" in str(err.value)  # the message quotes what was given


def test_good_specs_parse():
    assert parse_shard("0/1") == (0, 1)
    assert parse_shard("3/4") == (3, 4)


def test_cli_rejects_a_bad_shard_before_starting():
    res = subprocess.run([sys.executable, "-m", "monitor", "run", "-c", "examples/minimal.yaml", "--shard", "2/2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "--shard expects i/N with 0 <= i < N, got '2/2'" in res.stderr
