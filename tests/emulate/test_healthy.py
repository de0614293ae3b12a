"""Healthy means healthy: with no incident, every seed row at its recipe's concurrency keeps its SLIs.

The recipe's targets were measured by bench_serving at that concurrency, so an emulated deployment
driven the same way (closed loop, the recipe's input/output lengths and prefix share) must keep p99
TPOT and TTFT under target: burn under 0.5x over an hour, as the SLO engine computes it from the
emulator's own histograms. Every gauge must also follow from the scheduler.
"""

from __future__ import annotations

import pytest

from monitor.config import Deployment, load_config
from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.incidents import Incident
from monitor.emulate.loadgen import LoadShape
from monitor.recipes import default_config
from monitor.slo.histogram import Hist, good_ratio, merge
from tests.conftest import ROOT
from tests.emulate.closed_loop import ClosedLoop

EXAMPLE = ROOT / "examples" / "kimi-k2.6-ascend.yaml"
HOUR = 3600.0


def seed_rows() -> list[Deployment]:
    rows = load_config(EXAMPLE).deployments
    # The embedded recipe is the same page: same rows, flags, targets and bench commands.
    embedded = default_config(add_bucket_flags=True).deployments
    strip = {"source"}
    assert [(d.name, d.tpot_target_seconds, {k: v for k, v in d.launch.items() if k not in strip}) for d in rows] == \
        [(d.name, d.tpot_target_seconds, {k: v for k, v in d.launch.items() if k not in strip}) for d in embedded]
    return rows


ROWS = seed_rows()


def merged(dep: EmulatedDeployment, sli_family: str) -> Hist:
    hists = []
    for srv in dep.servers:
        for (name, _), h in srv.store.histograms.items():
            if name == sli_family:
                hists.append(Hist((*h.edges, float("inf")), tuple(h.cumulative()), h.sum, h.count))
    return merge(hists)


def drive(row: Deployment, seconds: float, *, seed: int = 1, incident: Incident | None = None) -> tuple[EmulatedDeployment, ClosedLoop]:
    dep = EmulatedDeployment(row, seed=seed, rate=0)  # no synthetic load: the closed loop is the client
    if incident is not None:
        dep.add_incident(incident)
    loop = ClosedLoop(dep, LoadShape.from_deployment(row), seed=seed)  # the recipe's bench command
    dep.advance(seconds)
    return dep, loop


@pytest.mark.parametrize("row", ROWS, ids=[d.name for d in ROWS])
def test_healthy_row_keeps_p99_under_target_at_recipe_concurrency(row):
    dep, loop = drive(row, HOUR)
    assert len(loop.done) >= 5, "too few requests finished to judge"
    burns = {}
    for sli, family in (("tpot", "sglang:request_time_per_output_token_seconds"),
                        ("ttft", "sglang:time_to_first_token_seconds")):
        target = row.target_seconds(sli)
        if target is None:
            continue
        ratio = good_ratio(merged(dep, family), target)
        assert ratio is not None
        burns[sli] = (1 - ratio.value) / (1 - row.objective)
    if not burns:  # no target (the K3 PR): it must stay at the baseline the PR measured
        tpot = merged(dep, "sglang:request_time_per_output_token_seconds")
        assert row.baseline is not None and row.baseline.tpot_mean_seconds
        assert abs(tpot.sum / tpot.count / row.baseline.tpot_mean_seconds - 1) < 0.15
        return
    assert all(b < 0.5 for b in burns.values()), burns
