"""`slo-monitor emulate` as a subprocess: a real gateway in front of each deployment that has a router target
(or the router target left out, said in one line), and `--concurrency` setting the built-in load."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.config import Config, load_config
from monitor.conventions.names import DEFAULT_GATEWAY, GATEWAYS

ROOT = Path(__file__).resolve().parents[2]
KIMI = ROOT / "examples" / "kimi-k2.6-ascend.yaml"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch(url: str) -> bytes:
    with OPENER.open(url, timeout=5) as resp:
        assert resp.status == 200, url
        return resp.read()


@contextmanager
def emulating(argv: list[str], log: Path, prefix: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """`python -m monitor emulate ARGV` (or `python PREFIX ARGV`) on OS-picked ports: yields its ready line
    (printed once the config is written and the gateways answer), then stops it and every gateway with it."""
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, *(prefix or ["-m", "monitor"]), "emulate", "--base-port", "0", *argv],
                                stdout=subprocess.PIPE, stderr=err)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, f"exited {proc.wait(10)} before it was ready: {log.read_text()[-3000:]}"
            yield json.loads(line)
        finally:
            proc.terminate()
            assert proc.wait(30) == 0, log.read_text()[-3000:]


def said(log: Path) -> list[str]:
    """The lines emulate itself wrote to stderr (not the log's)."""
    return [line for line in log.read_text().splitlines() if line.startswith("slo-monitor")]


def assert_every_target_answers(local: Config) -> None:
    for dep in local.deployments:
        for t in dep.targets:
            if t.url:
                assert b"# TYPE" in fetch(t.url), (dep.name, t.role, t.url)


def pd_config() -> dict[str, Any]:
    """One mixed deployment without a router target and one PD pair with one (an address nobody serves)."""
    return {"deployments": [
        {"name": "mixed", "model": "m", "tpot_target_seconds": 0.1, "input_tokens": 1000, "output_tokens": 100},
        {"name": "pd", "model": "m", "mode": "pd-disaggregated", "tpot_target_seconds": 0.1, "input_tokens": 1000,
         "output_tokens": 100, "targets": [{"role": "router", "url": "http://10.0.0.1:29000/metrics"}]},
    ]}


def test_the_kimi_example_written_config_names_only_targets_that_answer(tmp_path):
    """Issue #34/18a: its 6 PD rows' router targets were written, and no gateway served them (all down)."""
    out = tmp_path / "local.yaml"
    with emulating(["-c", str(KIMI), "--write-config", str(out)], tmp_path / "emulate.log") as ready:
        local = load_config(out)
        assert_every_target_answers(local)
        routers = {d.name: t for d in local.deployments for t in d.targets if t.role == "router"}
        fronted = {d.name for d in load_config(KIMI).deployments if any(t.role == "router" for t in d.targets)}
        assert len(fronted) == 6 and set(routers) == fronted == set(ready["gateways"])
        assert {t.gateway for t in routers.values()} == {DEFAULT_GATEWAY}  # the sidecar reads smg 1.13's families
        for t in routers.values():
            assert b"smg_worker_health{" in fetch(t.url)


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_the_gateway_asked_for_fronts_the_deployment_with_a_router_target(tmp_path, gateway):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(pd_config()))
    out = tmp_path / "local.yaml"
    with emulating(["-c", str(cfg), "--gateway", gateway, "--write-config", str(out)], tmp_path / "e.log") as ready:
        local = load_config(out)
        assert [t.role for t in local.deployment("mixed").targets if t.role == "router"] == []
        (router,) = [t for t in local.deployment("pd").targets if t.role == "router"]
        assert router.gateway == gateway
        assert_every_target_answers(local)
        # In front of the PD pair the emulator serves, both halves registered.
        workers = json.loads(fetch(ready["gateways"]["pd"] + "/workers"))["workers"]
        ports = {int(s.rsplit(" ", 1)[1]) for s in ready["deployments"]["pd"]}
        assert {int(w["url"].rsplit(":", 1)[1]) for w in workers} == ports


def test_gateway_none_leaves_the_router_targets_out_and_says_which_in_one_line(tmp_path):
    out = tmp_path / "local.yaml"
    log = tmp_path / "emulate.log"
    with emulating(["-c", str(KIMI), "--gateway", "none", "--write-config", str(out)], log) as ready:
        local = load_config(out)
        assert not [t for d in local.deployments for t in d.targets if t.role == "router"]
        assert ready["gateways"] == {}
        assert_every_target_answers(local)
    (line,) = said(log)
    assert "left out the router targets of 6 deployment(s)" in line and "--gateway none" in line, line
    assert "kimi-k2.6-w4a8-1p1d-16p-in128k-out1k-100ms" in line and "slo-monitor demo" in line, line


