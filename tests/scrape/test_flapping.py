"""The flap damper: which up/down changes are said at once and when a summary is due."""

from __future__ import annotations

from monitor.scrape.flapping import FlapDamper, FlapSummary


def test_the_first_change_and_its_recovery_are_said_at_once_and_a_quiet_target_stays_quiet():
    d = FlapDamper(60)
    assert d.observe("t", True, 0) == (True, None)
    assert d.observe("t", True, 10) == (True, None)
    assert d.observe("t", False, 30) == (False, None)
    assert d.observe("t", False, 61) == (False, None)  # nothing unsaid: no summary, quiet again
    assert d.observe("t", True, 62) == (True, None)


def test_further_changes_are_counted_into_one_summary_per_interval_including_the_one_that_ends_it():
    d = FlapDamper(60)
    d.observe("t", True, 0)
    d.observe("t", True, 5)
    assert [d.observe("t", True, t) for t in (10, 20)] == [(False, None)] * 2
    assert d.observe("t", True, 65) == (False, FlapSummary(5, 65))
    assert d.observe("t", True, 70) == (False, None)  # still flapping: counted, not said
    assert d.observe("t", False, 125) == (False, FlapSummary(1, 60))
    assert d.observe("t", False, 190) == (False, None)  # a quiet interval
    assert d.observe("t", True, 191) == (True, None)


def test_targets_are_damped_independently():
    d = FlapDamper(60)
    for t in (0, 1, 2):
        d.observe("a", True, t)
    assert d.observe("b", True, 3) == (True, None)


def test_a_clock_that_steps_back_ends_the_interval():
    d = FlapDamper(60)
    for t in (100, 105, 110):
        d.observe("t", True, t)
    assert d.observe("t", False, 50) == (False, FlapSummary(3, 0.0))


def test_pending_closes_every_interval_with_changes_not_said_yet():
    d = FlapDamper(60)
    for t in (0, 1, 2, 3):
        d.observe("a", True, t)
    d.observe("b", True, 0)  # said at once: nothing pending
    assert d.pending(30) == [("a", FlapSummary(4, 30))]
    assert d.pending(31) == [] and d.observe("a", True, 32) == (True, None)
