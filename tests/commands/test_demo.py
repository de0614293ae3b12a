"""`slo-monitor demo` on the embedded recipe: comes up on real traffic through the real gateways, serves,
prints the incident hint, cleans up; a gateway that cannot start is said on screen."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request

from monitor.emulate import find_free_base_port, plan
from monitor.recipes import default_config


def test_demo_runs_the_embedded_default_and_stops_cleanly():
    base = find_free_base_port(plan(default_config(), 0).port_count)
    cmd = [sys.executable, "-m", "monitor", "demo", "--base-port", str(base), "--listen", "127.0.0.1:0",
           "--interval", "1", "--duration", "25", "--no-table"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        url = None
        deadline = time.time() + 60
        while time.time() < deadline and url is None:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"sidecar: (http://127\.0\.0\.1:\d+)/metrics", line)
            if m:
                url = m.group(1)
        assert url, "".join(lines)
        for line in proc.stdout:
            lines.append(line)
            if "/control/incident" in line:
                break
        # The 30-token-prompt row answers within seconds: its requests went through its router and the
        # sidecar read them from the request log.
        row = "kimi-k2.6-w4a8-8p-in1080p-30-out256-50ms"
        deadline = time.time() + 20
        while True:
            metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
            finished = [ln for ln in metrics.splitlines()
                        if ln.startswith(f'slo_monitor_request_log_finished_requests_total{{deployment="{row}"')]
            if finished and float(finished[0].split()[-1]) > 0 or time.time() > deadline:
                break
            time.sleep(1)
        assert finished and float(finished[0].split()[-1]) > 0, finished
        status = urllib.request.urlopen(url + "/api/v1/status", timeout=10).read().decode()
        assert 'slo_monitor_target_up{deployment="kimi-k2.6-w4a8-8p-in3k5-out1k5-20ms"' in metrics
        assert re.search(rf'slo_monitor_target_up\{{deployment="{row}",role="router",target="[^"]+"\}} 1\.0', metrics)
        assert "kimi-k3-a5-tp32-dspark" in status
        out, _ = proc.communicate(timeout=90)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines)
    assert proc.returncode == 0, text
    assert "tpot_regression" in text and "emulated 12 deployments" in text
    gateway_lines = [ln for ln in text.splitlines() if "gateway" in ln.lower()]
    assert "real gateway smg 1.13." in text and "in front of 12 deployment(s)" in text, gateway_lines
    answered = [int(m.group(1)) for m in re.finditer(r"real traffic: (\d+) requests answered, 0 failed", text)]
    assert answered and answered[-1] > 0, text[-3000:]
    # Every listener is gone: the control port no longer answers.
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{base}/control/state", timeout=2)
        raise AssertionError("emulator still listening after the demo ended")
    except OSError:
        pass


def _demo_args(*extra: str):
    from monitor.cli import build_parser

    base = find_free_base_port(plan(default_config(), 0).port_count)
    return build_parser().parse_args(["demo", "--base-port", str(base), "--listen", "127.0.0.1:0",
                                      "--interval", "1", "--duration", "3", "--no-table", *extra])


def _run_demo_in_process(args) -> None:
    import asyncio

    from monitor.commands.demo import run_demo

    assert asyncio.run(run_demo(args)) == 0


def test_demo_says_on_screen_when_the_gateway_is_not_installed(monkeypatch, capsys):
    import monitor.emulate.router as router
    from monitor.conventions.names import GATEWAY_SMG

    missing = router.GatewaySpec(GATEWAY_SMG, "smg", "9.9.0", "smg-9.9.0", "`make gateways`")
    monkeypatch.setitem(router.GATEWAY_SPECS, GATEWAY_SMG, missing)
    _run_demo_in_process(_demo_args())
    out = capsys.readouterr().out
    assert "NO GATEWAY: smg-1.13 did not start" in out and "is not installed" in out and "make gateways" in out
    assert "real gateway" not in out


def test_demo_says_on_screen_when_the_gateway_exits_at_start(monkeypatch, capsys):
    import monitor.emulate.router as router

    real = router.router_command
    monkeypatch.setattr(router, "router_command",
                        lambda *a, **kw: real(*a, **kw) + ["--no-such-flag"])  # the real smg refuses it and exits
    _run_demo_in_process(_demo_args())
    out = capsys.readouterr().out
    assert "NO GATEWAY: smg-1.13 did not start" in out and "exited with 2" in out
    assert "unrecognized arguments: --no-such-flag" in out  # the router's own words, from its log


def test_demo_puts_the_real_smg_1_13_in_front_of_every_deployment_by_default(capsys):
    _run_demo_in_process(_demo_args())
    out = capsys.readouterr().out
    assert "real gateway smg 1.13." in out and "/gateways/smg-1.13.0/bin/smg" in out
    assert "in front of 12 deployment(s)" in out


def test_the_demos_router_targets_say_which_gateway_runs_there():
    from types import SimpleNamespace

    from monitor.commands.demo import with_routers
    from monitor.config import parse_config

    router = {"role": "router", "url": "http://127.0.0.1:2/metrics"}
    cfg = parse_config({"deployments": [
        {"name": "a", "targets": [{"role": "server", "url": "http://127.0.0.1:1/metrics"}, router]},
        {"name": "b", "targets": [router]}]})
    running = {"b": SimpleNamespace(metrics_url="http://127.0.0.1:3/metrics")}
    out = with_routers(cfg, running, "sglang-router-0.3.2")
    assert [t.role for t in out.deployments[0].targets] == ["server"]
    assert [(t.role, t.gateway) for t in out.deployments[1].targets] == [("router", "sglang-router-0.3.2")]
    assert out.deployments[1].gateway == "sglang-router-0.3.2"
