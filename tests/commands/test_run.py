"""`slo-monitor run`: what it refuses before starting and what it says when it starts."""

from __future__ import annotations

import sys
from pathlib import Path

from monitor.cli import main
from tests.conftest import free_port
from tests.procs import running

ROOT = Path(__file__).resolve().parents[2]


def test_a_config_with_no_deployments_is_refused_with_one_line(tmp_path, capsys):
    for text in ("deployments: []\n", "sidecar: {listen_port: 0}\n"):
        cfg = tmp_path / "empty.yaml"
        cfg.write_text(text)
        assert main(["run", "-c", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(cfg) in err and "no deployments" in err


def test_a_shard_holding_no_deployment_is_refused(tmp_path, capsys):
    cfg = tmp_path / "one.yaml"
    cfg.write_text("deployments: [{name: only, tpot_target_seconds: 0.04}]\n")
    assert main(["run", "-c", str(cfg), "--shard", "1/2"]) == 2  # `only` hashes to shard 0 of 2
    err = capsys.readouterr().err
    assert "--shard 1/2" in err and "none of the 1 deployment" in err


def test_run_logs_a_target_off_the_bucket_edges_at_start_with_the_flag_to_relaunch_with(tmp_path):
    port = free_port()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "deployments:\n"
        "  - {name: off-edge, tpot_target_seconds: 0.05, ttft_target_seconds: 1.0, targets: []}\n"
        "  - {name: declared, tpot_target_seconds: 0.05, buckets: {tpot: [0.01, 0.05, 0.1]}, targets: []}\n")
    log = tmp_path / "run.log"
    with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg), "--listen", f"127.0.0.1:{port}"], log,
                 ready_url=f"http://127.0.0.1:{port}/healthz"):
        pass
    lines = [line for line in log.read_text().splitlines() if "bucket edge" in line]
    assert len(lines) == 1, log.read_text()  # ttft 1.0 is an edge; the declared buckets hold 0.05
    assert "WARNING" in lines[0] and "off-edge" in lines[0] and "tpot target 50 ms" in lines[0]
    assert "--bucket-inter-token-latency 0.002 0.004" in lines[0] and " 0.05 " in lines[0]
    assert "buckets:" in lines[0]  # and where to say so in the config


# --- signals and reload, on the real `slo-monitor run` process -----------------------------------------

import contextlib  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import sqlite3  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

from tests.exposition_server import serving  # noqa: E402
from tests.procs import wait_for  # noqa: E402
from tests.slo.helpers import exposition  # noqa: E402

TOKEN = "reload-t0ken"


@contextlib.contextmanager
def _metrics_server(state: dict):
    """A static SGLang exposition on 127.0.0.1: `state["good"]` requests with a TPOT under 40 ms."""
    with serving(lambda path: exposition(tpot=[0.03] * state["good"])) as url:
        yield url + "/metrics"


def _yaml(listen_port: int, url: str, *, b_target: float = 0.04, extra: str = "", recording: str = "",
          token: str = "") -> str:
    side = (f"sidecar: {{listen_port: {listen_port}, scrape_interval_seconds: 0.3, scrape_timeout_seconds: 0.25"
            f"{recording}{token}}}\n")
    return (side + "deployments:\n"
            f"  - {{name: a, tpot_target_seconds: 0.04, targets: [{{role: server, url: '{url}'}}]}}\n"
            f"  - {{name: b, tpot_target_seconds: {b_target}, targets: [{{role: server, url: '{url}'}}]}}\n" + extra)


def _get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(url, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _events(base: str, token: str | None = None) -> dict[str, float | None]:
    """Each deployment's TPOT events over 5m, from /api/v1/status."""
    status = json.loads(_get(base + "/api/v1/status", token)[1])
    return {d["name"]: d["slis"][0]["windows"][0]["events"] for d in status["deployments"]}



def _metric(base: str, name: str) -> float | None:
    for line in _get(base + "/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_sighup_reloads_the_config_keeping_the_windows_of_unchanged_deployments(tmp_path):
    state = {"good": 0}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg, log = tmp_path / "c.yaml", tmp_path / "run.log"
    with _metrics_server(state) as url:
        cfg.write_text(_yaml(port, url))
        argv = [sys.executable, "-m", "monitor", "run", "-c", str(cfg)]
        with running(argv, log, ready_url=base + "/healthz") as proc:
            wait_for(lambda: all(v is not None for v in _events(base).values()), "first scrapes", log)
            state["good"] = 100
            wait_for(lambda: _events(base) == {"a": 100, "b": 100}, "100 requests in both windows", log)
            # b's target changes, c is added: a keeps its window, b and c start from empty.
            cfg.write_text(_yaml(port, url, b_target=0.05, extra=(
                f"  - {{name: c, tpot_target_seconds: 0.04, targets: [{{role: server, url: '{url}'}}]}}\n")))
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "config reloaded" in log.read_text(), "the reload", log)
            wait_for(lambda: set(_events(base)) == {"a", "b", "c"} and None not in _events(base).values(),
                  "scrapes under the new config", log)
            time.sleep(0.7)  # a few more scrapes
            assert proc.poll() is None, log.read_text()
            assert _events(base) == {"a": 100, "b": 0, "c": 0}
            status = json.loads(_get(base + "/api/v1/status")[1])
            assert [s["target_seconds"] for d in status["deployments"] if d["name"] == "b" for s in d["slis"]] == [0.05]
            assert _metric(base, "slo_monitor_config_last_reload_successful") == 1.0

            # A broken file: the reload is refused with the reason, the running config stays.
            cfg.write_text(_yaml(port, url).replace("tpot_target_seconds: 0.04", "tpot_target_secs: 0.04", 1))
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "config reload failed" in log.read_text(), "the refused reload", log)
            assert proc.poll() is None
            line = next(x for x in log.read_text().splitlines() if "config reload failed" in x)
            assert "ERROR" in line and "tpot_target_secs" in line and "previous config" in line
            assert set(_events(base)) == {"a", "b", "c"}
            assert _metric(base, "slo_monitor_config_last_reload_successful") == 0.0
            status = json.loads(_get(base + "/api/v1/status")[1])
            assert status["sidecar"]["config"]["successful"] is False
            assert "tpot_target_secs" in status["sidecar"]["config"]["last_error"]


