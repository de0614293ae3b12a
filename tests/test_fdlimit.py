"""The open-files limit is raised at start toward the hard limit (bounded), never lowered; the port's
connection cap is derived from it."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from monitor.fdlimit import MAX_DEFAULT_CONNECTIONS, MIN_CONNECTIONS, default_max_connections

RAISE = textwrap.dedent("""
    import resource, sys
    from monitor.fdlimit import raise_open_files_limit
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
    raise_open_files_limit(int(sys.argv[2]))
    print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
""")


def _soft_after(soft: int, wanted: int) -> int:
    done = subprocess.run([sys.executable, "-c", RAISE, str(soft), str(wanted)], capture_output=True, text=True,
                          timeout=60, check=True)
    return int(done.stdout)


def _hard() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return sys.maxsize if hard == resource.RLIM_INFINITY else hard


@pytest.mark.skipif(_hard() < 1024, reason="the hard open-files limit here is below the test's numbers")
def test_the_soft_open_files_limit_is_raised_toward_the_hard_one_bounded_and_never_lowered():
    hard = _hard()
    assert _soft_after(256, 1024) == 1024
    assert _soft_after(256, hard + 1000) == hard  # bounded by the hard limit
    assert _soft_after(512, 0) == 512  # 0: left as it is
    assert _soft_after(1024, 512) == 1024  # never lowered


def test_serve_raises_the_open_files_limit_before_it_serves(tmp_path):
    """`slo-monitor run` under a soft limit of 256: /proc says the running sidecar's limit was raised."""
    from tests import procs

    if _hard() < 2048:
        pytest.skip("the hard open-files limit here is below 2048")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sidecar: {open_files_limit: 2048}\ndeployments:\n- {name: d, tpot_target_seconds: 0.04, targets: "
                   "[{role: server, url: 'http://127.0.0.1:1/metrics'}]}\n")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["prlimit", "--nofile=256:", sys.executable, "-m", "monitor", "run", "-c", str(cfg),
            "--listen", f"127.0.0.1:{port}"]
    with procs.running(argv, tmp_path / "log", ready_url=f"http://127.0.0.1:{port}/healthz") as proc:
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    assert line.split()[3] == "2048", line
    assert "raised the open-files limit from 256 to 2048" in (tmp_path / "log").read_text()


def test_the_default_connection_cap_leaves_descriptors_for_the_scrapes_and_the_process():
    assert default_max_connections(1024, 64) == (1024 - 64 - 64 - 100) // 2  # 398: under 1,024 with room
    assert default_max_connections(65536, 64) == MAX_DEFAULT_CONNECTIONS
    assert default_max_connections(128, 64) == MIN_CONNECTIONS
    assert default_max_connections(None, 64) == MAX_DEFAULT_CONNECTIONS
