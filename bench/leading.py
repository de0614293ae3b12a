"""Benchmark 4: the leading TPOT warning against the TPOT burn signal, and its false alarms when healthy.

Two recipe rows with the recipe's output lengths (examples/kimi-k2.6-ascend.yaml): 64K in / 1K out on 16
cards (mixed) and 64K in / 1.5K out on a 1P1D pair, both with a 100 ms TPOT target. The emulator
(monitor.emulate) serves each one on 127.0.0.1 on its emulated clock (speed 0), stepped one scrape interval
(5 s, the sidecar's default) at a time; the real sidecar scrapes it over HTTP on the same clock. After the
windows are warm, TPOT x2 (`tpot_regression`) is injected at a random phase of an interval. Per step:

- warning: the leading signal (`slo_monitor_tpot_leading_seconds{source="max"}`, monitor/slo/leading.py)
  has been over the TPOT target for `TPOT_LEADING_FOR` (what SLOTPOTLeadingWarning waits);
- burn: the TPOT burn rate over 5m reaches 14.4, the fast page's short window (benchmark 3's measure).

Lead time = burn time - warning time. False alarms: the same warning over a healthy emulated hour per row
(after the same warm-up), counted as times it starts firing; the goal is none.

The emulator as of this run observes a request's ITL when the request finishes and slows only decodes that
start after the injection, so here the ITL half of the signal lags like TPOT and the gen_throughput half
leads as the running requests turn over; SGLang observes ITL per output chunk and a slowdown hits every
running request at once, so on a real server both halves move within a scrape (docs/leading-tpot.md).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import aiohttp

from bench.table import markdown, median
from monitor.config import Config, SidecarSettings, load_config
from monitor.conventions.names import TPOT_LEADING_FOR
from monitor.conventions.policy import PAGE_BURN_RATE
from monitor.conventions.slis import ENGINE_ROLES
from monitor.conventions.units import parse_duration

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kimi-k2.6-ascend.yaml"
ROWS = ("kimi-k2.6-w4a8-16p-in64k-out1k-100ms", "kimi-k2.6-w4a8-1p1d-16p-in64k-out1k5-100ms")
STEP = 5.0
EPOCH = 1_800_000_000.0
HOLD = float(parse_duration(TPOT_LEADING_FOR))


def recipe_rows(names: tuple[str, ...] = ROWS) -> list[Config]:
    """Each row as its own config, with only the SGLang engine targets (the emulator serves those)."""
    config = load_config(EXAMPLE)
    out = []
    for name in names:
        dep = config.deployment(name)
        out.append(Config(deployments=[dep.model_copy(update={"targets": [t for t in dep.targets
                                                                           if t.role in ENGINE_ROLES]})]))
    return out


class _Watch:
    """The two signals from the sidecar's state after each scrape."""

    def __init__(self) -> None:
        self.over_since: float | None = None
        self.firing = False
        self.fired_at: list[float] = []  # times the warning started firing
        self.burn_at: float | None = None
        self.max_ratio = 0.0
        self.max_by_source = {"itl": 0.0, "gen_throughput": 0.0}

    def see(self, now: float, leading: Any, burn5: float | None) -> None:
        over = leading is not None and leading.over_target
        if leading is not None and leading.seconds is not None:
            self.max_ratio = max(self.max_ratio, leading.seconds / leading.target_seconds)
            for source, v in (("itl", leading.itl_seconds), ("gen_throughput", leading.throughput_seconds)):
                if v is not None:
                    self.max_by_source[source] = max(self.max_by_source[source], v / leading.target_seconds)
        self.over_since = (self.over_since if self.over_since is not None else now) if over else None
        firing = self.over_since is not None and now - self.over_since >= HOLD
        if firing and not self.firing:
            self.fired_at.append(now)
        self.firing = firing
        if self.burn_at is None and burn5 is not None and burn5 >= PAGE_BURN_RATE:
            self.burn_at = now


