"""One collection of one accelerator target, whatever its source; never raises, never stalls.

Every failure (binary missing, non-zero exit, hang, unknown layout, HTTP error, NVML absent)
becomes `TelemetryResult(up=False, error=...)` so one broken node cannot stop the scrape loop.
A hung `npu-smi` is killed with its whole process group: killing only the direct child would
leave e.g. a wrapper script's `sleep` holding the pipes open, and reading them would block.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import aiohttp

from monitor.config import Target
from monitor.fetch import RedirectRefused, open_response
from monitor.parse.exposition import ParseError
from monitor.telemetry.dcgm import parse_dcgm
from monitor.telemetry.model import Reading, TelemetryResult, merge
from monitor.telemetry.npu_exporter import parse_npu_exporter
from monitor.telemetry.npu_smi_keyvalue import parse_npu_smi_keyvalue
from monitor.telemetry.npu_smi_table import NpuSmiParseError, parse_npu_smi_info
from monitor.telemetry.nvml import read_nvml

MAX_OUTPUT_BYTES = 4 * 1024 * 1024  # npu-smi info on 16 chips is ~10 KB; more is not npu-smi
DEFAULT_NPU_SMI = ("npu-smi", "info")


class CollectError(Exception):
    """A collection that failed for a reason worth one line in `error`."""


def npu_smi_argv(target: Target) -> list[str]:
    """`command` as configured; a bare path gets `info` appended (`[/usr/local/bin/npu-smi]`)."""
    argv = list(target.command or DEFAULT_NPU_SMI)
    return argv + ["info"] if len(argv) == 1 else argv


def target_node(target: Target) -> str:
    if target.node:
        return target.node
    if target.url:
        return urlsplit(target.url).hostname or "unknown"
    return socket.gethostname()


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def run_command(argv: list[str], timeout: float) -> str:
    """stdout of `argv`; CollectError on missing binary, non-zero exit, timeout or huge output."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise CollectError(f"{argv[0]}: not found (set `command` to the npu-smi path)") from None
    except PermissionError:
        raise CollectError(f"{argv[0]}: permission denied") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        _kill_group(proc)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 2.0)
        raise CollectError(f"{' '.join(argv)}: no answer within {timeout:g}s (killed)") from None
    except BaseException:
        _kill_group(proc)  # cancelled: do not leave the child running
        raise
    if proc.returncode != 0:
        tail = (err or out).decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise CollectError(f"{' '.join(argv)}: exit status {proc.returncode}: {tail[0][:200]}")
    if len(out) > MAX_OUTPUT_BYTES:
        raise CollectError(f"{' '.join(argv)}: {len(out)} bytes of output, not npu-smi info")
    return out.decode(errors="replace")


