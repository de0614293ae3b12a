"""The optional availability SLO: recorded and alerted like the latency SLIs, from the gateway's own counters,
with each gateway version's expressions (conventions.AVAILABILITY_SERIES, docs/gateways.md)."""

from __future__ import annotations

import pytest
import yaml

from monitor.config import ConfigError, Gateway, parse_config
from monitor.conventions import names
from monitor.conventions.names import AVAILABILITY_SERIES, CLIENT_CLOSED_SERIES, GATEWAY_OWN_PATHS, GATEWAYS
from monitor.conventions.policy import RULE_WINDOWS
from monitor.generate.options import Options
from monitor.generate.rules import slo_groups
from monitor.interop.openslo import render_openslo
from monitor.interop.sloth import render_sloth
from monitor.promql import metric_names
from monitor.slo_plan import AvailabilityPlan, plan_slis

ROUTER = {"role": "router", "url": "http://10.0.0.3:29000/metrics"}


def _rules(small_files: dict[str, str], deployment: str) -> list[dict]:
    doc = yaml.safe_load(small_files[f"alerts/{names.rules_file(deployment)}"])
    return [r for g in doc["groups"] for r in g["rules"]]


def _recorded(small_files: dict[str, str], deployment: str) -> dict[str, str]:
    return {r["record"]: r["expr"] for r in _rules(small_files, deployment)
            if "record" in r and r.get("labels", {}).get("sli") == "availability"}


def test_config_gateway_names_are_the_conventions_ones():
    assert Gateway.__args__ == GATEWAYS  # type: ignore[attr-defined]
    assert set(AVAILABILITY_SERIES) == set(CLIENT_CLOSED_SERIES) == set(GATEWAYS)


def test_smg_1_13_counts_responses_on_serving_paths_and_failures_once(small_files):
    rec = _recorded(small_files, "kimi-pd")
    for w in RULE_WINDOWS:
        total, good = rec[names.sli_total(w)], rec[names.sli_good(w)]
        assert total == (f'sum by (deployment) (rate(smg_http_responses_total{{deployment="kimi-pd",role="router",'
                         f'path!~"{GATEWAY_OWN_PATHS}"}}[{w}]))')
        # good = total - (the gateway's own 5xx, which carry an error_code) - backend_error (a worker's 5xx
        # passed through, error_code "", or a stream broken mid-body); a missing failure series counts 0.
        assert good.startswith(f"clamp_min(\n{total}\n- (") and good.endswith(",\n0)")
        assert 'status_code=~"5..",error_code!=""' in good and 'error_type="backend_error"' in good
        assert good.count(f" or 0 * {total})") == 2
        assert names.sli_error(w) in rec and names.burn_rate(w) in rec
    assert names.TARGET not in rec
    objective = next(r for r in _rules(small_files, "kimi-pd")
                     if r.get("record") == names.OBJECTIVE and r["labels"]["sli"] == "availability")
    assert objective["expr"] == "vector(0.999)"  # availability_objective, not the SLIs' 0.99


def test_sglang_router_0_3_2_counts_routed_requests_and_every_5xx(small_files):
    rec = _recorded(small_files, "llama-unified")
    total = 'sum by (deployment) (rate(smg_router_requests_total{deployment="llama-unified",role="router"}[1h]))'
    assert rec[names.sli_total("1h")] == total
    assert 'smg_http_responses_total{deployment="llama-unified",role="router",status_code=~"5.."}' in rec[
        names.sli_good("1h")]
    assert "backend_error" not in rec[names.sli_good("1h")] and "path" not in rec[names.sli_good("1h")]


def test_availability_pages_and_tickets_on_the_workbook_pairs_with_a_gateway_runbook(small_files):
    alerts = [r for r in _rules(small_files, "kimi-pd") if "alert" in r and r["labels"].get("sli") == "availability"]
    pairs = {(a["labels"]["severity"], a["labels"]["long_window"], a["labels"]["short_window"]) for a in alerts}
    assert pairs == {("page", "1h", "5m"), ("page", "6h", "30m"), ("ticket", "1d", "2h"), ("ticket", "3d", "6h")}
    page = next(a for a in alerts if a["labels"]["long_window"] == "1h")
    assert "99.9% of the requests the gateway (smg-1.13) answers without a server-side failure" in \
        page["annotations"]["description"]
    assert "499" in page["annotations"]["runbook"] and "target_seconds" not in page["annotations"]
    assert metric_names(page["annotations"]["sli_metric"].replace(" + ", " + ")) == {
        "smg_http_responses_total", "smg_router_request_errors_total"}


def test_a_router_alone_records_no_availability_slo():
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.04, "targets": [
        {"role": "server", "url": "http://127.0.0.1:30000/metrics"}, ROUTER]}]})
    plans = plan_slis(cfg.deployments[0])
    assert not any(isinstance(p, AvailabilityPlan) for p in plans)
    assert "availability" not in yaml.safe_dump([g.data() for g in slo_groups(cfg.deployments[0], plans, Options())])


def test_availability_objective_without_a_router_target_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"deployments\[0\] \(d\).*availability_objective needs a target with "
                                          r"role: router"):
        parse_config({"deployments": [{"name": "d", "availability_objective": 0.999, "targets": [
            {"role": "server", "url": "http://127.0.0.1:30000/metrics"},
            {"role": "router", "source": "router-engine-metrics", "url": "http://10.0.0.3:30000/engine_metrics"}]}]})


def test_a_deployment_runs_one_gateway_version():
    with pytest.raises(ConfigError, match="different gateways"):
        parse_config({"deployments": [{"name": "d", "targets": [
            {**ROUTER, "gateway": "smg-1.13"},
            {"role": "router", "url": "http://10.0.0.4:29000/metrics", "gateway": "sglang-router-0.3.2"}]}]})
    with pytest.raises(ConfigError, match=r"targets\[0\].gateway: Input should be 'smg-1.13' or"):
        parse_config({"deployments": [{"name": "d", "targets": [{**ROUTER, "gateway": "smg-1.12"}]}]})
    with pytest.raises(ConfigError, match="gateway applies to a gateway's targets"):
        parse_config({"deployments": [{"name": "d", "targets": [
            {"role": "server", "url": "http://127.0.0.1:30000/metrics", "gateway": "smg-1.13"}]}]})


def test_0_3_2_availability_refuses_a_pd_engine_metrics_scrape_that_it_would_count_as_failures():
    with pytest.raises(ConfigError, match="answers /engine_metrics of a PD pair with HTTP 500"):
        parse_config({"deployments": [{"name": "d", "mode": "pd-disaggregated", "availability_objective": 0.99,
                                       "targets": [{**ROUTER, "gateway": "sglang-router-0.3.2"},
                                                   {"role": "router", "source": "router-engine-metrics",
                                                    "url": "http://10.0.0.3:30000/engine_metrics"}]}]})


def test_the_gateway_defaults_to_smg_1_13():
    cfg = parse_config({"deployments": [{"name": "d", "targets": [ROUTER]}]})
    assert cfg.deployments[0].gateway == "smg-1.13"


def test_sloth_and_openslo_carry_the_availability_slo(small_config):
    spec = yaml.safe_load(render_sloth(small_config)["sloth/kimi-pd.yaml"])
    slo = next(s for s in spec["slos"] if s["name"] == "availability")
    assert slo["objective"] == 99.9 and "backend_error" in slo["sli"]["events"]["error_query"]
    docs = list(yaml.safe_load_all(render_openslo(small_config)["openslo/llama-unified.yaml"]))
    doc = next(d for d in docs if d["metadata"]["labels"]["sli"] == "availability")
    ratio = doc["spec"]["indicator"]["spec"]["ratioMetric"]
    assert ratio["total"]["metricSource"]["spec"]["query"] == \
        'smg_router_requests_total{deployment="llama-unified",role="router"}'
    assert "good" not in ratio and 'status_code=~"5.."' in ratio["bad"]["metricSource"]["spec"]["query"]
    assert doc["spec"]["objectives"][0]["target"] == 0.995
