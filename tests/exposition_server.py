"""A static SGLang exposition on 127.0.0.1 for tests of the real `slo-monitor run` process."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections import Counter
from collections.abc import Iterator

from tests.slo.helpers import exposition


@contextlib.contextmanager
def counting_server(state: dict, delay: float = 0.0) -> Iterator[str]:
    """An SGLang exposition per path (`/<deployment>/metrics`), answered after `delay`; counts the scrapes of
    each path in `state["scrapes"]`, with `state["good"]` requests under a 40 ms TPOT."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            time.sleep(delay)
            with state["lock"]:
                state["scrapes"][self.path] += 1
                good = state["good"]
            body = exposition(tpot=[0.03] * good).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    state.setdefault("lock", threading.Lock())
    state.setdefault("scrapes", Counter())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
