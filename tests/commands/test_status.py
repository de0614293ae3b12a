"""`slo-monitor status`: where it takes the API token from, paging through a large fleet, refusals."""

from __future__ import annotations

import argparse
import asyncio
import http.server
import threading

import pytest

from monitor.cli import main
from monitor.commands.status import TOKEN_ENV, _status, fetch_status, render_table
from monitor.config import parse_config
from monitor.export.status_query import DEFAULT_LIMIT
from monitor.sidecar import Sidecar
from monitor.status_model import StatusResponse, sidecar_status

TOKEN = "t0k-from-elsewhere"
BODY = StatusResponse(sidecar=sidecar_status(1.0, 2.0, 5.0, 3, 0.01), deployments=[]).model_dump_json().encode()


@pytest.fixture
def sidecar_url():
    """A stand-in sidecar whose /api/v1/status wants `Authorization: Bearer TOKEN`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
            self.send_response(200 if ok else 401)
            self.end_headers()
            self.wfile.write(BODY if ok else b"{}")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_token_can_come_from_the_environment(sidecar_url, monkeypatch, capsys):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert main(["status", "--url", sidecar_url, "--json"]) == 0
    assert '"cycles": 3' in capsys.readouterr().out


def test_the_token_can_come_from_a_file(sidecar_url, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")  # as `echo` writes it
    assert main(["status", "--url", sidecar_url, "--json", "--token-file", str(path)]) == 0
    assert '"cycles": 3' in capsys.readouterr().out


@pytest.mark.parametrize("content", [None, ""])
def test_a_token_file_that_is_missing_or_empty_is_one_clear_line(content, tmp_path, capsys):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    assert main(["status", "--url", "http://127.0.0.1:9", "--token-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--token-file" in err and str(path) in err


def test_the_table_says_when_the_sidecar_is_degraded_or_its_last_reload_failed():
    from monitor.commands.status import render_table
    from monitor.status_model import ConfigReloadStatus

    side = sidecar_status(1.0, 2.0, 5.0, 3, 0.01, degraded=["recording /r.sqlite: cannot write (disk full)"],
                          config=ConfigReloadStatus(successful=False, last_success_ts=1.0, last_attempt_ts=2.0,
                                                    last_error="c.yaml: invalid config (1 error)"))
    table = render_table(StatusResponse(sidecar=side, deployments=[]), color=False)
    assert "sidecar degraded: recording /r.sqlite: cannot write (disk full)" in table
    assert "config reload failed (the previous config still runs): c.yaml: invalid config" in table
    healthy = render_table(StatusResponse(sidecar=sidecar_status(1.0, 2.0, 5.0, 3, 0.01), deployments=[]), color=False)
    assert "degraded" not in healthy and "reload" not in healthy



# --- against a live sidecar whose /api/v1/status answers in pages ---------------------------------------------
N = 2 * DEFAULT_LIMIT + 5


def _with_sidecar(check):
    async def go():
        sc = Sidecar(parse_config({"deployments": [
            {"name": f"dep-{i:04d}", "tpot_target_seconds": 0.05, "targets": []} for i in range(N)]}))
        port = await sc.start_http("127.0.0.1", 0)
        try:
            return await asyncio.to_thread(check, f"http://127.0.0.1:{port}")
        finally:
            await sc.close()
    return asyncio.run(go())


def test_the_client_fetches_every_page_of_a_large_fleet_and_passes_filters():
    def check(url):
        return fetch_status(url), fetch_status(url, deployments=["dep-000[0-2]", "dep-0204"])

    everything, some = _with_sidecar(check)
    assert [d.name for d in everything.deployments] == [f"dep-{i:04d}" for i in range(N)]
    assert everything.page is None
    assert f"dep-{N - 1:04d}" in render_table(everything, color=False)
    assert [d.name for d in some.deployments] == ["dep-0000", "dep-0001", "dep-0002", "dep-0204"]


def test_a_query_the_sidecar_refuses_is_said_with_its_reason(capsys):
    def check(url):
        args = argparse.Namespace(url=url, token=None, token_file=None, watch=0.0, json=True, no_color=True,
                                  deployment=[""], state=[])
        return _status(args)

    assert _with_sidecar(check) == 2
    err = capsys.readouterr().err
    assert "the sidecar refused the query" in err and "deployment= is empty" in err
