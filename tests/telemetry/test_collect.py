from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from aiohttp import web

from monitor.config import Target
from monitor.telemetry import collect as collect_mod
from monitor.telemetry.collect import collect, npu_smi_argv
from monitor.telemetry.fake_npu_smi import write_fake_npu_smi
from tests.conftest import REAL_FIXTURES as REAL
from tests.conftest import serve_routes

from .conftest import TELEMETRY, npu_smi_text
from .fake_nvml import FakeNvml


def run(coro):
    return asyncio.run(coro)


def npu_target(cmd, **kw) -> Target:
    return Target(role="npu", source="npu-smi", command=[str(c) for c in cmd], node="a3-0", **kw)


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "npu-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_npu_smi_argv_appends_info_to_a_bare_path():
    assert npu_smi_argv(Target(role="npu")) == ["npu-smi", "info"]
    assert npu_smi_argv(npu_target(["/opt/npu-smi"])) == ["/opt/npu-smi", "info"]
    assert npu_smi_argv(npu_target(["sudo", "npu-smi", "info"])) == ["sudo", "npu-smi", "info"]


def test_fake_npu_smi_executable_is_collected(tmp_path, a3_text):
    exe = write_fake_npu_smi(tmp_path / "npu-smi", a3_text)
    res = run(collect(npu_target([exe]), timeout=10))
    assert res.up and res.error is None and res.source == "npu-smi" and res.node == "a3-0"
    assert len(res.readings) == 4 and res.duration_seconds >= 0


ECC = "910a_info-t-ecc_mindcluster-docs-faultdiag-collecting-logs.txt"


def test_npu_smi_details_lay_ecc_counts_over_the_table(tmp_path, a3_text):
    ecc = npu_smi_text(ECC).replace("HBM Single Bit Error Count               : 0",
                                    "HBM Single Bit Error Count               : 3")
    exe = write_fake_npu_smi(tmp_path / "npu-smi", a3_text, {"ecc": ecc})
    table = run(collect(npu_target([exe]), timeout=10))
    res = run(collect(npu_target([exe], npu_smi_details=["ecc"]), timeout=10))
    assert res.up and not res.warnings and len(res.readings) == len(table.readings) == 4
    assert all(r.ecc_errors == {"correctable": 3, "uncorrectable": 0} for r in res.readings)
    assert all(not r.ecc_errors for r in table.readings)  # the table has no ECC column
    # Everything the table gave is still there.
    strip = [(r.device, r.chip, r.memory_used_bytes, r.temperature_celsius, r.health) for r in res.readings]
    assert strip == [(r.device, r.chip, r.memory_used_bytes, r.temperature_celsius, r.health) for r in table.readings]


def test_a_failing_npu_smi_detail_keeps_the_table_and_warns(tmp_path, a3_text):
    exe = write_fake_npu_smi(tmp_path / "npu-smi", a3_text)  # answers no `-t` at all
    res = run(collect(npu_target([exe], npu_smi_details=["ecc"]), timeout=10))
    assert res.up and len(res.readings) == 4 and len(res.warnings) == 4
    assert "-t ecc -i" in res.warnings[0] and "exit status 2" in res.warnings[0]


def counting(tmp_path: Path, exe: Path) -> tuple[Path, Path]:
    """A wrapper that logs each `-t` run of `exe` (one line per process) and then runs it."""
    calls, wrapper = tmp_path / "calls", tmp_path / "counting-npu-smi"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *"-t "*) echo "$*" >> {calls};; esac\nexec {exe} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, calls


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_npu_smi_details_run_once_per_interval_and_are_reused_between(tmp_path, a3_text):
    from monitor.telemetry.collect import DetailCache

    ecc = npu_smi_text(ECC).replace("HBM Single Bit Error Count               : 0",
                                    "HBM Single Bit Error Count               : 3")
    wrapper, calls = counting(tmp_path, write_fake_npu_smi(tmp_path / "npu-smi", a3_text, {"ecc": ecc}))
    target = npu_target([wrapper], npu_smi_details=["ecc"], npu_smi_details_interval_seconds=30)
    cache, clock = DetailCache(), Clock()

    def runs() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    first = run(collect(target, timeout=10, clock=clock, details=cache))
    assert runs() == 4  # one per chip
    clock.now += 29
    again = run(collect(target, timeout=10, clock=clock, details=cache))
    assert runs() == 4 and not again.warnings  # reused: no process started
    assert [r.ecc_errors for r in again.readings] == [r.ecc_errors for r in first.readings]
    assert all(r.ecc_errors == {"correctable": 3, "uncorrectable": 0} for r in again.readings)
    clock.now += 2
    run(collect(target, timeout=10, clock=clock, details=cache))
    assert runs() == 8  # the interval passed: asked again


