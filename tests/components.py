"""The real Prometheus and Alertmanager builds every real-component test runs on: Debian's (Prometheus 2.42,
Alertmanager 0.25) and the current ones built by `make go-tools` (Prometheus 3.x, Alertmanager 0.35, Sloth).
A build that is missing fails the test that needs it, naming the command that installs it: never a skip."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GO_BIN = ROOT / ".venv" / "go-bin"


@dataclass(frozen=True)
class Build:
    name: str  # the pytest id: "prometheus-2.42", "prometheus-3", ...
    major: int
    server: str  # prometheus / alertmanager
    tool: str  # promtool / amtool
    install: str  # what installs it

    def require(self) -> Build:
        for path in (self.server, self.tool):
            if not Path(path).exists():
                pytest.fail(f"{path} is missing ({self.install})")
        return self


def _debian(name: str) -> str:
    return shutil.which(name) or f"/usr/bin/{name}"


PROMETHEUS_242 = Build("prometheus-2.42", 2, _debian("prometheus"), _debian("promtool"),
                       "apt-get install prometheus; .ci/run does")
PROMETHEUS_3 = Build("prometheus-3", 3, str(GO_BIN / "prometheus"), str(GO_BIN / "promtool"), "make go-tools")
PROMETHEUS_BUILDS = (PROMETHEUS_242, PROMETHEUS_3)
ALERTMANAGER_DEBIAN = Build("alertmanager-debian", 0, _debian("prometheus-alertmanager"), _debian("amtool"),
                            "apt-get install prometheus-alertmanager; .ci/run does")
ALERTMANAGER_035 = Build("alertmanager-0.35", 0, str(GO_BIN / "alertmanager"), str(GO_BIN / "amtool"),
                         "make go-tools")
ALERTMANAGER_BUILDS = (ALERTMANAGER_DEBIAN, ALERTMANAGER_035)
SLOTH = GO_BIN / "sloth"


def assert_promtool_clean(text: str) -> None:
    """`promtool check metrics` of every Prometheus build passes the exposition (lint included)."""
    for build in PROMETHEUS_BUILDS:
        build.require()
        res = subprocess.run([build.tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (build.name, res.stdout + res.stderr)
