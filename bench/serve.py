"""Static scrape targets: `python -m bench.serve DIR [--core N]` serves DIR/NAME.txt at /NAME/<anything>.

One aiohttp process stands for any number of targets (the fleet uses /fixture/<i>/metrics for 256 of
them); it counts the requests per NAME, so a benchmark knows how many scrapes each scraper made.
It prints `PORT n` once it listens on 127.0.0.1.

`?variant=N` serves the text with every `pid` label moved by N (each SGLang scheduler has its own process
id): N targets then serve N distinct texts, as N real servers do, without N copies in memory.

A scraper whose path segment after NAME ends with `-gz` gets the body gzipped (level 9, compressed once
at start) when it asks for gzip, as prometheus_client answers every such request; any other path gets
the plain text whatever the client asks, so two scrapers can be given the same bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import re
from collections import Counter
from pathlib import Path

from aiohttp import web

from bench.procs import HOST, pin

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


_PID = re.compile(rb'pid="(\d+)"')


def variant(parts: list[bytes], n: int) -> bytes:
    """The text split at its pid values (`_PID.split`), joined again with each pid moved by n."""
    return b"".join(p if i % 2 == 0 else b'pid="%d"' % (int(p) + n) for i, p in enumerate(parts))


def build_app(texts: dict[str, bytes]) -> web.Application:
    counts: Counter[str] = Counter()
    zipped = {name: gzip.compress(body, 9) for name, body in texts.items()}
    split = {name: _PID.split(body) for name, body in texts.items()}

    async def target(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = texts.get(name)
        if body is None:
            raise web.HTTPNotFound()
        # Who asked: Prometheus and the sidecar scrape the same text under different prefixes.
        who = request.match_info["rest"].split("/", 1)[0]
        counts[name] += 1
        counts[f"{name}/{who}"] += 1
        if who.endswith("-gz") and "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=zipped[name], headers={"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip"})
        if "variant" in request.query:
            body = variant(split[name], int(request.query["variant"]) * 100_000)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def count(_: web.Request) -> web.Response:
        return web.json_response(dict(counts))

    app = web.Application()
    app.router.add_get("/_counts", count)
    app.router.add_get("/{name}/{rest:.*}", target)
    return app


async def _main(directory: Path) -> None:
    texts = {p.stem: p.read_bytes() for p in sorted(directory.glob("*.txt"))}
    runner = web.AppRunner(build_app(texts), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT {port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("directory", type=Path)
    ap.add_argument("--core", type=int)
    args = ap.parse_args()
    pin({args.core} if args.core is not None else None)
    asyncio.run(_main(args.directory))


if __name__ == "__main__":
    main()