def test_a_failing_npu_smi_detail_is_retried_once_per_interval_not_every_scrape(tmp_path, a3_text):
    from monitor.telemetry.collect import DetailCache

    wrapper, calls = counting(tmp_path, write_fake_npu_smi(tmp_path / "npu-smi", a3_text))  # no `-t` answers
    target = npu_target([wrapper], npu_smi_details=["ecc"])
    cache, clock = DetailCache(), Clock()
    first = run(collect(target, timeout=10, clock=clock, details=cache))
    clock.now += target.details_interval - 1
    again = run(collect(target, timeout=10, clock=clock, details=cache))
    assert len(calls.read_text().splitlines()) == 4
    assert again.up and again.warnings == first.warnings and "exit status 2" in again.warnings[0]


def test_npu_smi_details_interval_needs_details_and_defaults_to_a_minute():
    assert Target(role="npu", npu_smi_details=["ecc"]).details_interval == 60
    with pytest.raises(ValueError, match="npu_smi_details_interval_seconds needs npu_smi_details"):
        Target(role="npu", npu_smi_details_interval_seconds=10)


def test_npu_smi_details_only_for_npu_smi_targets():
    with pytest.raises(ValueError, match="npu_smi_details applies to source 'npu-smi' only"):
        Target(role="npu", source="npu-exporter", url="http://127.0.0.1:8082/metrics", npu_smi_details=["ecc"])


def test_missing_npu_smi(tmp_path):
    res = run(collect(npu_target([tmp_path / "nope" / "npu-smi"]), timeout=5))
    assert not res.up and "not found" in res.error and res.readings == []


def test_hanging_npu_smi_is_killed_with_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    exe = script(tmp_path, f"sleep 60 &\necho $! > {pidfile}\nwait\n")
    res = run(collect(npu_target([exe]), timeout=0.5))
    assert not res.up and "no answer within 0.5s (killed)" in res.error
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
            state = Path(f"/proc/{child}/stat").read_text().split(")")[-1].split()[0]
            if state == "Z":
                break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the sleeping child of the fake npu-smi survived the timeout")


def test_garbage_output_is_a_parse_error(tmp_path):
    exe = script(tmp_path, "echo 'dcmi module initialize failed. ret is -8005'\n")
    res = run(collect(npu_target([exe]), timeout=5))
    assert not res.up and "not an `npu-smi info` table" in res.error


def test_nonzero_exit_reports_stderr(tmp_path):
    exe = script(tmp_path, "echo 'Permission denied: /dev/davinci_manager' >&2\nexit 3\n")
    res = run(collect(npu_target([exe]), timeout=5))
    assert not res.up and "exit status 3" in res.error and "davinci_manager" in res.error


def test_truncated_table_is_a_parse_error(tmp_path, a3_text):
    exe = write_fake_npu_smi(tmp_path / "npu-smi", "\n".join(a3_text.splitlines()[:8]))
    res = run(collect(npu_target([exe]), timeout=5))
    assert not res.up and "truncated" in res.error


async def _serve(routes: dict[str, tuple[int, str]], release: asyncio.Event):
    async def handler(request: web.Request) -> web.Response:
        status, body = routes[request.path]
        if status == 0:  # hang until the test is done with the server
            await release.wait()
        return web.Response(status=status, text=body, content_type="text/plain")

    return await serve_routes({"/{tail:.*}": handler})


