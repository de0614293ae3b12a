"""OTLP into a real receiver: Prometheus 3's own OTLP receiver (`--web.enable-otlp-receiver`) stores the
sidecar's export, and what it stores is what the sidecar's `/metrics` page says at the same instant.

The sidecar runs on emulated deployments (every family: SLO, targets, loops, goodput and request logs,
npu-exporter accelerators) and is frozen between its last cycle and the comparison: its clock is a
variable, its loops' monotonic clock too, and no scrape loop runs. Two forced exports (5 emulated seconds
apart) go to Prometheus, then `/metrics` is read over HTTP; every stored series (its latest sample) must be
a line of that page with the same name, labels and value, and every line of the page a stored series.

The mapping, by design (docs/prometheus3.md, "OTLP into Prometheus 3"):
- names: unchanged under every translation strategy, the default `UnderscoreEscapingWithSuffixes`
  included: a unit is exported only where the name already ends with its word, counters end in `_total`
  (monotonic cumulative sums) and `ratio` is only ever the last word of a unit-"1" gauge;
- labels: the page's labels, plus `job` (= `service.name`, slo-monitor) and `instance`
  (= `service.instance.id`, HOST:PORT of the sidecar); the other resource attributes go to `target_info`;
  a label whose value is empty is no label to Prometheus, exactly as when it scrapes the page;
- values: the same floats (a number the sidecar cannot compute is on neither: absent, never NaN or 0).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import parse_config
from monitor.emulate import Emulator
from monitor.export.otlp_points import unit_for
from monitor.scrape import supervise
from monitor.sidecar import Sidecar
from monitor.version import __version__
from tests.components import PROMETHEUS_3
from tests.conftest import free_port
from tests.procs import running

Series = tuple[str, tuple[tuple[str, str], ...]]
TYPE_AND_UNIT = "--enable-feature=type-and-unit-labels"
# (translation strategy, extra flags): Prometheus 3.16's default (no `otlp:` section), the default with the
# `__type__`/`__unit__` labels (how the receiver's idea of type and unit becomes visible: 3.16's
# /api/v1/metadata lists no OTLP metric), and the other strategies of `otlp: translation_strategy`.
CASES = {
    "default": (None, ()),
    "default-type-and-unit-labels": (None, (TYPE_AND_UNIT,)),
    "UnderscoreEscapingWithoutSuffixes": ("UnderscoreEscapingWithoutSuffixes", ()),
    "NoUTF8EscapingWithSuffixes": ("NoUTF8EscapingWithSuffixes", ()),
    "NoTranslation": ("NoTranslation", ()),
}
# The unit word Prometheus gives each OTLP unit the sidecar sets (`otlp_points.UNIT_SUFFIXES`); "1" has none.
UNIT_WORDS = {"s": "seconds", "By": "bytes", "Cel": "celsius", "W": "watts", "1": None}


def _config() -> dict:
    return {"deployments": [
        {"name": "mixed", "mode": "pd-mixed", "tpot_target_seconds": 0.04, "ttft_target_seconds": 2.0,
         "input_tokens": 512, "output_tokens": 64, "hardware": "ascend-a3", "cards": 2,
         "targets": [{"role": "server", "url": "http://127.0.0.1:1/metrics"}]},
        {"name": "disagg", "mode": "pd-disaggregated", "tpot_target_seconds": 0.05, "ttft_target_seconds": 2.0,
         "targets": [{"role": "prefill", "url": "http://127.0.0.1:1/metrics"},
                     {"role": "decode", "url": "http://127.0.0.1:1/metrics"}]},
    ]}


def _prometheus_config(path: Path, strategy: str | None) -> Path:
    # No scrape job: everything stored comes from the OTLP receiver.
    config: dict = {"global": {"scrape_interval": "15s"}}
    if strategy is not None:
        config["otlp"] = {"translation_strategy": strategy}
    path.write_text(json.dumps(config))
    return path


def _api(port: int, path: str, **params: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _page(text: str) -> tuple[dict[Series, float], dict[str, str]]:
    """The /metrics page as {(sample name, sorted labels): value} and {sample name: its family's TYPE}."""
    values: dict[Series, float] = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            # An empty label is no label to Prometheus (a scrape of the page stores it the same way).
            values[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v)))] = s.value
            types[s.name] = fam.type
    return values, types


