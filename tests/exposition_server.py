"""A text exposition served on 127.0.0.1 for tests of the real `slo-monitor run` process."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from tests.slo.helpers import exposition

TEXT_FORMAT = "text/plain; version=0.0.4"


@contextlib.contextmanager
def serving(body_of: Callable[[str], str | bytes], content_type: str = TEXT_FORMAT) -> Iterator[str]:
    """Serve `body_of(path)` for every GET (one thread per request); yields the server's base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = body_of(self.path)
            data = body.encode() if isinstance(body, str) else body
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def counting_server(state: dict, delay: float = 0.0) -> Iterator[str]:
    """An SGLang exposition per path (`/<deployment>/metrics`), answered after `delay`; counts the scrapes of
    each path in `state["scrapes"]`, with `state["good"]` requests under a 40 ms TPOT."""
    state.setdefault("lock", threading.Lock())
    state.setdefault("scrapes", Counter())

    def body_of(path: str) -> str:
        time.sleep(delay)
        with state["lock"]:
            state["scrapes"][path] += 1
            good = state["good"]
        return exposition(tpot=[0.03] * good)

    with serving(body_of) as url:
        yield url
