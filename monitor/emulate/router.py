"""Start a real gateway (smg 1.13 or sglang-router 0.3.2) in front of emulated workers, and stop it.

Both ship a binary named `smg` (`smg launch` starts the router), so they cannot share one environment:
sglang-router 0.3.2 comes with the dev extra into the project's venv, smg 1.13 is installed by
`make gateways` into its own venv under it (`.venv/gateways/smg-1.13.0`). `find_gateway` looks for each
where the running interpreter's environment keeps it, not only on PATH (`.venv/bin` is not on PATH under
`make demo`), and reads the version from the binary itself.

Regular mode for mixed servers, `--pd-disaggregation --prefill URL BOOTSTRAP --decode URL` for a PD
deployment (the same flags in both versions). The router probes gRPC over HTTP/2 first; aiohttp rejects
that and the router falls back to HTTP, then needs only `GET /health` (sglang_metrics.md section 3.5).
Everything listens on 127.0.0.1.

smg 1.13 runs with its default `--sse-keepalive-secs 15`, as deployments do: a stream silent for 15 s (a long
prefill or queue) carries the SSE comment `: ping`. The project's load generator skips it; SGLang 0.5.23's
bench_serving fails the request on it (docs/bench_serving.md), so a bench_serving run with TTFTs over 15 s
passes `extra=["--sse-keepalive-secs", "0"]` (0 sends none; 0.3.2 has no such flag and sends nothing).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from monitor.conventions.names import DEFAULT_GATEWAY, GATEWAY_SGLANG_ROUTER, GATEWAY_SMG
from monitor.emulate.topology import HOST, DeploymentLayout

DEFAULT_BOOTSTRAP_PORT = 8998
BINARY = "smg"
GATEWAYS_DIR = "gateways"  # under the project's venv (sys.prefix): one venv per gateway, made by the Makefile


@dataclass(frozen=True)
class GatewaySpec:
    name: str  # what callers pass: conventions.GATEWAY_*
    product: str  # first word of `smg --version`
    version: str  # the release the project installs and tests
    venv: str  # its own venv under <sys.prefix>/gateways ("" when it lives in the project's venv)
    install: str  # how to get it, for the error message

    @property
    def series(self) -> str:
        """major.minor: a patch release of the same series is accepted."""
        return ".".join(self.version.split(".")[:2])


GATEWAY_SPECS: dict[str, GatewaySpec] = {
    GATEWAY_SMG: GatewaySpec(GATEWAY_SMG, "smg", "1.13.0", "smg-1.13.0",
                             "`make gateways` (pip install smg==1.13.0 into .venv/gateways/smg-1.13.0)"),
    GATEWAY_SGLANG_ROUTER: GatewaySpec(GATEWAY_SGLANG_ROUTER, "sgl-model-gateway", "0.3.2", "",
                                       "`make venv` (the dev extra installs sglang-router==0.3.2 into .venv)"),
}


class GatewayNotFound(RuntimeError):
    """The requested gateway is not installed where the project looks; the message says where and how."""


@dataclass(frozen=True)
class Gateway:
    spec: GatewaySpec
    binary: Path
    version: str  # as the binary reports it

    @property
    def name(self) -> str:
        return self.spec.name

    def describe(self) -> str:
        return f"{self.spec.product} {self.version} ({self.binary})"


def gateway_spec(name: str) -> GatewaySpec:
    try:
        return GATEWAY_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown gateway {name!r}; choose one of {', '.join(GATEWAY_SPECS)}") from None


def search_dirs(spec: GatewaySpec) -> list[Path]:
    """Where `spec`'s binary may be, most specific first: its own venv under the running environment, the
    running interpreter's bin directory (not resolved: a venv's python is a link to the base one), PATH."""
    prefix = Path(sys.prefix)
    dirs = [prefix / GATEWAYS_DIR / spec.venv / "bin"] if spec.venv else []
    dirs.append(Path(sys.executable).parent)
    dirs += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return list(dict.fromkeys(dirs))  # first occurrence wins


@functools.lru_cache(maxsize=32)
def binary_version(binary: Path) -> tuple[str, str] | None:
    """(product, version) from `smg --version` ("smg 1.13.0", "sgl-model-gateway 0.3.2"); None if it fails.

    The binary is asked, not the package metadata: both packages write bin/smg, so in an environment that
    has both, the metadata cannot say whose the file is."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) < 2:
        return None
    return words[0], words[1]


