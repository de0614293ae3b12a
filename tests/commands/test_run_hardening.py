"""The real `slo-monitor run` process under input that once made it fail loudly (issue #34, items 11, 12)."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

from tests.conftest import free_port
from tests.exposition_server import serving
from tests.procs import running, wait_for
from tests.slo.helpers import exposition


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()



# '²' passed str.isdigit() and then broke int(): a 500 and a 24-line traceback per request. The others are
# the same class: digits int() reads that are not ASCII (fullwidth, Arabic-Indic), more digits than int()
# takes (4,300), signs, spaces, other bases.
BAD_LIMITS = ["%C2%B2", "%EF%BC%91%EF%BC%92", "%D9%A3", "9" * 5000, "0" * 4999 + "5" + "0" * 10, "-1", "%2B5",
              "%205", "5%20", "5%0A", "0x10", "1_0", "1e2", "0", "1001", ""]


def test_a_limit_that_is_not_ascii_digits_is_a_400_with_one_line_and_logs_no_traceback(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg, log = tmp_path / "c.yaml", tmp_path / "run.log"
    cfg.write_text(f"sidecar: {{listen_port: {port}}}\n"
                   "deployments: [{name: a, tpot_target_seconds: 0.04, targets: []}]\n")
    with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg)], log, ready_url=base + "/healthz"):
        for bad in BAD_LIMITS:
            code, body = _get(f"{base}/api/v1/status?limit={bad}")
            assert code == 400, (bad, code, body[:300])
            error = json.loads(body)["error"]
            assert "limit=" in error and "whole number from 1 to 1000" in error and "\n" not in error, error[:300]
        assert _get(f"{base}/api/v1/status?limit=0007")[0] == 200  # ASCII digits still read as before
    text = log.read_text()
    assert "Traceback" not in text and " ERROR " not in text, text


@contextlib.contextmanager
def _count_off_inf_server(state: dict) -> Iterator[str]:
    """An SGLang exposition whose TPOT _count is `state["off"]` more than its +Inf bucket; both grow by one a
    scrape, as a live server's do, so the warning's counts differ every scrape."""

    def body_of(path: str) -> str:
        with state["lock"]:
            state["scrapes"] += 1
            n, off = state["scrapes"], state["off"]
        text = exposition(tpot=[0.03] * n)
        return re.sub(r"(request_time_per_output_token_seconds_count\{[^}]*\}) \S+",
                      lambda m: f"{m.group(1)} {float(n + off)}", text)

    state.update(lock=threading.Lock(), scrapes=0)
    with serving(body_of) as url:
        yield url + "/metrics"


def test_a_count_off_the_inf_bucket_is_warned_once_while_it_lasts_not_every_scrape(tmp_path):
    state = {"off": 1}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg, log = tmp_path / "c.yaml", tmp_path / "run.log"

    def said() -> list[str]:
        return [line for line in log.read_text().splitlines() if "disagrees with the +Inf bucket" in line]

    def scrapes_after(k: int) -> Callable[[], bool]:
        with state["lock"]:
            target = state["scrapes"] + k
        return lambda: state["scrapes"] >= target

    with _count_off_inf_server(state) as url:
        cfg.write_text(f"sidecar: {{listen_port: {port}, scrape_interval_seconds: 0.2, scrape_timeout_seconds: 0.15}}\n"
                       f"deployments: [{{name: a, tpot_target_seconds: 0.04, targets: [{{role: server, url: '{url}'}}]}}]\n")
        with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg)], log, ready_url=base + "/healthz"):
            wait_for(lambda: bool(said()), "the first warning", log)
            wait_for(scrapes_after(8), "8 more scrapes, the counts growing", log)
            assert len(said()) == 1, log.read_text()
            assert "WARNING" in said()[0] and re.search(r"_count (\d+) disagrees with the \+Inf bucket (\d+)", said()[0])
            # It stops disagreeing (said once, at INFO), then starts again: a new state, said again.
            state["off"] = 0
            wait_for(lambda: "exposition consistent again" in log.read_text(), "the all-clear", log)
            state["off"] = 2
            wait_for(lambda: len(said()) == 2, "the second warning", log)
            wait_for(scrapes_after(8), "8 more scrapes", log)
    assert len(said()) == 2, log.read_text()
    assert log.read_text().count("exposition consistent again") == 1
