"""Rows a deployment keeps in the recording under thinning and retention."""

from __future__ import annotations

import pytest

from monitor.record.size import expected_bytes, rows_kept

THIN = ((3600.0, 60.0), (21720.0, 300.0))


@pytest.mark.parametrize("retain, rows", [
    (86400, 240 + 302 + 215.6),  # a day: every 15 s tick for 1 h, one a minute to 6 h 2 min, one per 5 minutes
    (7200, 240 + 60),
    (1800, 120),  # shorter than the full-resolution hour: every tick
    (2 * 86400, 240 + 302 + 215.6 + 288),
])
def test_rows_kept_follow_the_thinning_tiers_up_to_the_retention(retain, rows):
    assert rows_kept(retain, 15.0, THIN) == pytest.approx(rows)


def test_a_tick_slower_than_a_tier_keeps_every_tick():
    assert rows_kept(86400, 120.0, THIN) == pytest.approx(30 + 151 + 215.6)
    assert rows_kept(86400, 15.0, ()) == 5760


def test_expected_bytes_scale_with_rows_and_deployments():
    assert expected_bytes(5600, 2000, 758) == 5600 * 2000 * 758
