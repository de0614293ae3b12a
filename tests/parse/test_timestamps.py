"""Samples that carry their own timestamp (issue #34 item 13): `name{labels} value ms` in the text format, seconds in
OpenMetrics. Before, the timestamp was checked to be a number and dropped: a TPOT histogram dated 1 h back was read
as this scrape's value (Prometheus 2.42 stored none of it). Now a sample dated further than one scrape interval
from the scrape (`Limits.current`) is left out, with its histogram series, on every path through the parser."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from monitor.config import SidecarSettings
from monitor.parse.blocks import parse_grouped
from monitor.parse.exposition import Limits, _parse_lines, full_scan, parse
from monitor.parse.families import dated_warnings, engine_wanted, warning_key
from monitor.parse.job import from_wire, parse_job
from monitor.scrape.parsing import ParserPool
from tests.conftest import REAL_OM, REAL_TEXT

W = engine_wanted()
NOW = 1_750_000_000.0
INTERVAL = 15.0
AT_NOW = Limits(current=(NOW, INTERVAL))
TPOT = "sglang:request_time_per_output_token_seconds"
OM = "application/openmetrics-text; version=1.0.0"


class Path_(NamedTuple):
    name: str
    run: Callable[[str, str, Limits], Any]


# Every way a text can go through the parser: the block skipper, the full scan's fast grammar, the line parser.
PATHS = [
    Path_("grouped", lambda t, ct, lim: parse_grouped(t.encode(), W, ct, lim)),
    Path_("full scan", lambda t, ct, lim: full_scan(t, W, content_type=ct, count_families=False, limits=lim)),
    Path_("line parser", lambda t, ct, lim: _parse_lines(t, W, ct, lim)),
]


def stamped(text: str, stamp: str, prefix: str = TPOT, only: str = "") -> str:
    """`text` with `stamp` after the value of every line of `prefix` (either spelling) that contains `only`."""
    out = []
    for line in text.splitlines():
        if line.startswith((prefix, prefix.replace(":", "_"))) and only in line:
            line = f"{line} {stamp}"
        out.append(line)
    return "\n".join(out) + "\n"


def tpot_samples(expo) -> list:
    return [s for s in expo.selected if s.name.startswith(TPOT)]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_a_histogram_dated_an_hour_back_is_left_out_and_said(path):
    plain = REAL_TEXT.read_text()
    old = stamped(plain, str(int((NOW - 3600) * 1000)))  # the text format writes milliseconds
    expo = path.run(old, "", AT_NOW)
    base = path.run(plain, "", AT_NOW)
    assert tpot_samples(base) and tpot_samples(expo) == []
    assert base.dated is None
    assert sorted(expo.selected) == sorted(s for s in base.selected if not s.name.startswith(TPOT))
    assert expo.samples == base.samples  # still lines of the exposition
    n = len(tpot_samples(base))
    assert expo.dated is not None and (expo.dated.old, expo.dated.ahead, expo.dated.along) == (n, 0, 0)
    assert expo.dated.oldest == pytest.approx(3600, abs=1)
    (warning,) = dated_warnings(expo.dated)
    assert f"{n} samples carry timestamps up to 3600 s before the scrape" in warning
    assert "more than one scrape interval (15 s): not current, skipped" in warning


def test_parse_reads_without_a_clock_as_before_and_a_timestamp_free_text_has_nothing_dated():
    old = stamped(REAL_TEXT.read_text(), str(int((NOW - 3600) * 1000)))
    assert tpot_samples(parse(old, W, count_families=False)) and parse(old, W, count_families=False).dated is None
    assert parse(REAL_TEXT.read_bytes(), W, count_families=False, limits=AT_NOW).dated is None


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_openmetrics_timestamps_are_seconds(path):
    text = REAL_OM.read_text()
    now = stamped(text, f"{NOW - 1:.3f}")
    hour = stamped(text, f"{NOW - 3600:.3f}")
    assert now != text
    assert tpot_samples(path.run(now, OM, AT_NOW)) and path.run(now, OM, AT_NOW).dated is None
    assert tpot_samples(path.run(hour, OM, AT_NOW)) == [] and path.run(hour, OM, AT_NOW).dated.old > 0
    # An exemplar after the timestamp: the block skipper reads that block line by line, timestamps included.
    inf = hour.index('le="+Inf"', hour.index(TPOT.replace(":", "_") + "_bucket"))
    eol = hour.index("\n", inf)
    exemplar = hour[:eol] + ' # {trace_id="a"} 0.01' + hour[eol:]
    assert tpot_samples(path.run(exemplar, OM, AT_NOW)) == []


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_within_one_interval_either_way_a_sample_is_current_beyond_it_is_not(path):
    text = REAL_TEXT.read_text()
    for off, kept in ((-INTERVAL + 0.5, True), (INTERVAL - 0.5, True), (-INTERVAL - 0.5, False), (INTERVAL + 0.5, False)):
        expo = path.run(stamped(text, str(int((NOW + off) * 1000))), "", AT_NOW)
        assert bool(tpot_samples(expo)) is kept, off
    ahead = path.run(stamped(text, str(int((NOW + 120) * 1000))), "", AT_NOW)
    assert (ahead.dated.old, ahead.dated.ahead) == (0, len(tpot_samples(path.run(text, "", AT_NOW))))
    (warning,) = dated_warnings(ahead.dated)
    assert "up to 120 s after the scrape" in warning and "skipped" in warning


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_a_histogram_series_with_one_old_bucket_is_left_out_whole_and_the_others_kept(path):
    text = REAL_TEXT.read_text()
    one = 'is_streaming="true"'  # one of the fixture's two TPOT series
    expo = path.run(stamped(text, str(int((NOW - 3600) * 1000)), TPOT + "_bucket", 'le="+Inf"'), "", AT_NOW)
    base = tpot_samples(path.run(text, "", AT_NOW))
    series = [s for s in base if ("is_streaming", "true") in s.labels]
    assert 0 < len(series) < len(base)
    assert sum(("le", "+Inf") in s.labels for s in base) == 2  # both series' +Inf buckets dated: both left out
    assert tpot_samples(expo) == [] and expo.dated.along == len(base) - 2
    expo = path.run(stamped(text, str(int((NOW - 3600) * 1000)), TPOT + "_bucket", one + ',le="+Inf"'), "", AT_NOW)
    assert sorted(tpot_samples(expo)) == sorted(s for s in base if s not in series)
    assert (expo.dated.old, expo.dated.along) == (1, len(series) - 1)
    assert "current samples of the same histogram series left out" in dated_warnings(expo.dated)[0]


def test_the_warning_is_about_the_same_thing_whatever_its_numbers():
    text = REAL_TEXT.read_text()
    keys = {warning_key(w) for age in (3600, 3615, 90)
            for w in dated_warnings(parse(stamped(text, str(int((NOW - age) * 1000))), W, count_families=False,
                                          limits=AT_NOW).dated)}
    assert len(keys) == 1


def test_what_was_left_out_crosses_the_worker_process_pipe():
    body = stamped(REAL_TEXT.read_text(), str(int((NOW - 3600) * 1000))).encode()
    expo = from_wire(parse_job(body, W, "", False, AT_NOW))
    assert expo == parse(body, W, count_families=False, limits=AT_NOW) and expo.dated.old > 0


def test_the_parser_pool_dates_samples_against_its_clock_and_the_scrape_interval():
    pool = ParserPool(SidecarSettings(scrape_interval_seconds=INTERVAL, parse_workers=0))
    pool.clock = lambda: NOW
    text = REAL_TEXT.read_text()

    async def one(off: float):
        body = stamped(text, str(int((NOW + off) * 1000))).encode()
        return await pool.parse(body, W, content_type="", count_families=False, limits=Limits())

    try:
        assert tpot_samples(asyncio.run(one(-INTERVAL + 1)))
        assert not tpot_samples(asyncio.run(one(-INTERVAL - 1)))
    finally:
        pool.close()
