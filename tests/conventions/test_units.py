"""Duration strings: the whole Prometheus grammar, since the Prometheus API answers in it."""

from __future__ import annotations

import pytest

from monitor.conventions.units import format_duration, parse_duration, parse_prometheus_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("30d", 2592000), ("6h", 21600), ("5m", 300), ("90s", 90), ("1w", 604800), ("1y", 31536000),
    ("1m30s", 90), ("1h30m", 5400), ("2d12h", 216000), ("0s", 0),
])
def test_whole_second_durations_parse_including_compound_ones(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds
    assert parse_prometheus_duration(text) == seconds


def test_prometheus_renders_sub_second_scrape_intervals_in_milliseconds() -> None:
    assert parse_prometheus_duration("500ms") == 0.5
    assert parse_prometheus_duration("1s500ms") == 1.5


@pytest.mark.parametrize("text", ["", "m", "30", "5x", "1.5s", "5s5m", "-5m", "5 m"])
def test_malformed_durations_are_refused_with_the_grammar_in_the_message(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration like"):
        parse_prometheus_duration(text)


def test_rule_windows_refuse_fractions_of_a_second() -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        parse_duration("500ms")


@pytest.mark.parametrize("seconds", [1, 59, 90, 300, 3600, 5400, 86400, 2592000])
def test_format_duration_round_trips(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds
