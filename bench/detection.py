"""Benchmark 3: from an injected TPOT regression to `slo_monitor_sli_burn_rate{window="5m"}` >= 14.4.

The emulator (monitor.emulate) runs one mixed server on 127.0.0.1; the real sidecar scrapes it every
(emulated) second and serves /metrics on 127.0.0.1. Both run on the emulated clock, stepped one scrape
interval at a time (emulator speed 0, sidecar clock = emulated time), so a trial needs its 5 min window
warmed up with healthy traffic without waiting 5 real minutes; scraping, parsing, the SLO engine, the
exporter, HTTP and the control endpoint are all the real code paths. The regression is injected at a
random phase inside a scrape interval through `POST /control/incident`. After each scrape the exported
burn rate is read back over HTTP; latency = emulated time of the first scrape whose export is >= 14.4
minus the injection time.

Window math: once the 5m window is full, burn = bad share / (1 - objective), so 14.4 needs a bad share
of 0.144. A request's TPOT is its whole decode's average, so bad requests only start finishing some
time after the injection (`first bad finish`: part of a decode time). From then on, with r0 req/s of
bad share b0 leaving the window and r1 req/s of bad share b1 entering it, the share reaches 0.144 after
tau = 300 s x r0 (0.144 - b0) / (r1 (b1 - 0.144) + r0 (0.144 - b0)) (43 s when r1 = r0, b0 = 0, b1 = 1);
r1 < r0 while the slower decodes drain. The scrape interval adds at most one interval on top. b0 and
r0 (5 min before the injection), b1 and r1 (from the first bad finish to detection) and the first bad
finish are read from the sidecar's own snapshots, so `window math` checks the exported number.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import aiohttp

from bench.table import markdown, median
from monitor.config import Config, SidecarSettings, parse_config
from monitor.conventions.names import M_BURN_RATE, M_GOOD_RATIO
from monitor.parse.exposition import parse
from monitor.slo.histogram import Hist, good_ratio
from monitor.slo.windows import SnapshotStore

THRESHOLD = 14.4
TARGET = 0.1
WINDOW = 300.0
EPOCH = 1_800_000_000.0  # the sidecar's wall clock = EPOCH + emulated seconds


def _config(output_tokens: int) -> Config:
    return parse_config({"deployments": [{
        "name": "det", "model": "bench/model", "tpot_target_seconds": TARGET, "ttft_target_seconds": 2.0,
        "objective": 0.99, "input_tokens": 1000, "output_tokens": output_tokens,
        "launch": {"tp_size": 1, "max_running_requests": 32},
    }]})


async def _exported(session: aiohttp.ClientSession, url: str) -> tuple[float, float | None]:
    """(burn rate, good ratio) of tpot over 5m, as the sidecar's /metrics exports them."""
    async with session.get(url) as resp:
        text = await resp.text()
    burn, good = 0.0, None
    for s in parse(text, {M_BURN_RATE, M_GOOD_RATIO}).selected:
        labels = dict(s.labels)
        if labels.get("sli") == "tpot" and labels.get("window") == "5m":
            if s.name == M_BURN_RATE:
                burn = s.value
            else:
                good = s.value
    return burn, good


async def trial(seed: int, *, factor: float, warm: float, limit: float, output_tokens: int = 200) -> dict[str, Any]:
    from monitor.emulate import Emulator
    from monitor.sidecar import Sidecar

    phase = random.Random(seed).random()
    emu = Emulator(_config(output_tokens), 0, speed=0, seed=seed)
    await emu.start()
    sidecar = None
    try:
        local = emu.localized_config()
        dep = local.deployments[0]
        dep = dep.model_copy(update={"targets": [t for t in dep.targets if t.role == "server"]})
        cfg = local.model_copy(update={"deployments": [dep], "sidecar": SidecarSettings(
            scrape_interval_seconds=1.0, scrape_timeout_seconds=1.0, listen_port=0)})
        state = emu.deployments["det"]
        sidecar = Sidecar(cfg, clock=lambda: EPOCH + state.now)
        port = await sidecar.start_http("127.0.0.1", 0)
        metrics = f"http://127.0.0.1:{port}/metrics"
        scraper = sidecar.scraper
        async with aiohttp.ClientSession() as session:
            for _ in range(int(warm)):
                await emu.advance(1.0)
                await scraper.cycle(session)
            burn0, good0 = await _exported(session, metrics)
            await emu.advance(phase)
            async with session.post(emu.control_url + "/control/incident",
                                    json={"deployment": "det", "kind": "tpot_regression", "factor": factor}) as r:
                r.raise_for_status()
            injected = state.now
            await emu.advance(1.0 - phase)
            detected = None
            while state.now - injected < limit:
                await scraper.cycle(session)
                burn, _ = await _exported(session, metrics)
                if burn >= THRESHOLD:
                    detected = state.now
                    break
                await emu.advance(1.0)
            store = sidecar.observations.engines["det"].store
        return {"seed": seed, "phase": phase, "latency": None if detected is None else detected - injected,
                "burn_before": burn0, "b0": 1.0 - good0 if good0 is not None else 0.0,
                **_window_math(store, EPOCH + injected)}
    finally:
        if sidecar is not None:
            await sidecar.close()
        await emu.stop()