async def _export_and_read(endpoint: str, logs: Path) -> tuple[str, str, float]:
    """Run the sidecar on the emulator, export twice to `endpoint` (5 emulated seconds apart, so counters
    move between the two); (its /metrics text at the second, its instance id, the second's wall time)."""
    cfg = parse_config(_config())
    emu = Emulator(cfg, 0, speed=0, seed=5, request_log_dir=logs, rates={"mixed": 8.0, "disagg": 4.0})
    await emu.start()
    local = emu.localized_config()
    local = local.model_copy(update={"sidecar": local.sidecar.model_copy(update={
        "otlp_endpoint": endpoint, "otlp_interval_seconds": 3600})})  # the test forces the one export
    clock = {"t": time.time()}
    sc = Sidecar(local, clock=lambda: clock["t"])
    handle = None
    try:
        for _ in range(6):  # 30 emulated seconds: every window has traffic, counters moved
            await emu.advance(5)
            clock["t"] += 5
            await sc.run(once=True)
        port = await sc.start_http("127.0.0.1", 0)
        handle = sc.start_otlp()
        assert handle is not None
        assert await asyncio.get_running_loop().run_in_executor(None, handle.force_flush)
        await emu.advance(5)
        clock["t"] += 5
        await sc.run(once=True)
        exported_at = time.time()
        assert await asyncio.get_running_loop().run_in_executor(None, handle.force_flush)
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            text = await resp.text()
        return text, f"{socket.gethostname()}:{port}", exported_at
    finally:
        if handle is not None:
            await handle.aclose()
        await sc.close()
        await emu.stop()


@pytest.mark.parametrize("case", CASES)
def test_prometheus_3_stores_the_otlp_export_as_the_metrics_page_says_it(tmp_path, monkeypatch, case):
    strategy, flags = CASES[case]
    build = PROMETHEUS_3.require()
    # The loops' ages run on the monotonic clock: frozen too, so they are the same at export and at /metrics.
    frozen = time.monotonic()
    monkeypatch.setattr(supervise, "time", SimpleNamespace(
        monotonic=lambda: frozen, time=time.time, strftime=time.strftime, gmtime=time.gmtime))
    port = free_port()
    argv = [build.server, f"--config.file={_prometheus_config(tmp_path / 'prometheus.yml', strategy)}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-otlp-receiver", *flags]
    with running(argv, tmp_path / "prometheus.log", ready_url=f"http://127.0.0.1:{port}/-/ready"):
        endpoint = f"http://127.0.0.1:{port}/api/v1/otlp/v1/metrics"
        text, instance, exported_at = asyncio.run(_export_and_read(endpoint, tmp_path / "logs"))
        stored = _api(port, "query", query='{__name__=~".+"}', time=f"{time.time():.3f}")["data"]["result"]
        page, types = _page(text)
        # The page counts the connection that reads it; the export before it had none open.
        page[("slo_monitor_http_connections_open", ())] -= 1
        counters = sorted({n for n, t in types.items() if t == "counter"})
        # The exports of every counter (two, and the last at shutdown) are one counter series to Prometheus:
        # no reset between them.
        history = {n: [(float(c["value"][1]), float(r["value"][1])) for c, r in zip(
            _api(port, "query", query=f"count_over_time({n}[10m])")["data"]["result"],
            _api(port, "query", query=f"resets({n}[10m])")["data"]["result"])] for n in counters}

    got: dict[Series, float] = {}
    target_info = []
    for r in stored:
        labels = dict(r["metric"])
        name = labels.pop("__name__")
        if name == "target_info":
            target_info.append(labels)
            continue
        if TYPE_AND_UNIT in flags:
            typ, unit = labels.pop("__type__"), labels.pop("__unit__", None)
            assert typ == ("counter" if types[name] == "counter" else "gauge"), (name, typ)
            assert unit == UNIT_WORDS.get(unit_for(name)), (name, unit)
        # Every series carries the resource's identity as job/instance, as a scrape's target would.
        assert (labels.pop("job"), labels.pop("instance")) == ("slo-monitor", instance), (name, labels)
        got[(name, tuple(sorted(labels.items())))] = float(r["value"][1])
        # The sample's time is the export's, not the sidecar's (emulated, ahead) clock.
        assert abs(float(r["value"][0]) - exported_at) < 30
    assert any(n.startswith("accelerator_") for n, _ in got) and any("goodput" in n for n, _ in got)

    # A number the sidecar cannot compute is absent from /metrics and OTLP alike (never NaN, never 0).
    assert not any(math.isnan(v) for v in page.values())
    only_stored, only_page = sorted(set(got) - set(page)), sorted(set(page) - set(got))
    assert not only_stored and not only_page, f"stored only: {only_stored}\non /metrics only: {only_page}"
    assert got == page  # exactly the same floats

    # Counters stay counters: `_total` once, never `_total_total`, cumulative (no reset between exports).
    assert counters and all(n.endswith("_total") and not n.endswith("_total_total") for n in counters)
    for name, rows in history.items():
        assert rows and all(count >= 2 and resets == 0 for count, resets in rows), (name, rows)
    assert any(v > 0 for (n, _), v in got.items() if n == "slo_monitor_target_scrapes_total")

    # The rest of the resource: one target_info series for the sidecar, its attribute names escaped
    # (`service.version` -> `service_version`) unless the strategy keeps UTF-8 names.
    dot = "." if strategy in ("NoUTF8EscapingWithSuffixes", "NoTranslation") else "_"
    sdk = f"telemetry{dot}sdk{dot}"
    assert len(target_info) == 1 and target_info[0] == {
        "job": "slo-monitor", "instance": instance, f"service{dot}version": __version__,
        f"{sdk}language": "python", f"{sdk}name": "opentelemetry", f"{sdk}version": target_info[0].get(f"{sdk}version")}
    assert target_info[0][f"{sdk}version"]
