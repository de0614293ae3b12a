"""SGLang's own bench_serving and the sidecar measure the same real requests and must agree.

Real requests: SGLang 0.5.23's `bench_serving` (the wheel's code, run as shipped) sends them through a
real gateway (smg 1.13, then sglang-router 0.3.2) to the emulated servers of a mixed and a PD deployment (no synthetic load); the sidecar
(`slo-monitor run`) scrapes those servers and tails their request logs. Over exactly each bench run (the
sidecar's cumulative numbers right before and right after it, differenced), per deployment:
  completed requests equal; mean TPOT within 2 %; mean TTFT within 5 %; goodput within 1 point;
and with a TPOT regression injected mid-run, both say the TPOT target is breached.
Through smg 1.13, TTFTs over its SSE keep-alive interval (15 s): with the keep-alive off both agree; with it on
(the default) bench_serving fails every such request on smg's `: ping` comment, and the sidecar counts each of
them as a client that left (the gateway's 499s and SGLang's aborts).
docs/bench_serving.md explains what differs and why (client vs server clocks, gateway hop, populations).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import parse_config
from monitor.conventions.names import GATEWAY_SMG, GATEWAYS
from monitor.emulate import Emulator, find_free_base_port, plan
from monitor.emulate import bench_serving as bs
from monitor.emulate.router import RouterProcess, launch_router
from monitor.emulate.topology import DeploymentLayout
from tests.conftest import free_port
from tests.e2e.stack import http_json, wait_until
from tests.procs import answers, stop

pytestmark = pytest.mark.e2e

# All SGLang default bucket edges (exact SLIs). The targets put the emulated TTFT near 3.9 s and TPOT near
# 66 ms, so what only the client sees (the gateway hop and HTTP: ~10-30 ms, up to ~150 ms when the machine
# is overloaded; a late read of the last chunk) stays inside the tolerances, and a stream sends ~15 chunks
# a second.
# The E2E target is loose: it is there so the sidecar counts every finished request (SGLang's E2E
# histogram observes each one) and both goodputs judge the same SLOs.
TPOT_TARGET, TTFT_TARGET, E2E_TARGET, OBJECTIVE = 0.1, 10.0, 60.0, 0.99
INPUT, OUTPUT, CONCURRENCY = 256, 48, 16
CONFIG = {
    "sidecar": {"scrape_interval_seconds": 1, "scrape_timeout_seconds": 1},
    "deployments": [
        {"name": name, "model": "Kimi-K2.6", "mode": mode, "tpot_target_seconds": TPOT_TARGET,
         "ttft_target_seconds": TTFT_TARGET, "e2e_target_seconds": E2E_TARGET, "objective": OBJECTIVE, "input_tokens": INPUT, "output_tokens": OUTPUT,
         # The recipe's bench command: the emulator calibrates TPOT at this concurrency. Twice the slots, so
         # the prefills of a 4 s TTFT beside the decodes leave TPOT well under target when healthy.
         "launch": {"max_running_requests": 2 * CONCURRENCY, "bench": {"max_concurrency": CONCURRENCY}},
         "targets": [*({"role": r, "url": f"http://127.0.0.1:{i + 1}/metrics"} for i, r in enumerate(roles)),
                     {"role": "router", "url": "http://127.0.0.1:9/metrics"}]}
        for name, mode, roles in (("mixed-a", "pd-mixed", ["server"]),
                                  ("pd-b", "pd-disaggregated", ["prefill", "decode"]))
    ],
}
# bench_serving as the recipe runs it, sized for a noisy 2-core machine: ~15-30 s of traffic per run.
BENCH_ARGS = ["--backend", "sglang", "--dataset-name", "random-ids", "--random-input-len", str(INPUT),
              "--random-output-len", str(OUTPUT), "--random-range-ratio", "0.5", "--max-concurrency", str(CONCURRENCY),
              "--warmup-requests", "0", "--disable-tqdm", "--seed", "7", "--output-details",
              "--goodput", f"ttft:{TTFT_TARGET * 1000:g}", f"tpot:{TPOT_TARGET * 1000:g}",
              f"e2el:{E2E_TARGET * 1000:g}"]


# The real gateways in front of the emulated servers (smg 1.13, sglang-router 0.3.2): the test runs
# unchanged against each. `make test` installs both (`make gateways`); a missing one fails, not skips.
def start_gateway(name: str) -> Callable[[DeploymentLayout, Path], RouterProcess]:
    return lambda layout, log: launch_router(layout, log_path=log, gateway=name)


GATEWAY_LAUNCHERS: dict[str, Callable[[DeploymentLayout, Path], RouterProcess]] = {
    name: start_gateway(name) for name in GATEWAYS
}


@dataclass
class Sidecar:
    """The sidecar's cumulative numbers for one deployment, read from its /metrics."""

    events: dict[str, float]  # sli -> events in the 1h window (cumulative here: the stack is younger)
    sums: dict[str, float]  # sli -> sum of latencies of those events
    good: dict[str, float]  # sli -> events at or under the target
    log_finished: float  # request-log requests read
    log_good: float  # ... that succeeded and met every target (goodput)

    def minus(self, before: Sidecar) -> Sidecar:
        return Sidecar({k: v - before.events.get(k, 0.0) for k, v in self.events.items()},
                       {k: v - before.sums.get(k, 0.0) for k, v in self.sums.items()},
                       {k: v - before.good.get(k, 0.0) for k, v in self.good.items()},
                       self.log_finished - before.log_finished, self.log_good - before.log_good)

    def mean(self, sli: str) -> float:
        return self.sums[sli] / self.events[sli]

    def sli(self, sli: str) -> float:
        return self.good[sli] / self.events[sli]

    @property
    def goodput(self) -> float:
        return self.log_good / self.log_finished