def _bad(h: Hist | None) -> tuple[float, float]:
    """(bad, total) events of a cumulative TPOT histogram at the 100 ms target."""
    if h is None:
        return 0.0, 0.0
    gr = good_ratio(h, TARGET)
    return (h.total * (1.0 - gr.value) if gr else 0.0), h.total


def _window_math(store: SnapshotStore, injected: float) -> dict:
    """The window math's inputs, read from the sidecar's own snapshots: b0/r0 over the 5 min before the
    injection, the first bad finish, and b1/r1 over the climb from the first bad finish to the end."""
    snaps = list(store.snapshots())
    at = [s for s in snaps if s.ts <= injected][-1]
    before = store.window_start(at.ts, WINDOW)
    bad_at, total_at = _bad(at.hists.get("tpot"))
    r0 = (total_at - _bad(before.hists.get("tpot"))[1]) / max(at.ts - before.ts, 1.0) if before else 0.0
    first = next((s for s in snaps if s.ts > injected and _bad(s.hists.get("tpot"))[0] > bad_at + 0.5), None)
    b1 = r1 = None
    end = snaps[-1]
    if first is not None and end.ts > first.ts:
        (bad0, tot0), (bad1, tot1) = _bad(first.hists.get("tpot")), _bad(end.hists.get("tpot"))
        if tot1 > tot0:
            b1, r1 = (bad1 - bad0) / (tot1 - tot0), (tot1 - tot0) / (end.ts - first.ts)
    return {"b1": b1, "r0": r0, "r1": r1, "first_bad": None if first is None else first.ts - injected,
            "covered": at.ts - before.ts if before else 0.0}


def predicted(r: dict[str, Any]) -> float | None:
    """first bad finish + tau, tau solving r1 tau (b1 - 0.144) = r0 (300 - tau) (0.144 - b0)."""
    b0, b1, r0, r1, first = r["b0"], r["b1"], r["r0"], r["r1"], r["first_bad"]
    need = THRESHOLD * 0.01
    if None in (b1, r1, first) or b1 <= need:
        return None
    if r["covered"] >= WINDOW - 1:  # full window: old events leave as new ones enter
        tau = WINDOW * r0 * (need - b0) / (r1 * (b1 - need) + r0 * (need - b0))
    else:  # warming up: nothing leaves yet, the good events so far dilute the bad ones
        tau = r0 * (r["covered"] + first) * (need - b0) / (r1 * (b1 - need))
    return first + tau


def run(*, trials: int = 5, factor: float = 2.0, warm: float = 330.0, limit: float = 240.0) -> list[dict[str, Any]]:
    return [asyncio.run(trial(100 + i, factor=factor, warm=warm, limit=limit)) for i in range(trials)]


def render(results: list[dict[str, Any]], *, factor: float, warm: float) -> str:
    rows = []
    for r in results:
        pred = predicted(r)
        rows.append([str(r["seed"]), f"{r['phase']:.2f}", "not detected" if r["latency"] is None else f"{r['latency']:.1f}",
                     "–" if r["first_bad"] is None else f"{r['first_bad']:.1f}",
                     f"{r['b0'] * 100:.2f} %", "–" if r["b1"] is None else f"{r['b1'] * 100:.1f} %",
                     f"{r['r0']:.2f}", "–" if r["r1"] is None else f"{r['r1']:.2f}",
                     "–" if pred is None else f"{pred:.1f}", f"{r['burn_before']:.2f}"])
    lat = [r["latency"] for r in results if r["latency"] is not None]
    summary = (f"median {median(lat):.1f} s, max {max(lat):.1f} s over {len(lat)}/{len(results)} detected trials"
               if lat else "no trial detected the breach")
    full = "5m window full" if warm >= WINDOW else "5m window still filling"
    head = (f"TPOT x{factor:g} injected after {warm:.0f} s of healthy traffic ({full}), scrape interval 1 s, "
            f"objective 99 %, target 100 ms. Detection latency: {summary}.")
    return head + "\n\n" + markdown(
        ["seed", "inject phase", "latency s", "first bad finish s", "bad share before (b0)",
         "bad share in climb (b1)", "req/s before (r0)", "req/s in climb (r1)", "window math s", "burn 5m before"], rows)
