"""The running sidecar's wiring (monitor/sidecar.py) that no other module's tests reach."""

from __future__ import annotations

import asyncio
import logging

from monitor.config import parse_config
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.scrape.result import ScrapeResult
from monitor.sidecar import Sidecar
from tests.slo.helpers import exposition


def test_closing_the_sidecar_says_the_flaps_it_had_only_counted(caplog):
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
        {"role": "server", "url": "http://s:1/metrics"}]}]})
    sc = Sidecar(cfg, clock=lambda: 20.0)
    (target,) = cfg.deployments[0].targets
    good = parse(exposition(tpot=[0.03]), engine_wanted())
    with caplog.at_level(logging.INFO, logger="monitor.observations"):
        for i in range(4):  # down from the start, up, down, up within 15 s: the last two only counted
            sc.observations.apply(ScrapeResult("d", target, 5.0 * i, 1.0, error="refused") if i % 2 == 0 else
                                  ScrapeResult("d", target, 5.0 * i, 0.01, 100, exposition=good))
        asyncio.run(sc.close())
    said = [r.getMessage() for r in caplog.records]
    assert said[-1] == f"d {target.id}: flapped 4 times in the last 20 s, now up", said
