"""The emulator follows the SLI records (`conventions.slis`): the catalog prints each record's family as the process
that observes its measure writes it, and the observer has a moment for every measure."""

from __future__ import annotations

from monitor.conventions.slis import MEASURES, SLI_RECORDS
from monitor.emulate.catalog import BY_NAME
from monitor.emulate.observe import OBSERVED_AT


def test_the_catalog_prints_every_record_where_its_measure_is_observed():
    for sli in SLI_RECORDS:
        fam = BY_NAME[sli.family]
        assert fam.type == "histogram", sli.key
        assert fam.kind == {"tokenizer": "tok", "scheduler": "sched"}[sli.measure.observer], sli.key
        # A scheduler's histogram exists at zero from its start: with the record's edges (SGLang fixes them).
        assert fam.buckets == (() if fam.kind == "tok" else sli.buckets), sli.key


def test_every_measure_has_an_observation_point():
    assert set(OBSERVED_AT) == set(MEASURES)
