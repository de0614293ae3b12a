"""The HTML report renders in headless Chromium: a screenshot exists and is not blank."""

from __future__ import annotations

import shutil
import subprocess
import zlib

import pytest

from monitor.analyze.output import write_report
from tests.analyze.test_incidents_recording import _report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, raw scanlines) of an 8-bit RGB/RGBA PNG: enough to tell a drawn page from a blank one."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    return width, height, zlib.decompress(idat)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y --no-install-recommends "
                                              "chromium); .ci/run installs it")
def test_report_renders_in_headless_chromium(overheat_run, tmp_path):
    paths = write_report(_report(overheat_run), tmp_path / "r")
    shot = tmp_path / "shot.png"
    res = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400", "--hide-scrollbars",
         f"--screenshot={shot}", paths["html"].resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert shot.exists(), res.stderr[-2000:]
    width, height, raw = png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 2400)
    # A blank page decompresses to one repeated byte; a report with tables and plots has many distinct ones
    # and a good share of non-white pixels.
    assert len(set(raw)) > 100
    assert sum(1 for b in raw[::7] if b < 200) > len(raw[::7]) * 0.02