# `python -c` running the CLI with find_gateway patched to find nothing: the machine has both gateways.
WITHOUT_GATEWAYS = ["-c", "import sys; import monitor.emulate.router as r\n"
                    "def missing(name): raise r.GatewayNotFound(f'no {name} here')\n"
                    "r.find_gateway = missing\n"
                    "from monitor.cli import main; sys.exit(main(sys.argv[1:]))"]


def test_without_the_default_gateway_installed_the_router_targets_are_left_out_and_said(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(pd_config()))
    out = tmp_path / "local.yaml"
    log = tmp_path / "emulate.log"
    with emulating(["-c", str(cfg), "--write-config", str(out)], log, prefix=WITHOUT_GATEWAYS) as ready:
        local = load_config(out)
        assert_every_target_answers(local)
        assert not [t for d in local.deployments for t in d.targets if t.role == "router"] and not ready["gateways"]
    (line,) = said(log)
    assert "router targets of 1 deployment(s) (pd)" in line and "not installed" in line, line
    assert "make gateways" in line, line  # how to get it
    # Asked for by name, a missing gateway is an error before anything starts.
    res = subprocess.run([sys.executable, *WITHOUT_GATEWAYS, "emulate", "-c", str(cfg), "--gateway", DEFAULT_GATEWAY],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"--gateway {DEFAULT_GATEWAY}: no {DEFAULT_GATEWAY} here" in res.stderr, res.stderr


def in_flight(metrics: bytes) -> float:
    """Running plus queued requests over the server's schedulers, as its /metrics gauges say."""
    total = 0.0
    for line in metrics.decode().splitlines():
        if line.startswith(("sglang:num_running_reqs{", "sglang:num_queue_reqs{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def load_config_file(tmp_path: Path) -> Path:
    """One mixed server, measured by its recipe at bench_serving --max-concurrency 8, with room for 64."""
    cfg = tmp_path / "load.yaml"
    cfg.write_text(yaml.safe_dump({"deployments": [
        {"name": "load", "model": "m", "tpot_target_seconds": 0.05, "ttft_target_seconds": 1.0,
         "input_tokens": 1000, "output_tokens": 100,
         "launch": {"max_running_requests": 64, "bench": {"max_concurrency": 8}}}]}))
    return cfg


@pytest.mark.parametrize("concurrency", [3, 24])
def test_concurrency_sets_the_requests_in_flight(tmp_path, concurrency):
    cfg = load_config_file(tmp_path)
    out = tmp_path / "local.yaml"
    # --speed 10: a request lasts ~4 emulated s, so samples 0.25 s (2.5 emulated s) apart are nearly independent.
    argv = ["-c", str(cfg), "--speed", "10", "--concurrency", str(concurrency), "--write-config", str(out)]
    with emulating(argv, tmp_path / "emulate.log") as ready:
        url = f"http://127.0.0.1:{ready['deployments']['load'][0].rsplit(' ', 1)[1]}/metrics"
        time.sleep(2.0)  # 20 emulated s: past the ramp from an empty server
        samples = []
        for _ in range(40):
            samples.append(in_flight(fetch(url)))
            time.sleep(0.25)
    mean = sum(samples) / len(samples)
    # Poisson arrivals keep N in flight on average (8, the recipe's, without the flag).
    assert 0.5 * concurrency <= mean <= 1.5 * concurrency, (concurrency, mean, samples)
    # The written config keeps the recipe's number: the load is this run's.
    assert load_config(out).deployment("load").launch["bench"]["max_concurrency"] == 8


@pytest.mark.parametrize("argv, says", [
    (["--concurrency", "0"], "--concurrency 0: must be at least 1"),
    (["--concurrency=-2"], "--concurrency -2: must be at least 1"),
    (["--concurrency", "many"], "--concurrency 'many': not a whole number"),
    (["--concurrency", "4", "--no-synthetic"], "which --no-synthetic turns off"),
])
def test_a_bad_concurrency_exits_2_with_one_line(tmp_path, argv, says):
    cfg = load_config_file(tmp_path)
    res = subprocess.run([sys.executable, "-m", "monitor", "emulate", "-c", str(cfg), "--base-port", "0", *argv],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert says in res.stderr, res.stderr
