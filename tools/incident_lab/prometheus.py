"""A real Prometheus 2.42 holding a lab capture: `promtool tsdb create-blocks-from openmetrics` writes the
blocks, Prometheus serves them (retention long enough for 2023 timestamps; the lookback one scrape interval
and a half, so a target that stopped answering has no value after its last scrape, as Prometheus's staleness
markers would have it)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import yaml

from monitor.emulate.topology import find_free_port as _free_port  # outside the ephemeral range
from tests.procs import running  # start, wait until it answers, always stop

PROMETHEUS = "prometheus"
PROMTOOL = "promtool"


class LabPrometheusError(RuntimeError):
    pass


def available() -> bool:
    return bool(shutil.which(PROMETHEUS) and shutil.which(PROMTOOL))


def backfill(openmetrics: Path, tsdb: Path, promtool: str = PROMTOOL) -> None:
    res = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(tsdb)],
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise LabPrometheusError(f"promtool could not backfill {openmetrics}: {res.stderr.strip() or res.stdout}")


@contextlib.contextmanager
def serving(openmetrics: Path, workdir: Path, interval: float, timeout: float = 60.0, *,
            prometheus: str = PROMETHEUS, promtool: str = PROMTOOL) -> Iterator[str]:
    """Backfill `openmetrics` into a fresh TSDB under `workdir`, serve it; yields the base URL. `prometheus` and
    `promtool`: which build (the tests run 2.42 and 3.x)."""
    tsdb = workdir / "tsdb"
    shutil.rmtree(tsdb, ignore_errors=True)
    backfill(openmetrics, tsdb, promtool)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(
        {"global": {"scrape_interval": f"{interval:g}s", "evaluation_interval": f"{interval:g}s"}}))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [prometheus, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={tsdb}",
            "--storage.tsdb.retention.time=100y", f"--query.lookback-delta={round(interval * 1500)}ms",
            f"--web.listen-address=127.0.0.1:{port}"]
    with running(argv, workdir / "prometheus.log", ready_url=f"{url}/-/ready", timeout=timeout):
        yield url
