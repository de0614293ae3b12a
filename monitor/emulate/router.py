"""Start the real sglang-router (0.3.2, `smg launch`) in front of emulated workers, and stop it.

Regular mode for mixed servers, `--pd-disaggregation --prefill URL BOOTSTRAP --decode URL` for a PD
deployment. The router probes gRPC over HTTP/2 first; aiohttp rejects that and the router falls back to
HTTP, then needs only `GET /health` (sglang_metrics.md section 3.5). Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from monitor.emulate.topology import HOST, DeploymentLayout

DEFAULT_BOOTSTRAP_PORT = 8998


def router_command(layout: DeploymentLayout, *, port: int | None = None, metrics_port: int | None = None,
                   policy: str = "round_robin", health_interval: int = 5, extra: list[str] | None = None) -> list[str]:
    """argv for `smg launch` (or `python -m sglang_router.launch_router` when smg is not on PATH)."""
    smg = shutil.which("smg", path=str(Path(sys.executable).parent)) or shutil.which("smg")
    argv = [smg, "launch"] if smg else [sys.executable, "-m", "sglang_router.launch_router"]
    prefill, decode = layout.by_role("prefill"), layout.by_role("decode")
    if prefill and decode:
        argv.append("--pd-disaggregation")
        for s in prefill:
            argv += ["--prefill", s.url, str(DEFAULT_BOOTSTRAP_PORT + s.index)]
        for s in decode:
            argv += ["--decode", s.url]
    else:
        argv += ["--worker-urls", *[s.url for s in layout.by_role("server")]]
    argv += [
        "--host", HOST, "--port", str(port or layout.router_port),
        "--prometheus-host", HOST, "--prometheus-port", str(metrics_port or layout.router_metrics_port),
        "--policy", policy, "--health-check-interval-secs", str(health_interval), "--log-level", "warn",
    ]
    return argv + (extra or [])


@dataclass
class RouterProcess:
    argv: list[str]
    port: int
    metrics_port: int
    log_path: Path | None = None
    expected_workers: int = 0  # start() also waits until /workers lists this many
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.metrics_port}/metrics"

    def start(self, timeout: float = 60.0) -> RouterProcess:
        """Launch and wait until both the API and the metrics listener answer."""
        out: IO[bytes] | int = subprocess.DEVNULL
        if self.log_path is not None:
            self._log = out = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        # Own process group, so stop() ends the router and anything it spawned, by its id.
        self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, env={**os.environ, "NO_PROXY": "*"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"router exited with {self.process.returncode}; argv: {' '.join(self.argv)}")
            if _answers(self.metrics_url) and self.registered() >= self.expected_workers:
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"router did not answer on {self.url} and {self.metrics_url} within {timeout:.0f}s")

    def registered(self) -> int:
        """How many workers the router lists (registration runs in the background after start)."""
        body = _fetch(self.url + "/workers")
        try:
            return len(json.loads(body)["workers"]) if body else -1
        except (ValueError, KeyError, TypeError):
            return -1

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.process
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> RouterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _fetch(url: str) -> str | None:
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=2) as resp:
            return resp.read().decode()
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _answers(url: str) -> bool:
    return _fetch(url) is not None


def launch_router(layout: DeploymentLayout, *, port: int | None = None, metrics_port: int | None = None,
                  log_path: str | Path | None = None, timeout: float = 60.0, **kwargs: object) -> RouterProcess:
    """Start a real router for one emulated deployment and return it once its listeners answer."""
    argv = router_command(layout, port=port, metrics_port=metrics_port, **kwargs)  # type: ignore[arg-type]
    proc = RouterProcess(argv, port or layout.router_port, metrics_port or layout.router_metrics_port,
                         Path(log_path) if log_path else None, expected_workers=len(layout.servers))
    return proc.start(timeout)
