"""What a real Prometheus (2.42 and 3.x) stores for SGLang's families, served by SGLang's own prometheus_client.

The name a family is stored under depends on three things nobody here controls: the prometheus_client on the
SGLang host (from 0.23, through 0.26 at least, it answers an OpenMetrics Accept that has `escaping=underscores`
or no `escaping=` at all with `sglang_` sample names under a `# TYPE sglang:...` line), the Accept header Prometheus sends (2.42: no `escaping=`; 3.x
default: `escaping=allow-utf-8`; 3.x with `metric_name_validation_scheme: legacy`: `escaping=underscores`), and
the scrape config. The generated scrape config must store `sglang:` names and SGLang's `le` spelling in every
case; a bare one does only where the table in docs/prometheus3.md says so."""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from monitor.generate.prometheus_config import METRIC_RELABEL
from tests.components import Build
from tests.conftest import REAL_TEXT, ROOT, free_port
from tests.procs import running

OLD_CLIENT = ROOT / ".venv" / "prometheus-client-0.25.0"  # installed by `make venv` (the Makefile)
SERVE = Path(__file__).with_name("serve_capture.py")
HIST_SUFFIXES = ("_bucket", "_sum", "_count")


def families_read() -> set[str]:
    """Every SGLang family the committed rules and dashboards read (the analyzer matches `sglang[:_]`)."""
    text = "".join(p.read_text() for d in ("alerts", "dashboards") for p in (ROOT / d).rglob("*") if p.is_file())
    names = set(re.findall(r"sglang:[A-Za-z0-9_:]+", text))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def captured() -> dict[str, set[str]]:
    """family -> its sample names in the SGLang 0.5.23 capture."""
    out: dict[str, set[str]] = {}
    for line in REAL_TEXT.read_text().splitlines():
        if line and not line.startswith("#"):
            name = re.match(r"[A-Za-z0-9_:]+", line).group(0)
            fam = next((name[: -len(s)] for s in HIST_SUFFIXES if name.endswith(s)), name)
            out.setdefault(fam, set()).add(name)
    return out


def captured_le(family: str) -> set[str]:
    return set(re.findall(rf'^{re.escape(family)}_bucket{{[^}}]*le="([^"]+)"', REAL_TEXT.read_text(), re.M))


def api(base: str, path: str, **params: str) -> object:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)["data"]


# job -> (client on the SGLang host, our metric relabelling?, Prometheus 3 name validation scheme)
JOBS = {
    "generated-client-0.25": ("0.25", True, None),
    "bare-client-0.25": ("0.25", False, None),
    "bare-client-0.26": ("0.26", False, None),
    "legacy-generated-client-0.25": ("0.25", True, "legacy"),
    "legacy-bare-client-0.25": ("0.25", False, "legacy"),
    "legacy-bare-client-0.26": ("0.26", False, "legacy"),
}


def expected_spelling(build: Build, job: str) -> str:
    _, ours, scheme = JOBS[job]
    if ours:
        return "sglang:"
    # Both clients rename unless asked for allow-utf-8, which only 3.x's default (UTF-8) validation asks for.
    return "sglang:" if build.major >= 3 and scheme != "legacy" else "sglang_"


@pytest.fixture
def scraped(prometheus_build: Build, tmp_path: Path):
    """One Prometheus of the build scraping one capture server per job; yields (build, base URL, jobs)."""
    if not (OLD_CLIENT / "prometheus_client").is_dir():
        pytest.fail(f"{OLD_CLIENT} is missing (make venv installs prometheus-client 0.25.0 there)")
    jobs = {j: v for j, v in JOBS.items() if v[2] is None or prometheus_build.major >= 3}
    scrape_configs = []
    with ExitStack() as stack:
        for job, (client, ours, scheme) in jobs.items():
            port = free_port()
            env_path = str(OLD_CLIENT) if client == "0.25" else ""
            stack.enter_context(running(
                ["env", f"PYTHONPATH={env_path}", sys.executable, str(SERVE), str(REAL_TEXT), str(port)],
                tmp_path / f"{job}.log", ready_url=f"http://127.0.0.1:{port}/version"))
            version = urllib.request.urlopen(f"http://127.0.0.1:{port}/version", timeout=5).read().decode()
            assert ("0.25.0" in version) == (client == "0.25"), version  # the client under test renders
            body: dict = {"job_name": job, "scrape_interval": "1s",
                          "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            if ours:
                body["metric_relabel_configs"] = METRIC_RELABEL
            if scheme:
                body["metric_name_validation_scheme"] = scheme
            scrape_configs.append(body)
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": scrape_configs}))
        prom_port = free_port()
        base = f"http://127.0.0.1:{prom_port}"
        stack.enter_context(running(
            [prometheus_build.server, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prometheus.log",
            ready_url=f"{base}/-/ready", timeout=60))
        deadline = time.monotonic() + 60
        while len(api(base, "/api/v1/query", query="up == 1")["result"]) < len(jobs):
            targets = api(base, "/api/v1/targets")["activeTargets"]
            assert time.monotonic() < deadline, [(t["labels"]["job"], t["health"], t["lastError"]) for t in targets]
            time.sleep(0.5)
        time.sleep(2)  # a second scrape of each, so every series is there
        yield prometheus_build, base, jobs


def stored_names(base: str, job: str) -> set[str]:
    return set(api(base, "/api/v1/label/__name__/values", **{"match[]": f'{{job="{job}"}}'}))


def test_every_family_the_rules_and_dashboards_read_is_stored_as_the_table_says(scraped):
    build, base, jobs = scraped
    read = families_read() & set(captured())
    assert len(read) >= 15, read  # the TTFT/TPOT/ITL/E2E histograms, counters and gauges the files read
    for job in jobs:
        stored = stored_names(base, job)
        spelling = expected_spelling(build, job)
        for family in read:
            for sample_name in captured()[family]:
                want = spelling + sample_name.removeprefix("sglang:")
                assert want in stored, (build.name, job, want, sorted(n for n in stored if "first_token" in n))


def test_the_generated_scrape_config_keeps_sglangs_le_spelling_on_both_versions(scraped):
    _, base, jobs = scraped
    for family in ("sglang:time_to_first_token_seconds", "sglang:request_time_per_output_token_seconds",
                   "sglang:e2e_request_latency_seconds", "sglang:inter_token_latency_seconds"):
        want = captured_le(family)
        for job in (j for j, (_, ours, _) in jobs.items() if ours):
            got = set(api(base, "/api/v1/label/le/values", **{"match[]": f'{family}_bucket{{job="{job}"}}'}))
            assert got == want, (job, family, sorted(got ^ want))


def test_the_generated_rules_selectors_find_the_families_prometheus_stored(scraped):
    """The rules' SLI selectors (`sglang:..._bucket{le="<target>"}`) return series on every generated job."""
    _, base, jobs = scraped
    for job in (j for j, (_, ours, _) in jobs.items() if ours):
        for family, le in (("sglang:time_to_first_token_seconds", "1.0"),
                           ("sglang:request_time_per_output_token_seconds", "0.1")):
            for expr in (f'{family}_bucket{{job="{job}",le="{le}"}}', f'{family}_count{{job="{job}"}}'):
                assert api(base, "/api/v1/query", query=expr)["result"], (job, expr)
