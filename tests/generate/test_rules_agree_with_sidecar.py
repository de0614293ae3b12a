"""The generated rules and the sidecar compute the same SLI (and leading TPOT signal) from the same scrapes of
a PD deployment (and the same availability from the same scrapes of a gateway, for each gateway version).

The expositions are written by prometheus_client (as SGLang's own collectors write them): a prefill server
that records E2E latencies of its part only (as SGLang 0.5.23 does) and a decode server that records every
SLI. The same cumulative values are fed to the sidecar's engine and, as promtool input series with the
labels Prometheus's scrape adds, to the generated rules; promtool must then read the sidecar's numbers.
Samples fall on the window's edges. Prometheus 2.42's range selectors are closed, so its 5m window holds the
same five scrape intervals as the sidecar's and `rate()` does not extrapolate; Prometheus 3's are left-open, so
the sample on the window's start is left out and `rate()` extrapolates four intervals to five. Each step
therefore serves the same requests (a steady load, the same latencies every minute): the extrapolation is then
exact and both versions must read the sidecar's numbers to rounding (docs/prometheus3.md).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from monitor.config import parse_config
from monitor.conventions import names
from monitor.conventions.names import GAUGES
from monitor.conventions.slis import DEFAULT_BUCKETS, SLI_FAMILIES
from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.generate.writer import write
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.parse.gateway import ROUTER_WANTED
from monitor.slo.engine import DeploymentEngine
from tests.components import Build
from tests.generate.conftest import run_tool

STEP = 60  # one scrape a minute
STEPS = 10
TARGETS = {"ttft": 2.0, "tpot": 0.1, "e2e": 8.0, "queue_time": 1.0}  # bucket edges: exact on both sides
CONFIG = {"deployments": [{
    "name": "pd", "mode": "pd-disaggregated", "objective": 0.9,
    **{f"{sli}_target_seconds": t for sli, t in TARGETS.items()},
    "targets": [{"role": "prefill", "url": "http://10.0.0.1:30000/metrics"},
                {"role": "decode", "url": "http://10.0.0.2:30000/metrics"}],
}]}


class Server:
    """One SGLang server's tokenizer histograms in its own registry."""

    def __init__(self, engine_type: str, slis: tuple[str, ...]) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine_type"]
        self.hists = {sli: Histogram(SLI_FAMILIES[sli], "latency", labels, registry=self.registry,
                                     buckets=DEFAULT_BUCKETS[sli]).labels("kimi", engine_type) for sli in slis}

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def _input_series(text: str, role: str, instance: str, deployment: str = "pd") -> dict[str, float]:
    """Sample lines as Prometheus stores them: the scrape adds deployment, role, instance and job."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or line.split("{")[0].endswith("_created"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        name, _, rest = name_labels.partition("{")
        extra = f'deployment="{deployment}",instance="{instance}",job="sglang-{role}",role="{role}"'
        out[f"{name}{{{rest[:-1]},{extra}}}" if rest else f"{name}{{{extra}}}"] = float(value)
    return out


def test_pd_sli_events_ratios_and_means_agree_between_sidecar_and_generated_rules(tmp_path: Path,
                                                                                  prometheus_build: Build):
    config = parse_config(CONFIG)
    dep = config.deployments[0]
    # SGLang's prefill tokenizer records E2E, never TTFT/TPOT/ITL; every scheduler records its queue time.
    prefill = Server("prefill", ("e2e", "queue_time"))
    decode = Server("decode", ("ttft", "tpot", "itl", "e2e", "queue_time"))
    targets = {t.role: t for t in dep.targets}
    engine = DeploymentEngine(dep)
    history: dict[str, list[float]] = {}
    truth: list[list[float]] = [[] for _ in range(STEPS + 1)]  # the client's E2E (decode's), per step
    waits: list[list[float]] = [[] for _ in range(STEPS + 1)]  # the prefill queue's waits, per step
    for step in range(STEPS + 1):
        rng = random.Random(7)  # every minute the same requests: see the module doc
        for _ in range(60):
            # The decode server's E2E is the client's; the prefill server's covers prefill only (short).
            ttft = rng.lognormvariate(0.2, 0.8)
            decode.hists["ttft"].observe(ttft)
            decode.hists["tpot"].observe(rng.uniform(0.03, 0.12))
            decode.hists["itl"].observe(rng.uniform(0.02, 0.2))
            e2e = ttft + rng.uniform(2.0, 12.0)
            decode.hists["e2e"].observe(e2e)
            truth[step].append(e2e)
            prefill.hists["e2e"].observe(ttft * 0.8)
            # The client's queue is the prefill server's; the decode server's waits for the KV (never counted).
            wait = rng.expovariate(2.0)
            prefill.hists["queue_time"].observe(wait)
            decode.hists["queue_time"].observe(wait + 5.0)
            waits[step].append(wait)
        for role, server, instance in (("prefill", prefill, "10.0.0.1:30000"), ("decode", decode, "10.0.0.2:30000")):
            text = server.text()
            engine.observe(targets[role], parse(text, engine_wanted(), count_families=False))
            for series, value in _input_series(text, role, instance).items():
                history.setdefault(series, []).append(value)
        engine.snapshot(float(step * STEP))

    now = float(STEPS * STEP)
    state = engine.state(now, {"5m": 300})
    # Ground truth first: the E2E window holds exactly the requests the decode server answered after
    # the window's start scrape (each PD request once, with its whole latency).
    answered = [v for step_values in truth[STEPS - 4:] for v in step_values]
    e2e = state.slis["e2e"].windows["5m"]
    assert e2e.events == len(answered)
    assert abs(e2e.mean - sum(answered) / len(answered)) < 1e-9 * e2e.mean  # type: ignore[operator]
    queued = [v for step_values in waits[STEPS - 4:] for v in step_values]
    qt = state.slis["queue_time"].windows["5m"]
    assert qt.events == len(queued) and qt.good_ratio == sum(v <= 1.0 for v in queued) / len(queued)
    files = generate(config, Options(config_name="agreement"))
    write(files, tmp_path)
    exp = []
    for sli in TARGETS:
        win = state.slis[sli].windows["5m"]
        assert win.events > 0 and win.good_ratio is not None and win.mean is not None
        sel = f'{{deployment="pd",sli="{sli}"}}'
        expected = {f"{names.sli_total('5m')}{sel} * 300": win.events,
                    f"1 - {names.sli_error('5m')}{sel}": win.good_ratio,
                    f"{names.latency_mean('5m')}{sel}": win.mean}
        # Equal to 1e-9 relative (float sums in another order differ in the last digit).
        exp += [{"expr": f"abs(({expr}) / {value!r} - 1) < bool 1e-9", "eval_time": f"{STEPS}m",
                 "exp_samples": [{"labels": f'{{deployment="pd", sli="{sli}"}}', "value": 1}]}
                for expr, value in expected.items()]
    test = {"rule_files": [str(tmp_path / "alerts" / names.rules_file("pd"))], "evaluation_interval": "1m",
            "tests": [{"interval": "1m",
                       "input_series": [{"series": s, "values": " ".join(repr(v) for v in vals)}
                                        for s, vals in sorted(history.items())],
                       "promql_expr_test": exp}]}
    path = tmp_path / "agreement.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = run_tool(prometheus_build.tool, "test", "rules", str(path))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_the_leading_tpot_signal_agrees_between_sidecar_and_generated_rules(tmp_path: Path,
                                                                             prometheus_build: Build):
    """ITL mean over 1m and running / gen_throughput (per DP rank, never summed over TP ranks): the
    sidecar's `slo_monitor_tpot_leading_seconds` and the rules' `slo_monitor:tpot_leading:seconds`."""
    config = parse_config({"deployments": [{"name": "pd", "tpot_target_seconds": 0.1,
                                            "targets": [{"role": "server", "url": "http://10.0.0.2:30000/metrics"}]}]})
    dep = config.deployments[0]
    server = Server("unified", ("itl",))
    ranks = ["model_name", "engine_type", "dp_rank", "tp_rank"]
    running = Gauge(GAUGES["num_running_reqs"], "running", ranks, registry=server.registry)
    generated = Gauge(GAUGES["gen_throughput"], "tokens/s", ranks, registry=server.registry)
    engine = DeploymentEngine(dep)
    history: dict[str, list[float]] = {}
    step_s = 15  # the ITL mean is over 1m: a 1m scrape leaves Prometheus 3's left-open 1m window one sample
    for step in range(STEPS + 1):
        rng = random.Random(11)  # the same ITLs every scrape (see the module doc)
        for _ in range(200):
            server.hists["itl"].observe(rng.uniform(0.01, 0.3))
        gauges = random.Random(step)  # the gauges are read now, not over a window: they move freely
        for dp in ("0", "1"):
            n, tok = gauges.randint(1, 30), gauges.uniform(100.0, 900.0)
            for tp in ("0", "1"):  # every TP rank of a DP group repeats its scheduler's values
                running.labels("kimi", "unified", dp, tp).set(n)
                generated.labels("kimi", "unified", dp, tp).set(tok)
        text = server.text()
        engine.observe(dep.targets[0], parse(text, engine_wanted(), count_families=False))
        for series, value in _input_series(text, "server", "10.0.0.2:30000").items():
            history.setdefault(series, []).append(value)
        engine.snapshot(float(step * step_s))
    lead = engine.state(float(STEPS * step_s)).leading_tpot
    assert lead is not None and lead.itl_seconds and lead.throughput_seconds
    files = generate(config, Options(config_name="agreement"))
    write(files, tmp_path)
    exp = [{"expr": f'abs({names.TPOT_LEADING}{{deployment="pd",source="{source}"}} / {value!r} - 1) < bool 1e-9',
            "eval_time": f"{STEPS * step_s}s", "exp_samples": [{"labels": f'{{deployment="pd", source="{source}"}}', "value": 1}]}
           for source, value in zip(names.TPOT_LEADING_SOURCES, (lead.itl_seconds, lead.throughput_seconds, lead.seconds))]
    test = {"rule_files": [str(tmp_path / "alerts" / names.rules_file("pd"))], "evaluation_interval": f"{step_s}s",
            "tests": [{"interval": f"{step_s}s",
                       "input_series": [{"series": s, "values": " ".join(repr(v) for v in vals)}
                                        for s, vals in sorted(history.items())],
                       "promql_expr_test": exp}]}
    path = tmp_path / "leading.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = run_tool(prometheus_build.tool, "test", "rules", str(path))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


# --- availability: the gateway's own counters, one case per gateway version ----------------------------------
GATEWAY_CONFIG = {"deployments": [{
    "name": "gw", "availability_objective": 0.99,
    "targets": [{"role": "router", "url": "http://10.0.0.3:29000/metrics"}],
}]}


def _gateway_text(gateway: str, counts: dict[str, float]) -> str:
    """A listener exposition of `gateway` with these cumulative counts (what each version writes for them)."""
    if gateway == "smg-1.13":
        lines = ["smg_admission_inflight 0"]
        for key, value in counts.items():
            if key.startswith("http:"):
                path, status, code = key.split(":", 1)[1].split("|")
                lines.append(f'smg_http_responses_total{{path="{path}",status_code="{status}",error_code="{code}"}} '
                             f"{value!r}")
            else:
                lines.append(f'smg_router_request_errors_total{{router_type="http",backend_type="regular",'
                             f'connection_mode="http",model="m",endpoint="generate",error_type="{key}"}} {value!r}')
        return "\n".join(lines) + "\n"
    lines = []
    for key, value in counts.items():
        if key == "routed":
            lines.append(f'smg_router_requests_total{{router_type="http",backend_type="regular",connection_mode="http",'
                         f'model="default",endpoint="generate",streaming="true"}} {value!r}')
        else:
            lines.append(f'smg_http_responses_total{{status_code="{key}",error_code=""}} {value!r}')
    return "\n".join(lines) + "\n"


def _step_counts(gateway: str, rng: random.Random, step: int) -> dict[str, float]:
    """One scrape interval of traffic, the same every minute (see the module doc) but that failures start at
    step 4 (their series are born then, mid-history)."""
    rng.seed(3)
    n = 100
    failing = step >= 4
    if gateway == "smg-1.13":
        passed, own, broken = (rng.randint(0, 4), rng.randint(0, 3), rng.randint(0, 2)) if failing else (0, 0, 0)
        out = {"http:/generate|200|": n - passed - own - 3, "http:/generate|499|client_closed_request": 2,
               "http:/v1/chat/completions|400|invalid_json": 1, "http:/readiness|503|": 5,
               "http:/health_generate|503|no_workers": 1}
        if failing:
            out |= {"http:/generate|500|": passed, "http:/generate|503|no_available_workers": own,
                    "backend_error": passed + broken}
        return out
    failed = rng.randint(0, 5) if failing else 0
    out = {"routed": n, "200": n - failed + 3, "408": 1}
    if failing:
        out["500"] = failed
    return out


@pytest.mark.parametrize("gateway", ["smg-1.13", "sglang-router-0.3.2"])
def test_availability_agrees_between_sidecar_and_generated_rules(tmp_path: Path, gateway: str,
                                                                 prometheus_build: Build):
    config = parse_config(GATEWAY_CONFIG)
    config.deployments[0].targets[0].gateway = gateway  # type: ignore[assignment]
    dep = config.deployments[0]
    target = dep.targets[0]
    rng = random.Random(3)
    engine = DeploymentEngine(dep)
    cumulative: dict[str, float] = {}
    history: dict[str, list[float]] = {}
    for step in range(STEPS + 1):
        for key, delta in _step_counts(gateway, rng, step).items():
            cumulative[key] = cumulative.get(key, 0.0) + delta
        text = _gateway_text(gateway, cumulative)
        engine.observe_gateway(target, parse(text, ROUTER_WANTED))
        engine.snapshot(float(step * STEP))
        for series, value in _input_series(text, "router", "10.0.0.3:29000", "gw").items():
            history.setdefault(series, [math.nan] * step).append(value)  # born mid-history: absent before
    state = engine.state(float(STEPS * STEP), {"5m": 300})
    win = state.availability.windows["5m"]  # type: ignore[union-attr]
    assert win.events > 0 and win.failed > 0 and win.good_ratio is not None and not engine.warnings[target.id]
    write(generate(config, Options(config_name="agreement")), tmp_path)
    sel = '{deployment="gw",sli="availability"}'
    expected = {f"{names.sli_total('5m')}{sel} * 300": win.events, f"1 - {names.sli_error('5m')}{sel}": win.good_ratio}
    exp = [{"expr": f"abs(({expr}) / {value!r} - 1) < bool 1e-9", "eval_time": f"{STEPS}m",
            "exp_samples": [{"labels": '{deployment="gw", sli="availability"}', "value": 1}]}
           for expr, value in expected.items()]
    series = [{"series": s, "values": " ".join("_" if math.isnan(v) else repr(v) for v in vals)}
              for s, vals in sorted(history.items())]
    test = {"rule_files": [str(tmp_path / "alerts" / names.rules_file("gw"))], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": exp}]}
    path = tmp_path / "agreement.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = run_tool(prometheus_build.tool, "test", "rules", str(path))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
