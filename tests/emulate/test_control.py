"""The emulator's control endpoint validates every field (400 naming it), never replaces a value silently,
and a long `advance` neither blocks the event loop nor outlives SIGTERM (#19 item 7)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import yaml

from monitor.emulate import Emulator, find_free_base_port, plan
from tests.emulate.conftest import make_config


async def post(session, url: str, raw: str):
    async with session.post(url, data=raw, headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json()


def control(cases: list[tuple[str, str]]) -> list[tuple[int, dict]]:
    """POST raw bodies to the control endpoint of a frozen emulator; (status, JSON) of each."""
    import aiohttp

    async def main():
        async with Emulator(make_config(), 0, speed=0) as emu, aiohttp.ClientSession() as s:
            return [await post(s, emu.control_url + path, raw) for path, raw in cases]

    return asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize("raw, field", [
    ('{"deployment": "mixed", "kind": "tpot_regression", "factor": NaN}', "factor"),
    ('{"deployment": "mixed", "kind": "tpot_regression", "factor": Infinity}', "factor"),
    ('{"deployment": "mixed", "kind": "tpot_regression", "factor": -1}', "factor"),
    ('{"deployment": "mixed", "kind": "tpot_regression", "factor": 0}', "factor"),  # not replaced by 2.0
    ('{"deployment": "mixed", "kind": "tpot_regression", "factor": true}', "factor"),
    ('{"deployment": "mixed", "kind": "tpot_regression", "factor": "2"}', "factor"),
    ('{"deployment": "mixed", "kind": "down", "duration_seconds": Infinity}', "duration_seconds"),
    ('{"deployment": "mixed", "kind": "down", "duration_seconds": NaN}', "duration_seconds"),
    ('{"deployment": "mixed", "kind": "down", "duration_seconds": -5}', "duration_seconds"),
    ('{"deployment": "mixed", "kind": "down", "start_in_seconds": NaN}', "start_in_seconds"),
    ('{"deployment": "mixed", "kind": "tpot_regression", "ramp_seconds": -30}', "ramp_seconds"),
    ('{"deployment": ["mixed"], "kind": "down"}', "deployment"),
    ('{"deployment": {"a": 1}, "kind": "down"}', "deployment"),
    ('{"deployment": "mixed", "kind": "melt"}', "kind"),
    ('{"deployment": "mixed", "kind": "down", "role": "router"}', "role"),
    ('{"deployment": "mixed", "kind": "down", "duraton_seconds": 5}', "duraton_seconds"),
    ('{"kind": "down"}', "deployment"),
    ('[1, 2]', "body"),
    ('{"deployment": "pd", "kind": "kv_transfer_failure", "factor": 3}', "factor"),
])
def test_incident_fields_are_validated_with_a_400_naming_the_field(raw, field):
    [(status, body)] = control([("/control/incident", raw)])
    assert status == 400, body
    assert body["error"].startswith(field) or field in {e["field"] for e in body.get("errors", [])}, body


def test_bad_json_and_wrong_types_elsewhere_are_400_not_500():
    results = control([
        ("/control/incident", "{not json"),
        ("/control/clear", '{"deployment": ["mixed"]}'),
        ("/control/clear", '{"deployment": "mixed", "all": true}'),
        ("/control/advance", '{"seconds": NaN}'),  # NaN once froze the clock for good
        ("/control/advance", '{"seconds": Infinity}'),
        ("/control/advance", '{"seconds": -1}'),
        ("/control/advance", '{"seconds": 1e6}'),  # ~17 minutes of work, once
        ("/control/advance", '{"seconds": "60"}'),
        ("/control/advance", '{}'),
    ])
    assert [s for s, _ in results] == [400] * len(results), results
    fields = [b["errors"][0]["field"] for _, b in results]
    assert fields[1:] == ["deployment", "all", "seconds", "seconds", "seconds", "seconds", "seconds", "seconds"]


def test_valid_requests_still_work_and_an_absent_factor_takes_the_kinds_default():
    results = control([
        ("/control/incident", '{"deployment": "mixed", "kind": "tpot_regression"}'),
        ("/control/incident", '{"deployment": "mixed", "kind": "tpot_regression", "factor": 3, "duration_seconds": 60}'),
        ("/control/incident", '{"deployment": "nope", "kind": "down"}'),
        ("/control/advance", '{"seconds": 30}'),
        ("/control/incident", '{"deployment": "mixed", "kind": "queue_buildup", "ramp_seconds": 120}'),
        ("/control/clear", ''),
    ])
    assert [s for s, _ in results] == [201, 201, 404, 200, 201, 200]
    assert results[0][1]["incident"]["factor"] == 2.0 and results[1][1]["incident"]["factor"] == 3.0
    assert results[4][1]["incident"]["ramp"] == 120.0
    assert results[3][1]["deployments"]["mixed"]["now"] == pytest.approx(30.0)


def _get(url: str, timeout: float) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as resp:
        return resp.status


def test_a_long_advance_keeps_the_endpoint_answering_and_sigterm_stops_it(tmp_path):
    """The longest advance allowed (a day of emulated load) runs in steps: /control/state answers meanwhile
    and SIGTERM ends the process within seconds, not when the day is done."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(make_config().model_dump(mode="json", exclude_none=True)))
    base = find_free_base_port(plan(make_config(), 0).port_count)
    proc = subprocess.Popen([sys.executable, "-m", "monitor", "emulate", "-c", str(cfg), "--base-port", str(base),
                             "--speed", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = ""
        while not line.startswith("{"):  # log lines, then the ready line
            line = proc.stdout.readline().decode()
            assert line, "the emulator exited before it was ready"
        url = json.loads(line)["control_url"]
        done: dict[str, object] = {}

        def long_advance() -> None:
            req = urllib.request.Request(url + "/control/advance", data=b'{"seconds": 86400}',
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=120) as r:
                    done["status"] = r.status
            except (urllib.error.URLError, OSError) as err:
                done["error"] = err

        t = threading.Thread(target=long_advance, daemon=True)
        t.start()
        time.sleep(1.0)
        assert t.is_alive(), f"a day of emulated load advanced in under a second? {done}"
        assert _get(url + "/control/state", timeout=10) == 200  # the loop is not blocked
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        assert time.monotonic() - sent < 20
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
