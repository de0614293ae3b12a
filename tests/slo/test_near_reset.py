"""A counter that goes down by 1 now and then without a restart (issue #34 item 5), on the real `slo-monitor run`
process. Before, each such drop was read as a restart: the whole previous value was added to the windows again
(the 5m window counted 6.0M events with an SLI of 0.998 where the truth was 0.5), `counter_resets` grew, and
nothing was said. A restart (a drop toward 0) is still a restart."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

from tests.conftest import free_port
from tests.exposition_server import serving
from tests.procs import get_json, running, wait_for
from tests.slo.helpers import exposition

GOOD_PER_SCRAPE, BAD_PER_SCRAPE = 10, 10  # truth: half the requests meet the 40 ms TPOT target


@contextlib.contextmanager
def _dropping_server(state: dict) -> Iterator[str]:
    """Each scrape adds 10 good and 10 bad requests; every third one shows one good request fewer than the
    scrape before it (a counter that loses 1), and `state["restart"]` starts the counts again from 0."""

    def body_of(path: str) -> str:
        with state["lock"]:
            if state.pop("restart", False):
                state["good"] = state["bad"] = 0
            state["n"] += 1
            state["good"] += GOOD_PER_SCRAPE
            state["bad"] += BAD_PER_SCRAPE
            shown = state["good"] - (GOOD_PER_SCRAPE + 1 if state["n"] % 3 == 0 else 0)
            bad = state["bad"]
        return exposition(tpot=[0.03] * shown + [0.05] * bad)

    with serving(body_of) as url:
        yield url + "/metrics"


def test_a_counter_that_loses_one_now_and_then_is_held_and_said_not_read_as_a_restart(tmp_path):
    state = {"lock": threading.Lock(), "good": 0, "bad": 0, "n": 0}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg, log = tmp_path / "c.yaml", tmp_path / "run.log"
    with _dropping_server(state) as url:
        cfg.write_text(f"sidecar: {{listen_port: {port}, scrape_interval_seconds: 0.2, scrape_timeout_seconds: 0.2}}\n"
                       "deployments:\n"
                       f"  - {{name: a, tpot_target_seconds: 0.04, targets: [{{role: server, url: '{url}'}}]}}\n")
        with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg)], log, ready_url=base + "/healthz"):
            wait_for(lambda: state["n"] >= 15, "15 scrapes", log)
            dep = get_json(base + "/api/v1/status")["deployments"][0]
            with state["lock"]:
                truth = state["good"] + state["bad"]
            window = dep["slis"][0]["windows"][0]
            target = dep["targets"][0]
            # A restart (to 0) is still read as one, and its new counts count.
            with state["lock"]:
                state["restart"] = True
            wait_for(lambda: get_json(base + "/api/v1/status")["deployments"][0]["targets"][0]["counter_resets"] == 1, "the restart", log)
    # The windows hold what the target counted since its first scrape (up to one scrape either way), half of it
    # good; before, ~5 drops each added the whole count again.
    assert truth - 2 * (GOOD_PER_SCRAPE + BAD_PER_SCRAPE) <= window["events"] <= truth, (window, truth)
    assert abs(window["good_ratio"] - 0.5) < 0.05, window
    assert target["counter_resets"] == 0, target
    said = [line for line in log.read_text().splitlines() if "went down by" in line]
    assert said and "WARNING" in said[0] and "without dropping toward 0" in said[0], log.read_text()[-2000:]


def test_a_small_counter_that_falls_less_than_half_in_a_restart_is_restarted_with_the_others():
    """One process, one restart: a counter of 2 that reads 1 after the restart fell less than half, but the
    scrape's other series fell to 0, so it restarted too (its 1 is new), not a held decrease."""
    from monitor.parse.exposition import parse
    from monitor.parse.families import engine_wanted
    from tests.slo.test_engine import make

    eng, (srv,) = make()
    wanted = engine_wanted()
    before = exposition(tpot=[0.03] * 50) + 'sglang:num_aborted_requests_total{engine_type="unified",model_name="m"} 2\n'
    after = exposition(tpot=[0.03] * 3) + 'sglang:num_aborted_requests_total{engine_type="unified",model_name="m"} 1\n'
    eng.observe(srv, parse(before, wanted), 1000.0)
    eng.snapshot(1000.0)
    assert eng.observe(srv, parse(after, wanted), 1005.0) == 1
    eng.snapshot(1005.0)
    key = next(k for k in eng.book.scalars if k[1] == "sglang:num_aborted_requests_total")
    acc = eng.book.scalars[key]
    assert (acc.adjusted(), acc.resets, acc.decreases) == (1.0, 1, 0)  # 0 at the first scrape, its 1 new
    assert not any("went down by" in w for w in eng.warnings[srv.id])


def test_a_counter_absent_from_the_restart_scrape_that_comes_back_lower_restarted_too():
    """SGLang creates a counter at its first event: after a restart the aborted-requests counter is missing until
    the new process aborts one, then reads 1 where it read 2. Its target restarted since it was last seen: a
    restart, not a held decrease (the lab's restart incident read "arrival rate -4 %" for "-5 %" before this)."""
    from monitor.parse.exposition import parse
    from monitor.parse.families import engine_wanted
    from tests.slo.test_engine import make

    eng, (srv,) = make()
    wanted = engine_wanted()
    aborted = 'sglang:num_aborted_requests_total{engine_type="unified",model_name="m"} %d\n'
    eng.observe(srv, parse(exposition(tpot=[0.03] * 50) + aborted % 2, wanted), 1000.0)
    eng.observe(srv, parse(exposition(tpot=[0.03] * 3), wanted), 1005.0)  # restarted; no abort yet
    assert eng.observe(srv, parse(exposition(tpot=[0.03] * 6) + aborted % 1, wanted), 1010.0) == 1
    acc = next(a for k, a in eng.book.scalars.items() if k[1] == "sglang:num_aborted_requests_total")
    assert (acc.adjusted(), acc.decreases) == (1.0, 0)
    assert not any("went down by" in w for w in eng.warnings[srv.id])