def read_sidecar(url: str, deployment: str) -> Sidecar:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    events: dict[str, float] = {}
    sums: dict[str, float] = {}
    ratio: dict[str, float] = {}
    finished = good = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            lab = s.labels
            if lab.get("deployment") != deployment:
                continue
            if lab.get("window") == "1h":
                if s.name == "slo_monitor_latency_seconds_count":
                    events[lab["sli"]] = s.value
                elif s.name == "slo_monitor_latency_seconds_sum":
                    sums[lab["sli"]] = s.value
                elif s.name == "slo_monitor_sli_good_ratio":
                    ratio[lab["sli"]] = s.value
            elif s.name == "slo_monitor_request_log_finished_requests_total":
                finished += s.value
            elif s.name == "slo_monitor_goodput_requests_total":
                good += s.value
    return Sidecar(events, sums, {k: ratio.get(k, 1.0) * v for k, v in events.items()}, finished, good)


class Harness:
    """Emulator (own event loop thread, no synthetic load) + one gateway per deployment + the sidecar."""

    def __init__(self, tmp: Path, gateway: str) -> None:
        self.tmp = tmp
        self.gateway = gateway
        self.config = parse_config(CONFIG)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        base = find_free_base_port(plan(self.config, 0).port_count)
        self.emulator = Emulator(self.config, base, synthetic=False, seed=3, request_log_dir=tmp / "request-logs")
        self._call(self.emulator.start())
        self.routers: dict[str, RouterProcess] = {}
        self.sidecar_proc = None
        try:
            for dep in self.config.deployments:
                layout = self.emulator.layout.deployment(dep.name)
                self.routers[dep.name] = GATEWAY_LAUNCHERS[gateway](layout, tmp / f"{dep.name}-gateway.log")
            local = self.emulator.localized_config()
            port = free_port()
            local = local.model_copy(update={"sidecar": local.sidecar.model_copy(update={"listen_port": port})})
            cfg = tmp / "sidecar.yaml"
            cfg.write_text(yaml.safe_dump(local.model_dump(mode="json", exclude_none=True), sort_keys=False))
            import subprocess
            import sys

            self.sidecar_log = (tmp / "sidecar.log").open("wb")
            self.sidecar_proc = subprocess.Popen([sys.executable, "-m", "monitor", "run", "-c", str(cfg)],
                                                 stdout=self.sidecar_log, stderr=subprocess.STDOUT)
            self.sidecar_url = f"http://127.0.0.1:{port}"
            wait_until(lambda: answers(self.sidecar_url + "/healthz"), 30, what="sidecar")
            self.tokenizer = bs.build_tokenizer(tmp / "tokenizer")
        except BaseException:
            self.close()
            raise

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def finished(self, deployment: str) -> int:
        return self.emulator.deployments[deployment].real_finished

    def settled(self, deployment: str) -> Sidecar:
        """The sidecar's numbers once it has seen every request the emulator finished (none in flight)."""
        def caught_up() -> Sidecar | None:
            dep = self.emulator.deployments[deployment]
            if any(r.real for r in list(dep._live.values())):
                return None
            side = read_sidecar(self.sidecar_url, deployment)
            n = dep.real_finished
            seen = side.events.get("e2e", 0.0)
            return side if seen == n and side.log_finished == n else None

        return wait_until(caught_up, 30, 0.25, what=f"the sidecar to catch up with {deployment}")

    def bench(self, deployment: str, prompts: int, out: Path) -> bs.BenchResult:
        url = self.routers[deployment].url
        return bs.run([*BENCH_ARGS, "--base-url", url, "--num-prompts", str(prompts), "--tokenizer",
                       str(self.tokenizer)], out, timeout=240, cwd=self.tmp)

    def incident(self, deployment: str, kind: str, factor: float) -> None:
        http_json(self.emulator.control_url + "/control/incident",
                  {"deployment": deployment, "kind": kind, "factor": factor})

    def clear(self) -> None:
        http_json(self.emulator.control_url + "/control/clear", {})

    def close(self) -> None:
        if self.sidecar_proc is not None:
            stop(self.sidecar_proc)
            self.sidecar_log.close()
        stoppers = [threading.Thread(target=r.stop) for r in self.routers.values()]  # smg takes ~5 s each
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(30)
        self._call(self.emulator.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class Outcome:
    bench: bs.BenchResult
    sidecar: Sidecar  # over exactly the bench run


def run_both(h: Harness, prompts: int, tag: str, regress_after: float | None = None) -> dict[str, Outcome]:
    """One bench run per deployment, at the same time; with `regress_after`, inject TPOT x3 once that
    share of the prompts has finished. Returns both tools' numbers over exactly each run."""
    names = [d.name for d in h.config.deployments]
    before = {n: h.settled(n) for n in names}
    finished = {n: h.finished(n) for n in names}
    results: dict[str, Any] = {}

    def one(name: str) -> None:
        try:
            results[name] = h.bench(name, prompts, h.tmp / f"{tag}-{name}.jsonl")
        except BaseException as err:  # noqa: BLE001 - reported below, with the other run's result
            results[name] = err

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    if regress_after is not None:
        for name in names:
            wait_until(lambda n=name: h.finished(n) - finished[n] >= regress_after * prompts or n in results,
                       180, 0.05, what=f"{name} to be {regress_after:.0%} into its run")
            h.incident(name, "tpot_regression", 3.0)
    for t in threads:
        t.join(300)
    errors = {n: r for n, r in results.items() if isinstance(r, BaseException)}
    assert not errors, errors
    try:
        return {n: Outcome(results[n], h.settled(n).minus(before[n])) for n in names}
    finally:
        h.clear()


def report(tag: str, outcomes: dict[str, Outcome]) -> str:
    lines = [f"{tag}:"]
    for name, o in outcomes.items():
        b, s = o.bench, o.sidecar
        lines.append(
            f"  {name}: completed {b['completed']} vs {s.events['e2e']:.0f}; mean TPOT {b['mean_tpot_ms']:.2f} vs "
            f"{s.mean('tpot') * 1000:.2f} ms; mean TTFT {b['mean_ttft_ms']:.1f} vs {s.mean('ttft') * 1000:.1f} ms; "
            f"goodput {b.goodput_attainment():.3f} vs {s.goodput:.3f}; TPOT SLI "
            f"{b.goodput_attainment('tpot'):.3f} vs {s.sli('tpot'):.3f}; {near_target(b)} near a target")
    return "\n".join(lines)


NEAR = 0.02  # a request this close to a target can be judged differently by the two clocks


def near_target(b: bs.BenchResult) -> int:
    """Requests whose client-side TPOT or TTFT is within NEAR of its target (from --output-details)."""
    n = 0
    for ttft, itls, out in zip(b["ttfts"], b["itls"], b["output_lens"]):
        tpot = sum(itls) / (out - 1) if out > 1 else 0.0
        n += int(abs(tpot / TPOT_TARGET - 1) < NEAR or abs(ttft / TTFT_TARGET - 1) < NEAR)
    return n


def assert_agree(outcomes: dict[str, Outcome]) -> None:
    for name, o in outcomes.items():
        b, s = o.bench, o.sidecar
        assert b["completed"] == s.events["e2e"] == s.log_finished, name
        assert s.events["tpot"] == b["completed"] and s.events["ttft"] == b["completed"], name
        # Same requests, two clocks: the client's includes the gateway hop and HTTP, the server's does not. A
        # first token delivered late (the TTFT gap) shortens the client's decode span by as much, spread over
        # the request's later tokens: that much TPOT difference is the clocks, not a disagreement.
        first_token_gap_ms = abs(b["mean_ttft_ms"] - s.mean("ttft") * 1000)
        later_tokens = max(1.0, sum(b["output_lens"]) / len(b["output_lens"]) - 1)
        tpot_ms = s.mean("tpot") * 1000
        assert abs(b["mean_tpot_ms"] / tpot_ms - 1) < 0.02 + first_token_gap_ms / later_tokens / tpot_ms, name
        assert abs(b["mean_ttft_ms"] / (s.mean("ttft") * 1000) - 1) < 0.05, name
        # Within 1 point, unless requests sat right at a target, where the clocks may put them either side.
        allowed = max(0.01, near_target(b) / b["completed"])
        assert abs(b.goodput_attainment() - s.goodput) <= allowed + 1e-9, (name, near_target(b))


@pytest.fixture(scope="module", params=list(GATEWAY_LAUNCHERS))
def harness(request, tmp_path_factory) -> Harness:
    try:
        bs.sglang_dir()
    except bs.BenchServingMissing as err:
        pytest.fail(str(err))  # CI installs it (make venv): missing is a broken install, not a skip
    h = Harness(tmp_path_factory.mktemp(f"agreement-{request.param}"), request.param)
    try:
        yield h
    finally:
        h.close()


def test_healthy_run_bench_serving_and_sidecar_agree(harness, capsys):
    outcomes = run_both(harness, CONCURRENCY, "healthy")
    with capsys.disabled():
        print("\n" + report(f"healthy, through {harness.gateway}", outcomes))
    assert_agree(outcomes)
    for name, o in outcomes.items():
        assert o.bench.goodput_attainment("tpot") >= OBJECTIVE and o.sidecar.sli("tpot") >= OBJECTIVE, name


def test_tpot_regression_mid_run_both_see_the_target_breached(harness, capsys):
    outcomes = run_both(harness, 48, "tpot-x3", regress_after=0.3)
    with capsys.disabled():
        print("\n" + report(f"tpot x3 mid-run, through {harness.gateway}", outcomes))
    assert_agree(outcomes)
    for name, o in outcomes.items():
        assert o.bench.goodput_attainment("tpot") < OBJECTIVE, name
        assert o.sidecar.sli("tpot") < OBJECTIVE, name


# --- TTFT over smg 1.13's SSE keep-alive -------------------------------------------------------------------
# After --sse-keepalive-secs (15 by default) without output smg 1.13 sends the SSE comment `: ping`. bench_serving
# 0.5.23 parses every non-empty line it does not recognise as `data: ` as JSON, so a request whose first token
# comes later fails on the ping; it closes the connection, smg counts 499 client_closed_request and SGLang
# aborts the request. ttft_spike x6 puts the emulated prefill of these prompts at ~13-35 s, most over 15 s (a
# run lasts about as long as its slowest TTFT); 8 prompts run at once on the mixed deployment, each run with a
# seed of its own (prompts seen before would hit the emulator's prefix cache and skip most of the prefill).
SLOW_TTFT, SLOW_PROMPTS, SMG_KEEPALIVE = 6.0, 8, 15.0
SLOW = "mixed-a"


def client_gone(h: Harness, deployment: str) -> tuple[float, float] | None:
    """The sidecar's (gateway 499s, SGLang aborts) since the stack started (its 1h window: the stack is younger);
    None while it has no such counts (no request has been through the gateway yet)."""
    body = http_json(h.sidecar_url + "/api/v1/status")
    dep = next(d for d in body["deployments"] if d["name"] == deployment)
    w = next(w for w in dep["client_gone"] if w["window"] == "1h")
    if w["gateway_client_closed"] is None or w["server_aborted"] is None:
        return None
    return w["gateway_client_closed"], w["server_aborted"]


def slow_args(h: Harness, url: str, seed: int) -> list[str]:
    return [*BENCH_ARGS, "--base-url", url, "--num-prompts", str(SLOW_PROMPTS), "--tokenizer", str(h.tokenizer),
            "--seed", str(seed)]


@pytest.mark.parametrize("harness", [GATEWAY_SMG], indirect=True)
def test_ttfts_over_smg_keepalive_agree_with_the_keepalive_off(harness, capsys):
    """What docs/bench_serving.md tells users of bench_serving through smg 1.13 to set: --sse-keepalive-secs 0."""
    h = harness
    gateway = launch_router(h.emulator.layout.deployment(SLOW), port=free_port(), metrics_port=free_port(),
                            log_path=h.tmp / "no-keepalive-gateway.log", gateway=GATEWAY_SMG,
                            extra=["--sse-keepalive-secs", "0"])
    try:
        before = h.settled(SLOW)
        h.incident(SLOW, "ttft_spike", SLOW_TTFT)
        try:
            b = bs.run(slow_args(h, gateway.url, 11), h.tmp / "slow-ttft-no-keepalive.jsonl", timeout=240, cwd=h.tmp)
        finally:
            h.clear()
        outcome = Outcome(b, h.settled(SLOW).minus(before))
    finally:
        gateway.stop()
    with capsys.disabled():
        print("\n" + report("TTFT over 15 s through smg 1.13 --sse-keepalive-secs 0", {SLOW: outcome}))
    assert b["completed"] == SLOW_PROMPTS, b.stdout[-2000:]
    over = [t for t in b["ttfts"] if t > SMG_KEEPALIVE]
    assert len(over) >= SLOW_PROMPTS // 2, b["ttfts"]
    assert_agree({SLOW: outcome})


@pytest.mark.parametrize("harness", [GATEWAY_SMG], indirect=True)
def test_ttfts_over_smg_keepalive_fail_bench_serving_on_the_ping_and_the_sidecar_counts_the_clients_gone(
        harness, capsys):
    """smg's default keep-alive: each request whose first token comes after 15 s is a bench_serving failure and
    a 499 at the gateway; SGLang aborts it 2 s after the hang-up unless it finished in those 2 s (as SGLang's
    create_abort_task does). The sidecar shows the gateway's 499s and exactly the aborts the emulator counted.
    Last in the module: the aborted requests never finish, so `Harness.settled` cannot be used after it."""
    h = harness
    before = client_gone(h, SLOW) or (0.0, 0.0)  # None: this test runs alone, before any request
    servers = h.emulator.deployments[SLOW].servers
    aborts_before = sum(s.store.counter_value("sglang:num_aborted_requests") for s in servers)
    h.incident(SLOW, "ttft_spike", SLOW_TTFT)
    try:
        proc = bs.run_process(slow_args(h, h.routers[SLOW].url, 13), h.tmp / "slow-ttft-keepalive.jsonl",
                              timeout=240, cwd=h.tmp)
    finally:
        h.clear()
    # Each failed request is printed as `output.error='Traceback ... orjson.JSONDecodeError: unexpected
    # character: line 1 column 1 (char 0)'`: its parser read smg's `: ping` as JSON.
    errors = [line for line in proc.stdout.splitlines() if line.startswith("output.error=")]
    failed = sum("JSONDecodeError" in line for line in errors)
    with capsys.disabled():
        print(f"\nTTFT over 15 s through smg 1.13 (keep-alive 15 s): bench_serving failed {failed} of {SLOW_PROMPTS} "
              f"on the ping (exit status {proc.returncode})")
    assert failed == len(errors) and failed >= SLOW_PROMPTS // 2, proc.stdout[-3000:]
    if failed == SLOW_PROMPTS:  # then bench_serving 0.5.23 warns, and exits on an empty percentile
        assert proc.returncode != 0 and "All requests failed" in proc.stdout + proc.stderr, proc.stderr[-3000:]
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]

    # Ground truth: once no request of this run is alive, the emulator's own abort counter is final.
    dep = h.emulator.deployments[SLOW]
    wait_until(lambda: not any(r.real for r in list(dep._live.values())), 40, 0.25,
               what="every hung-up request to be aborted or finished")
    aborted = sum(s.store.counter_value("sglang:num_aborted_requests") for s in servers) - aborts_before
    # A request whose first token came inside the 2 s abort delay may finish instead: never more aborts than
    # hang-ups, and most hang-ups (first token after 15 s of a ~6x TTFT) are still aborted.
    assert failed // 2 <= aborted <= failed, (failed, aborted)

    def counted() -> tuple[float, float] | None:
        now = client_gone(h, SLOW)
        if now is None:
            return None
        seen = (now[0] - before[0], now[1] - before[1])
        return seen if seen == (failed, aborted) else None

    try:
        wait_until(counted, 40, 0.5, what="the sidecar to count the clients that left")
    except AssertionError:
        now = client_gone(h, SLOW) or (float("nan"), float("nan"))
        raise AssertionError(f"bench_serving failed {failed} and the emulator aborted {aborted:.0f}; the sidecar "
                             f"counts {now[0] - before[0]:.0f} gateway 499s and {now[1] - before[1]:.0f} SGLang "
                             f"aborts") from None
