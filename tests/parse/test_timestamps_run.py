"""Samples dated 1 h back, on the real `slo-monitor run` process (issue #34 item 13). The target's TPOT histogram
carries a timestamp an hour old on every line while its TTFT histogram carries none. Before, the timestamps were
dropped unread: the TPOT windows counted the old histogram as current, and nothing was said. Now its samples are
left out (the TPOT windows count nothing), the TTFT ones count, and the target's warnings say why, logged once."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

from tests.conftest import free_port
from tests.exposition_server import serving
from tests.procs import get_json, running, wait_for
from tests.slo.helpers import exposition

TPOT = "sglang:request_time_per_output_token_seconds"
AGE = 3600.0
PER_SCRAPE = 10  # requests each histogram grows by, scrape after scrape


@contextlib.contextmanager
def _dated_server(state: dict) -> Iterator[str]:
    """An SGLang exposition whose TPOT lines carry a timestamp (ms) `AGE` seconds before the request."""

    def body_of(path: str) -> str:
        with state["lock"]:
            state["n"] += 1
            n = state["n"] * PER_SCRAPE
        stamp = int((time.time() - AGE) * 1000)
        lines = exposition(tpot=[0.03] * n, ttft=[0.1] * n).splitlines()
        return "".join(f"{x} {stamp}\n" if x.startswith(TPOT) else f"{x}\n" for x in lines)

    with serving(body_of) as url:
        yield url + "/metrics"


def test_a_histogram_dated_an_hour_back_is_not_counted_and_the_target_says_so_once(tmp_path):
    state = {"lock": threading.Lock(), "n": 0}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg, log = tmp_path / "c.yaml", tmp_path / "run.log"
    with _dated_server(state) as url:
        cfg.write_text(f"sidecar: {{listen_port: {port}, scrape_interval_seconds: 0.2, scrape_timeout_seconds: 0.2}}\n"
                       "deployments:\n"
                       f"  - {{name: a, tpot_target_seconds: 0.04, ttft_target_seconds: 0.4, "
                       f"targets: [{{role: server, url: '{url}'}}]}}\n")
        with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg)], log, ready_url=base + "/healthz"):
            wait_for(lambda: state["n"] >= 15, "15 scrapes", log)
            dep = get_json(base + "/api/v1/status")["deployments"][0]
    windows = {s["sli"]: s["windows"][0] for s in dep["slis"]}
    target = dep["targets"][0]
    # The current TTFT histogram counts (~10 requests a scrape); the TPOT one, an hour old, counts nothing.
    assert windows["ttft"]["events"] >= 10 * PER_SCRAPE, windows
    assert not windows["tpot"]["events"], windows
    assert target["up"], target
    said = [w for w in target["warnings"] if "before the scrape" in w]
    assert len(said) == 1, target["warnings"]
    assert "samples carry timestamps up to 3600 s before the scrape" in said[0], said
    assert "more than one scrape interval (0.2 s): not current, skipped" in said[0], said
    logged = [line for line in log.read_text().splitlines() if "before the scrape" in line]
    assert len(logged) == 1 and "WARNING" in logged[0], log.read_text()[-3000:]  # once, not every scrape