def test_exporters_over_http():
    dcgm = (REAL / "dcgm_exporter_sample.txt").read_text()
    npu = (TELEMETRY / "npu_exporter_a3_synthetic.txt").read_text()

    async def main():
        release = asyncio.Event()
        runner, base = await _serve({"/dcgm": (200, dcgm), "/npu": (200, npu), "/err": (500, "boom"),
                                     "/slow": (0, ""), "/html": (200, "<html>{{ nope")}, release)
        try:
            import aiohttp
            async with aiohttp.ClientSession() as s:
                out = {}
                for name, src in (("dcgm", "dcgm"), ("npu", "npu-exporter"), ("err", "dcgm"),
                                  ("slow", "npu-exporter"), ("html", "dcgm")):
                    role = "gpu" if src == "dcgm" else "npu"
                    out[name] = await collect(Target(role=role, source=src, url=f"{base}/{name}"), timeout=0.5,
                                              session=s)
                out["own-session"] = await collect(Target(role="gpu", url=f"{base}/dcgm", node="cfg"), timeout=2)
                return out
        finally:
            release.set()
            await runner.cleanup()

    out = run(main())
    assert out["dcgm"].up and out["dcgm"].node == "gpu1-wl8sg" and out["dcgm"].readings[0].model == "NVIDIA L40S"
    assert out["npu"].up and len(out["npu"].readings) == 3 and out["npu"].node == "127.0.0.1"
    assert not out["err"].up and "HTTP 500" in out["err"].error
    assert not out["slow"].up and "no answer within 0.5s" in out["slow"].error
    assert not out["html"].up and "not Prometheus text format" in out["html"].error
    assert out["own-session"].up and out["own-session"].readings[0].node == "cfg"


def test_connection_refused_is_down():
    res = run(collect(Target(role="gpu", url="http://127.0.0.1:9/metrics"), timeout=2))
    assert not res.up and res.error.startswith("GET http://127.0.0.1:9/metrics")


def test_nvml_source(monkeypatch):
    monkeypatch.setattr(collect_mod, "read_nvml", lambda node: __import__(
        "monitor.telemetry.nvml", fromlist=["read_nvml"]).read_nvml(node, module=FakeNvml()))
    res = run(collect(Target(role="gpu", source="nvml", node="h200"), timeout=5))
    assert res.up and res.readings[0].model == "NVIDIA H200" and res.node == "h200"


def test_nvml_unavailable_is_down(monkeypatch):
    monkeypatch.setattr(collect_mod, "read_nvml", lambda node: __import__(
        "monitor.telemetry.nvml", fromlist=["read_nvml"]).read_nvml(node, module=FakeNvml(init_fails=True)))
    res = run(collect(Target(role="gpu", source="nvml", node="h200"), timeout=5))
    assert not res.up and "NVML init failed" in res.error


def test_non_telemetry_source_is_down_not_a_crash():
    res = run(collect(Target(role="server", url="http://127.0.0.1:1/metrics"), timeout=1))
    assert not res.up and "not an accelerator telemetry source" in res.error


def test_an_exporter_redirecting_to_another_host_is_down_and_that_host_never_asked():
    hits = []

    async def other(request):
        hits.append(request.path)
        return web.Response(text="DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 40\n")

    async def main():
        other_runner, other_base = await serve_routes({"/metrics": other})
        try:
            async def away(request):
                return web.Response(status=302, headers={"Location": f"{other_base}/metrics"})

            runner, base = await serve_routes({"/metrics": away})
            try:
                return [await collect(Target(role="gpu", url=f"{base}/metrics", follow_redirects=follow), timeout=5)
                        for follow in (False, True)]
            finally:
                await runner.cleanup()
        finally:
            await other_runner.cleanup()

    plain, following = run(main())
    assert not plain.up and "not followed" in plain.error
    assert not following.up and "redirect to another host or port" in following.error
    assert hits == []


def test_every_telemetry_source_of_the_config_has_a_reader():
    from monitor.conventions.names import TELEMETRY_SOURCES
    from monitor.telemetry.collect import READERS

    assert set(READERS) == set(TELEMETRY_SOURCES)