async def _run(config: Config, seed: int, *, warm: float, after: float, inject: float | None) -> dict[str, Any]:
    """Warm up, optionally inject TPOT x`inject` at a random phase, then watch `after` seconds."""
    from monitor.emulate import Emulator, Incident
    from monitor.sidecar import Sidecar

    name = config.deployments[0].name
    phase = random.Random(seed).random()
    emu = Emulator(config, 0, speed=0, seed=seed)
    await emu.start()
    sidecar = None
    try:
        local = emu.localized_config()
        state = emu.deployments[name]
        sidecar = Sidecar(local.model_copy(update={"sidecar": SidecarSettings(
            scrape_interval_seconds=STEP, scrape_timeout_seconds=STEP, listen_port=0)}),
            clock=lambda: EPOCH + state.now)
        engine = sidecar.observations.engines[name]
        watch = _Watch()
        injected = None
        async with aiohttp.ClientSession() as session:
            for _ in range(int(warm / STEP)):
                await emu.advance(STEP)
                await sidecar.scraper.cycle(session)
            if inject is not None:
                await emu.advance(phase * STEP)
                emu.add_incident(Incident(name, "tpot_regression", inject, start=state.now))
                injected = state.now
                await emu.advance((1 - phase) * STEP)
            start = state.now
            while state.now - start < after:
                await sidecar.scraper.cycle(session)
                now = EPOCH + state.now
                st = engine.state(now)
                tpot = st.slis.get("tpot")
                burn = tpot.windows["5m"].burn_rate if tpot else None
                watch.see(state.now, st.leading_tpot, burn)
                if inject is not None and watch.burn_at is not None and watch.fired_at:
                    break
                await emu.advance(STEP)
        return {"row": name, "seed": seed, "injected": injected, "warning": watch.fired_at, "burn": watch.burn_at,
                "max_ratio": watch.max_ratio, "max_by_source": watch.max_by_source, "watched": state.now - start,
                "requests": state.finished}
    finally:
        if sidecar is not None:
            await sidecar.close()
        await emu.stop()


def run(*, trials: int = 3, factor: float = 2.0, warm: float = 420.0, limit: float = 900.0,
        healthy: float = 3600.0, rows: tuple[str, ...] = ROWS) -> dict[str, list[dict[str, Any]]]:
    """`trials` regressions per recipe row (stopping once both signals fired, or after `limit` s), then one
    healthy run of `healthy` s per row."""
    configs = recipe_rows(rows)
    out: dict[str, list[dict[str, Any]]] = {"regression": [], "healthy": []}
    for cfg in configs:
        for i in range(trials):
            out["regression"].append(asyncio.run(_run(cfg, 200 + i, warm=warm, after=limit, inject=factor)))
        if healthy:
            out["healthy"].append(asyncio.run(_run(cfg, 300, warm=warm, after=healthy, inject=None)))
    return out


def _lead(r: dict[str, Any]) -> float | None:
    if r["burn"] is None or not r["warning"]:
        return None
    return r["burn"] - r["warning"][0]


def goal_lines(res: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str, str, str]]:
    out = []
    for row in dict.fromkeys(r["row"] for r in res["regression"]):
        leads = [_lead(r) for r in res["regression"] if r["row"] == row]
        got = [x for x in leads if x is not None]
        value = f"median {median(got):.0f} s [{min(got):.0f}–{max(got):.0f}]" if got else "not measured"
        ok = len(got) == len(leads) and all(x > 0 for x in got)
        out.append((f"3. lead of the TPOT warning over the 5m burn >= {PAGE_BURN_RATE:g}, x2 regression, {row}",
                    value, "> 0 s (warning first)", "met" if ok else "MISSED"))
    for r in res["healthy"]:
        n = len(r["warning"])
        out.append((f"3. false TPOT warnings over a healthy {r['watched'] / 3600:.1f} h, {r['row']}", str(n), "0",
                    "met" if n == 0 else "MISSED"))
    return out


def render(res: dict[str, list[dict[str, Any]]], *, factor: float = 2.0) -> str:
    rows = []
    for r in res["regression"]:
        warn = r["warning"][0] - r["injected"] if r["warning"] else None
        burn = r["burn"] - r["injected"] if r["burn"] is not None else None
        lead = _lead(r)
        rows.append([r["row"], str(r["seed"]), "–" if warn is None else f"{warn:.0f}",
                     "–" if burn is None else f"{burn:.0f}", "–" if lead is None else f"{lead:.0f}",
                     f"{r['max_ratio']:.2f}"])
    healthy = [[r["row"], f"{r['watched'] / 60:.0f} min", str(r["requests"]), str(len(r["warning"])),
                f"{r['max_ratio']:.2f}"] for r in res["healthy"]]
    out = [f"TPOT x{factor:g} injected after the windows are warm; scrape interval {STEP:g} s; times in seconds after "
           f"the injection. Warning: the leading signal over the TPOT target for {TPOT_LEADING_FOR}; burn: TPOT burn "
           f"rate over 5m >= {PAGE_BURN_RATE:g}.", "",
           markdown(["recipe row", "seed", "warning s", "5m burn >= 14.4 s", "lead s",
                     "max leading / target"], rows)]
    if healthy:
        out += ["", "Healthy traffic, no incident (after the same warm-up):", "",
                markdown(["recipe row", "watched", "requests finished (whole run)", "warnings fired",
                          "max leading / target"], healthy)]
    return "\n".join(out)
