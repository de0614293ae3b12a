"""`slo-monitor emulate` as a subprocess: comes up on the planned ports, stops on SIGTERM."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import yaml

from monitor.config import load_config
from monitor.emulate import find_free_base_port, plan
from tests.conftest import free_port


def test_cli_serves_the_planned_ports_and_writes_the_localized_config(config, tmp_path):
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    base = find_free_base_port(plan(config, 0).port_count)
    out = tmp_path / "local.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "emulate", "-c", str(cfg_path), "--base-port", str(base),
         "--speed", "50", "--incident", "mixed:tpot_regression:2@+60", "--write-config", str(out),
         "--gateway", "none"],  # gateways: test_cli_gateways.py
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["control_url"] == f"http://127.0.0.1:{base}"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        state = json.loads(opener.open(ready["control_url"] + "/control/state", timeout=5).read())
        assert state["deployments"]["mixed"]["incidents"][0]["kind"] == "tpot_regression"
        local = load_config(out)
        url = next(t.url for t in local.deployment("mixed").targets if t.role == "server")
        assert url == f"http://127.0.0.1:{base + 1}/metrics"
        time.sleep(0.3)
        assert b"sglang:num_running_reqs" in opener.open(url, timeout=5).read()
    finally:
        proc.terminate()
        assert proc.wait(15) == 0


def test_with_base_port_0_the_written_config_points_at_the_ports_bound(config, tmp_path):
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    out = tmp_path / "local.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "emulate", "-c", str(cfg_path), "--base-port", "0", "--speed", "50",
         "--write-config", str(out), "--gateway", "none"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        ready = json.loads(proc.stdout.readline())  # printed once the config is written
        bound = {int(s.rsplit(" ", 1)[1]) for servers in ready["deployments"].values() for s in servers}
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        local = load_config(out)
        # Every target answers: servers and npu-exporters (--gateway none leaves the router target out, a
        # gateway's ports are test_cli_gateways.py's).
        urls = [t.url for d in local.deployments for t in d.targets if t.url]
        ports = {int(u.split(":")[2].split("/")[0]) for u in urls}
        assert len(urls) == len(bound) + len(local.deployments) and bound <= ports, urls  # + an npu-exporter each
        for url in urls:
            with opener.open(url, timeout=5) as resp:
                assert resp.status == 200 and b"# TYPE" in resp.read(), url
    finally:
        proc.terminate()
        assert proc.wait(15) == 0


def test_a_base_port_in_use_exits_2_with_one_line_naming_it(config, tmp_path):
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    with socket.socket() as taken:  # held by the test: the emulator's control port cannot be bound
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run([sys.executable, "-m", "monitor", "emulate", "-c", str(cfg_path), "--base-port", str(port)],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"127.0.0.1:{port}" in res.stderr and "--base-port 0" in res.stderr, res.stderr
