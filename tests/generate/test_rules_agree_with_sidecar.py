"""The generated rules and the sidecar compute the same SLI from the same scrapes of a PD deployment.

The expositions are written by prometheus_client (as SGLang's own collectors write them): a prefill server
that records E2E latencies of its part only (as SGLang 0.5.23 does) and a decode server that records every
SLI. The same cumulative values are fed to the sidecar's engine and, as promtool input series with the
labels Prometheus's scrape adds, to the generated rules; promtool must then read the sidecar's numbers.
Samples fall on the window's edges, so `rate()` does not extrapolate and the two agree to rounding.
"""

from __future__ import annotations

import random
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from monitor import conventions as names
from monitor.config import parse_config
from monitor.conventions import DEFAULT_BUCKETS, SLI_FAMILIES
from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.generate.writer import write
from monitor.parse.exposition import parse
from monitor.parse.families import engine_wanted
from monitor.slo.engine import DeploymentEngine
from tests.generate.conftest import PROMTOOL, need, run_tool

STEP = 60  # one scrape a minute
STEPS = 10
TARGETS = {"ttft": 2.0, "tpot": 0.1, "e2e": 8.0}  # bucket edges: the SLIs are exact on both sides
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


def _input_series(text: str, role: str, instance: str) -> dict[str, float]:
    """Sample lines as Prometheus stores them: the scrape adds deployment, role, instance and job."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or line.split("{")[0].endswith("_created"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        name, _, rest = name_labels.partition("{")
        extra = f'deployment="pd",instance="{instance}",job="sglang-{role}",role="{role}"'
        out[f"{name}{{{rest[:-1]},{extra}}}" if rest else f"{name}{{{extra}}}"] = float(value)
    return out


def test_pd_sli_events_ratios_and_means_agree_between_sidecar_and_generated_rules(tmp_path: Path):
    need(PROMTOOL)
    config = parse_config(CONFIG)
    dep = config.deployments[0]
    rng = random.Random(7)
    prefill = Server("prefill", ("e2e",))  # SGLang's prefill tokenizer records E2E, never TTFT/TPOT/ITL
    decode = Server("decode", ("ttft", "tpot", "itl", "e2e"))
    targets = {t.role: t for t in dep.targets}
    engine = DeploymentEngine(dep)
    history: dict[str, list[float]] = {}
    truth: list[list[float]] = [[] for _ in range(STEPS + 1)]  # the client's E2E (decode's), per step
    for step in range(STEPS + 1):
        for _ in range(40 + 10 * step):
            # The decode server's E2E is the client's; the prefill server's covers prefill only (short).
            ttft = rng.lognormvariate(0.2, 0.8)
            decode.hists["ttft"].observe(ttft)
            decode.hists["tpot"].observe(rng.uniform(0.03, 0.12))
            decode.hists["itl"].observe(rng.uniform(0.02, 0.2))
            e2e = ttft + rng.uniform(2.0, 12.0)
            decode.hists["e2e"].observe(e2e)
            truth[step].append(e2e)
            prefill.hists["e2e"].observe(ttft * 0.8)
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
    result = run_tool(PROMTOOL, "test", "rules", str(path))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
