"""Incident effects follow the magnitude and evolve like production: ramps, a chip that heats and cools,
a KV pool that shrinks by the share lost (monitor/emulate/incidents.py; pure)."""

from __future__ import annotations

import pytest

from monitor.emulate.incidents import HEAT_PER_SLOWDOWN, THERMAL_TAU, effects, parse_spec


def test_a_ramped_incident_grows_linearly_to_its_factor_and_stops_at_its_end():
    inc = parse_spec("d:tpot_regression:3@100+200~100")
    assert inc.ramp == 100 and inc.duration == 200
    assert [effects([inc], "server", t).tpot for t in (99, 100, 150, 200, 299, 300)] == \
        pytest.approx([1.0, 1.0, 2.0, 3.0, 3.0, 1.0])
    # Rates are recomputed along the ramp, not only at its start and end.
    assert len([t for t in inc.change_points() if 100 < t < 200]) >= 10


@pytest.mark.parametrize("factor", [1.2, 1.5, 1.9])
def test_an_overheating_chip_heats_with_the_magnitude_over_time_and_cools_after(factor):
    inc = parse_spec(f"d:npu_overheat:{factor}@0+600")
    full = HEAT_PER_SLOWDOWN * (factor - 1)
    early, later, hot = (effects([inc], "server", t) for t in (THERMAL_TAU / 4, THERMAL_TAU, 599))
    assert 0 < early.heat < later.heat < hot.heat == pytest.approx(full, rel=0.01)  # a ramp, not a step
    assert later.heat == pytest.approx(full * (1 - 2.718281828 ** -1), rel=0.01)
    # The chip throttles as hot as it has got; a throttled chip draws less power for the same work.
    assert hot.tpot == pytest.approx(factor, rel=0.01) and early.tpot < later.tpot
    assert hot.chip_power(180.0, 220.0) < effects([], "server", 0).chip_power(180.0, 220.0)
    cooling = effects([inc], "server", 600 + THERMAL_TAU)
    assert 0 < cooling.heat < hot.heat and not cooling.overheat
    assert effects([inc], "server", 600 + 6 * THERMAL_TAU).heat == 0.0


def test_no_chip_temperature_is_pinned_whatever_the_factor():
    heats = [effects([parse_spec(f"d:npu_overheat:{f}@0+600")], "server", 599).chip_temperature(50.0)
             for f in (1.0, 1.2, 1.9)]
    assert heats[0] == pytest.approx(50.0) and heats[0] < heats[1] < heats[2]


@pytest.mark.parametrize("share", [0.9, 0.6, 0.3])
def test_a_full_kv_cache_leaves_the_share_of_the_pools_tokens_and_no_chip_memory_moves(share):
    eff = effects([parse_spec(f"d:hbm_full:{share}@0+100")], "server", 50)
    assert eff.pool_lost(10_000) == int(10_000 * (1 - share))
    assert effects([parse_spec(f"d:hbm_full:{share}@0+100")], "server", 150).pool_lost(10_000) == 0
    assert not hasattr(eff, "hbm_used")  # SGLang preallocates the pool: HBM use is flat whatever the cache holds


def test_a_ramp_without_a_start_or_a_negative_one_is_refused_or_parsed():
    assert parse_spec("d:queue_buildup:2~30").ramp == 30
    with pytest.raises(ValueError, match="ramp"):
        parse_spec("d:queue_buildup:2@0+60~-5")