async def fetch(url: str, timeout: float, session: aiohttp.ClientSession | None, token: str | None,
                follow_redirects: bool = False) -> str:
    headers = {"Accept": "text/plain;version=0.0.4"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    own = session is None
    session = session or aiohttp.ClientSession()
    try:
        async with await open_response(session, url, follow_redirects=follow_redirects, headers=headers,
                                       timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                raise CollectError(f"GET {url}: HTTP {resp.status}")
            body = await resp.content.read(MAX_OUTPUT_BYTES * 16 + 1)
            if len(body) > MAX_OUTPUT_BYTES * 16:
                raise CollectError(f"GET {url}: body larger than {MAX_OUTPUT_BYTES * 16} bytes")
            return body.decode(errors="replace")
    except asyncio.TimeoutError:
        raise CollectError(f"GET {url}: no answer within {timeout:g}s") from None
    except aiohttp.ClientError as err:
        raise CollectError(f"GET {url}: {type(err).__name__}: {err}") from None
    except RedirectRefused as err:
        raise CollectError(f"GET {url}: {err}") from None
    finally:
        if own:
            await session.close()


DETAIL_CONCURRENCY = 4  # npu-smi serialises on the driver anyway; more processes only queue


@dataclass
class DetailCache:
    """The last `npu-smi info -t` answer per (device, chip, kind) of one target, with when it was taken.

    A failure is kept too, so a chip whose `-t ecc` fails is retried once per interval, not every scrape.
    """

    answers: dict[tuple[str, str, str], tuple[float, Reading | str]] = field(default_factory=dict)

    def fresh(self, key: tuple[str, str, str], now: float, interval: float) -> Reading | str | None:
        hit = self.answers.get(key)
        return hit[1] if hit is not None and now - hit[0] < interval else None


async def npu_smi_details(target: Target, readings: list[Reading], deadline: float,
                          clock: Callable[[], float],
                          cache: DetailCache | None = None) -> tuple[list[Reading], list[str]]:
    """Lay `npu-smi info -t KIND -i N -c M` over each chip's table reading; failures become warnings.

    With a cache, a (chip, kind) answered less than `target.details_interval` ago is not run again.
    A run skipped for lack of time is not cached: it is retried on the next scrape.
    """
    sem = asyncio.Semaphore(DETAIL_CONCURRENCY)
    base = npu_smi_argv(target)

    async def run_one(r: Reading, kind: str, argv: list[str]) -> Reading | str:
        try:
            found = parse_npu_smi_keyvalue(await run_command(argv, deadline - clock()), node=r.node,
                                           npu_id=r.device, chip_id=r.chip)
        except (CollectError, NpuSmiParseError) as err:
            return f"{' '.join(argv)}: {err}" if isinstance(err, NpuSmiParseError) else str(err)
        same = [x for x in found if x.chip == r.chip] or found[:1]
        return same[0] if same else f"{' '.join(argv)}: no chip in the answer"

    async def one(r: Reading, kind: str) -> Reading | str:
        key = (r.device, r.chip, kind)
        if cache is not None and (hit := cache.fresh(key, clock(), target.details_interval)) is not None:
            return hit
        argv = [*base, "-t", kind, "-i", r.device, "-c", r.chip]
        async with sem:
            if deadline - clock() <= 0:
                return f"{' '.join(argv)}: skipped, the target's timeout was spent"
            res = await run_one(r, kind, argv)
        if cache is not None:
            cache.answers[key] = (clock(), res)
        return res

    out, warnings = [], []
    for r in readings:
        merged = r
        for res in await asyncio.gather(*(one(r, k) for k in target.npu_smi_details or ())):
            if isinstance(res, str):
                warnings.append(res)
            else:
                merged = merge(merged, res)
        out.append(merged)
    return out, warnings


async def _npu_smi(target: Target, node: str, timeout: float, session: aiohttp.ClientSession | None) -> list[Reading]:
    return parse_npu_smi_info(await run_command(npu_smi_argv(target), timeout), node)


async def _npu_exporter(target: Target, node: str, timeout: float,
                        session: aiohttp.ClientSession | None) -> list[Reading]:
    return parse_npu_exporter(await fetch(target.url or "", timeout, session, target.bearer_token,
                                          target.follow_redirects), node)


async def _dcgm(target: Target, node: str, timeout: float, session: aiohttp.ClientSession | None) -> list[Reading]:
    # Without a configured node, the exporter's hostname label, else the URL host.
    readings = parse_dcgm(await fetch(target.url or "", timeout, session, target.bearer_token,
                                      target.follow_redirects), target.node)
    return [r if r.node != "unknown" else replace(r, node=node) for r in readings]


async def _nvml(target: Target, node: str, timeout: float, session: aiohttp.ClientSession | None) -> list[Reading]:
    # NVML is blocking C; a thread keeps the loop free (a wedged driver call leaks the thread, not the loop).
    return await asyncio.wait_for(asyncio.to_thread(read_nvml, node), timeout)


# One reader per source of conventions.names.TELEMETRY_SOURCES (a test holds them equal).
READERS: dict[str, Callable[[Target, str, float, aiohttp.ClientSession | None], Awaitable[list[Reading]]]] = {
    "npu-smi": _npu_smi, "npu-exporter": _npu_exporter, "dcgm": _dcgm, "nvml": _nvml,
}


async def _readings(target: Target, node: str, timeout: float,
                    session: aiohttp.ClientSession | None) -> list[Reading]:
    reader = READERS.get(target.source or "")
    if reader is None:
        raise CollectError(f"source {target.source!r} is not an accelerator telemetry source")
    return await reader(target, node, timeout, session)


async def collect(target: Target, *, timeout: float, session: aiohttp.ClientSession | None = None,
                  clock: Callable[[], float] = time.monotonic,
                  details: DetailCache | None = None) -> TelemetryResult:
    node = target_node(target)
    start = clock()
    try:
        readings = await _readings(target, node, timeout, session)
        if not readings:
            raise CollectError("source answered but reported no chips")
        warnings: list[str] = []
        if target.source == "npu-smi" and target.npu_smi_details:
            readings, warnings = await npu_smi_details(target, readings, start + timeout, clock, details)
        if not target.node:
            node = readings[0].node  # dcgm: the exporter's own hostname label
    except asyncio.CancelledError:
        raise
    except asyncio.TimeoutError:
        return TelemetryResult(source=str(target.source), node=node, up=False, target=target.id,
                               error=f"no answer within {timeout:g}s", duration_seconds=clock() - start)
    except ParseError as err:
        return TelemetryResult(source=str(target.source), node=node, up=False, target=target.id,
                               error=f"not Prometheus text format: {err}", duration_seconds=clock() - start)
    except Exception as err:  # noqa: BLE001 - the contract is "never crash the loop"
        msg = str(err) if isinstance(err, CollectError) else f"{type(err).__name__}: {err}"
        return TelemetryResult(source=str(target.source), node=node, up=False, error=msg, target=target.id,
                               duration_seconds=clock() - start)
    return TelemetryResult(source=str(target.source), node=node, readings=readings, up=True, target=target.id,
                           duration_seconds=clock() - start, warnings=tuple(warnings))