def find_gateway(name: str = DEFAULT_GATEWAY) -> Gateway:
    """The installed binary of gateway `name`, or GatewayNotFound saying where it looked and what it found."""
    spec = gateway_spec(name)
    others: list[str] = []
    dirs = search_dirs(spec)
    for d in dirs:
        binary = d / BINARY
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            continue
        found = binary_version(binary)
        if found is None:
            others.append(f"{binary} (`--version` failed)")
            continue
        product, version = found
        if product == spec.product and (version == spec.series or version.startswith(spec.series + ".")):
            return Gateway(spec, binary, version)
        others.append(f"{binary} is {product} {version}")
    where = ", ".join(str(d) for d in dirs[:3]) + (" and PATH" if len(dirs) > 3 else "")
    seen = f"; found instead: {'; '.join(others)}" if others else ""
    raise GatewayNotFound(f"gateway {name} ({spec.product} {spec.series}.x) is not installed: no `{BINARY}` "
                          f"of that version in {where}{seen}. Install it with {spec.install}.")


def gateway_argv(gateway: str | Gateway = DEFAULT_GATEWAY, *, worker_urls: list[str] | None = None,
                 prefill: list[tuple[str, int | None]] | None = None, decode: list[str] | None = None,
                 port: int, metrics_port: int, policy: str = "round_robin", health_interval: int = 5,
                 log_level: str = "warn", extra: list[str] | None = None) -> list[str]:
    """argv for `smg launch` of `gateway` (a name from conventions.GATEWAYS, or one `find_gateway` found):
    regular mode over `worker_urls`, or PD mode over `prefill` (url, bootstrap port) and `decode` urls."""
    gw = gateway if isinstance(gateway, Gateway) else find_gateway(gateway)
    argv = [str(gw.binary), "launch"]
    if prefill or decode:
        argv.append("--pd-disaggregation")
        for url, bootstrap in prefill or []:
            argv += ["--prefill", url, "none" if bootstrap is None else str(bootstrap)]
        for url in decode or []:
            argv += ["--decode", url]
    else:
        argv += ["--worker-urls", *(worker_urls or [])]
    argv += [
        "--host", HOST, "--port", str(port), "--prometheus-host", HOST, "--prometheus-port", str(metrics_port),
        "--policy", policy, "--health-check-interval-secs", str(health_interval), "--log-level", log_level,
    ]
    return argv + (extra or [])


def router_command(layout: DeploymentLayout, *, port: int | None = None, metrics_port: int | None = None,
                   policy: str = "round_robin", health_interval: int = 5, extra: list[str] | None = None,
                   gateway: str | Gateway = DEFAULT_GATEWAY) -> list[str]:
    """argv for `smg launch` of `gateway` in front of an emulated deployment (PD when it has both roles)."""
    prefill, decode = layout.by_role("prefill"), layout.by_role("decode")
    pd = bool(prefill and decode)
    return gateway_argv(
        gateway, worker_urls=None if pd else [s.url for s in layout.by_role("server")],
        prefill=[(s.url, DEFAULT_BOOTSTRAP_PORT + s.index) for s in prefill] if pd else None,
        decode=[s.url for s in decode] if pd else None,
        port=port or layout.router_port, metrics_port=metrics_port or layout.router_metrics_port,
        policy=policy, health_interval=health_interval, extra=extra)


@dataclass
class RouterProcess:
    argv: list[str]
    port: int
    metrics_port: int
    log_path: Path | None = None
    expected_workers: int = 0  # start() also waits until /workers lists this many
    process: subprocess.Popen[bytes] | None = None
    gateway: Gateway | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.metrics_port}/metrics"

    @property
    def label(self) -> str:
        return self.gateway.describe() if self.gateway else "router"

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
                code = self.process.returncode
                self.stop()
                raise RuntimeError(f"{self.label} exited with {code}{self._log_tail()}; argv: {' '.join(self.argv)}")
            if _answers(self.metrics_url) and self.registered() >= self.expected_workers:
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"{self.label} did not answer on {self.url} and {self.metrics_url} (with "
                           f"{self.expected_workers} workers registered) within {timeout:.0f}s{self._log_tail()}")

    def _log_tail(self, lines: int = 5) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        return (": " + " | ".join(line.strip() for line in tail)) if tail else ""

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
                  log_path: str | Path | None = None, timeout: float = 60.0, gateway: str | Gateway = DEFAULT_GATEWAY,
                  **kwargs: object) -> RouterProcess:
    """Start a real gateway for one emulated deployment and return it once its listeners answer.

    Raises GatewayNotFound when `gateway` is not installed, RuntimeError/TimeoutError when it does not start."""
    gw = gateway if isinstance(gateway, Gateway) else find_gateway(gateway)
    argv = router_command(layout, port=port, metrics_port=metrics_port, gateway=gw, **kwargs)  # type: ignore[arg-type]
    proc = RouterProcess(argv, port or layout.router_port, metrics_port or layout.router_metrics_port,
                         Path(log_path) if log_path else None, expected_workers=len(layout.servers), gateway=gw)
    return proc.start(timeout)
