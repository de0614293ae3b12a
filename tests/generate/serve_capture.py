"""Serve an exposition capture as SGLang's own process would: through the prometheus_client the Python path
gives (a test puts one version first on PYTHONPATH), negotiated with its real `choose_encoder(Accept)`.

Run as a script: `python serve_capture.py CAPTURE PORT`. Only prometheus_client is imported, so the version
under test is the one that renders. Every scrape multiplies the samples by the scrape count (counters grow)."""

from __future__ import annotations

import http.server
import sys

import prometheus_client
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry


class Replay:
    def __init__(self, text: str) -> None:
        self.text, self.scrapes = text, 0

    def collect(self):  # noqa: ANN201 - prometheus_client's collector protocol
        for family in text_string_to_metric_families(self.text):
            family.samples = [s._replace(value=s.value * self.scrapes) for s in family.samples]
            yield family


def main() -> None:
    capture, port = sys.argv[1], int(sys.argv[2])
    with open(capture, encoding="utf-8") as f:
        replay = Replay(f.read())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(replay)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/version":
                body, ctype = prometheus_client.__file__.encode(), "text/plain"
            else:
                replay.scrapes += 1
                encoder, ctype = choose_encoder(self.headers.get("Accept", ""))
                body = encoder(registry)
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
