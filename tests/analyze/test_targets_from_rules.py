"""`analyze --prometheus` without `-c` reads the SLO targets from the generated rules where the sidecar is not
scraped (issue #34 item 10): a real Prometheus evaluating the rules `slo-monitor generate` wrote."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml

from monitor.analyze.prometheus import load_prometheus
from monitor.generate.build import generate
from monitor.generate.options import Options
from tests.analyze.conftest import make_config
from tests.components import Build
from tests.conftest import free_port
from tests.procs import running


def test_without_a_config_the_targets_come_from_the_generated_rules(tmp_path: Path, prometheus_build: Build):
    files = generate(make_config(), Options())
    rules = {name: text for name, text in files.items() if name.startswith("alerts/rules/llama")}
    assert rules
    for name, text in rules.items():
        (tmp_path / Path(name).name).write_text(text)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"evaluation_interval": "1s"}, "rule_files": [str(tmp_path / Path(n).name) for n in rules]}))
    port = free_port()
    argv = [prometheus_build.server, f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]
    with running(argv, tmp_path / "prometheus.log", ready_url=f"http://127.0.0.1:{port}/-/ready"):
        messages: list[str] = []
        deadline = time.monotonic() + 30
        while True:  # until the rule group has been evaluated once
            end = time.time()
            try:
                ds = asyncio.run(load_prometheus(f"http://127.0.0.1:{port}", "llama", end - 60, end, 60,
                                                 deployment_config=None, progress=messages.append))
                break
            except ValueError as err:
                assert "no SLO targets" in str(err)
                if time.monotonic() > deadline:
                    pytest.fail(f"the rules' targets never appeared: {err}")
                time.sleep(1)
    assert {k: (s.target, s.objective) for k, s in ds.slis.items() if k in ("tpot", "ttft")} == {
        "tpot": (0.08, 0.99), "ttft": (2.0, 0.99)}
    assert any("read from the generated rules" in m for m in messages)
