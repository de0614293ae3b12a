"""The mean latency recordings: only for SLIs the deployment targets or its recipe baseline has a mean for
(issue #36 item 3: an SLI no deployment targets adds no rule)."""

from __future__ import annotations

from monitor.config import parse_config
from monitor.conventions import names
from monitor.conventions.slis import INTER_TOKEN_LATENCY, LEADING_SLI, LEADING_SOURCE, OUTPUT_TOKEN_LATENCY
from monitor.generate.options import Options
from monitor.generate.rules import latency_means, mean_slis
from monitor.generate.symptoms import symptom_groups


def _dep(**fields):
    return parse_config({"deployments": [{"name": "d", **fields}]}).deployments[0]


def _means(dep) -> set[tuple[str, str]]:
    return {(r.record, r.labels["sli"]) for r in latency_means(dep, Options())}


def test_a_deployment_records_the_means_of_its_targets_only():
    dep = _dep(ttft_target_seconds=2.0)
    assert [s.key for s in mean_slis(dep)] == ["ttft"]
    assert _means(dep) == {(names.latency_mean("5m"), "ttft"), (names.latency_mean("30m"), "ttft")}
    assert _means(_dep()) == set()


def test_a_baseline_mean_is_recorded_for_the_regression_alert_that_reads_it():
    dep = _dep(baseline={"tpot_mean_seconds": 0.02})
    assert [s.key for s in mean_slis(dep)] == ["tpot"]
    rules = [r for g in symptom_groups(dep, Options()) for r in g.rules]
    regression = [r for r in rules if getattr(r, "alert", None) == names.ALERT_REGRESSION]
    assert [r.labels["sli"] for r in regression] == ["tpot"]
    assert names.latency_mean("30m") in str(regression[0].expr)
    assert (names.latency_mean("30m"), "tpot") in _means(dep)


def test_the_leading_warning_names_its_slis_by_measure():
    assert LEADING_SLI.measure == OUTPUT_TOKEN_LATENCY and LEADING_SOURCE.measure == INTER_TOKEN_LATENCY
