"""`slo-monitor emulate` as a subprocess: comes up on the planned ports, stops on SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import yaml

from monitor.config import load_config
from monitor.emulate import find_free_base_port, plan


def test_cli_serves_the_planned_ports_and_writes_the_localized_config(config, tmp_path):
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    base = find_free_base_port(plan(config, 0).port_count)
    out = tmp_path / "local.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "emulate", "-c", str(cfg_path), "--base-port", str(base),
         "--speed", "50", "--incident", "mixed:tpot_regression:2@+60", "--write-config", str(out)],
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