def test_post_reload_is_off_unless_the_lifecycle_api_is_enabled(tmp_path):
    """As Prometheus without --web.enable-lifecycle: a 403 saying how to turn it on; the config is not read."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg, log = tmp_path / "c.yaml", tmp_path / "run.log"
    with _metrics_server({"good": 0}) as url:
        cfg.write_text(_yaml(port, url))
        with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg)], log, ready_url=base + "/healthz"):
            cfg.write_text("not: [a config")
            code, body = _get(base + "/-/reload", method="POST")
            assert code == 403 and "sidecar.enable_lifecycle" in json.loads(body)["error"], body
            assert "config reload" not in log.read_text()


def test_post_reload_needs_the_api_token_and_says_why_a_reload_failed(tmp_path):
    state = {"good": 0}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg, log = tmp_path / "c.yaml", tmp_path / "run.log"
    token = f", api_bearer_token: {TOKEN}, enable_lifecycle: true"
    with _metrics_server(state) as url:
        cfg.write_text(_yaml(port, url, token=token))
        with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg)], log, ready_url=base + "/healthz"):
            assert _get(base + "/-/reload", method="POST")[0] == 401
            assert _get(base + "/-/reload", "wrong", method="POST")[0] == 401
            assert _get(base + "/-/reload", TOKEN)[0] == 405  # GET does nothing
            cfg.write_text(_yaml(port + 1, url, token=token))  # valid, but the socket is bound at start
            code, body = _get(base + "/-/reload", TOKEN, method="POST")
            assert code == 500 and "listen_port" in json.loads(body)["error"] and "restart" in json.loads(body)["error"]
            cfg.write_text(_yaml(port, url, b_target=0.05, token=token))
            code, body = _get(base + "/-/reload", TOKEN, method="POST")
            assert (code, json.loads(body)) == (200, {"status": "success"})
            status = json.loads(_get(base + "/api/v1/status", TOKEN)[1])
            assert status["sidecar"]["config"]["successful"] is True
            assert [s["target_seconds"] for s in status["deployments"][1]["slis"]] == [0.05]


def test_sigterm_is_logged_and_the_recording_gets_the_last_seconds(tmp_path):
    state = {"good": 0}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg, log, rec = tmp_path / "c.yaml", tmp_path / "run.log", tmp_path / "rec.sqlite"
    # One tick a minute: without a last tick at exit everything after the first one would be lost.
    recording = f", recording_path: '{rec}', recording_interval_seconds: 60"
    with _metrics_server(state) as url:
        cfg.write_text(_yaml(port, url, recording=recording))
        with running([sys.executable, "-m", "monitor", "run", "-c", str(cfg)], log,
                     ready_url=base + "/healthz") as proc:
            wait_for(lambda: all(v is not None for v in _events(base).values()), "first scrapes", log)
            state["good"] = 100
            wait_for(lambda: _events(base) == {"a": 100, "b": 100}, "100 requests in both windows", log)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(15) == 0, log.read_text()
    db = sqlite3.connect(f"file:{rec}?mode=ro", uri=True)
    rows = db.execute("SELECT deployment, MAX(ts), state FROM snapshots GROUP BY deployment").fetchall()
    db.close()
    assert {r[0] for r in rows} == {"a", "b"}
    for _dep, _ts, row in rows:  # the last tick holds the 100 requests scraped after the first one
        assert json.loads(row)["slis"]["tpot"]["windows"]["5m"]["events"] == 100, row
    text = log.read_text()
    assert "SIGTERM received: stopping" in text and "last tick written" in text and text.rstrip().endswith("stopped")
