"""Benchmark 4: the leading TPOT warning, its false warnings over many healthy hours and its lead over the burn.

Every recipe row with a TPOT target (the 11 of examples/kimi-k2.6-ascend.yaml, the emulator's recipe default),
each at arrival rates of 30, 60 and 90 % of its capacity (`capacity`), several seeds. The emulator's deployment
(monitor.emulate, its scheduler and metrics) and the sidecar's SLO engine (monitor.slo.engine) run in one
process, in lockstep on the emulated clock: every 5 s (the sidecar's default scrape interval) the emulator
advances, each of the row's SGLang servers renders its /metrics (the families the signal and the TPOT SLI read:
ITL, TPOT, `num_running_reqs`, `gen_throughput`), the sidecar's parser reads it and its engine takes the
scrape and the snapshot, as a scrape cycle does (no HTTP and no other family: the scrape path is tested
elsewhere; here only hours of emulated time count). Per step:

- sidecar: its `tpot_leading` state (monitor/slo/leading.py): `warning` is the held one that SLOWING and the
  alert use (over the TPOT target at every evaluation for `TPOT_LEADING_FOR`), `over_target` the instant one
  that the table showed before it waited (counted as `refreshes over`);
- rule: SLOTPOTLeadingWarning's expression evaluated by the same formula on the same scrapes, as Prometheus 3
  would with the generated config (evaluation interval = scrape interval): `rate(ITL _sum[1m]) / rate(ITL
  _count[1m])` over the samples in (t - 1m, t] (the extrapolation cancels: every series has the same sample
  times), the larger of it and running / gen_throughput (the scheduler gauges, as `per_rank_total` sums
  them), and `for: 1m` (firing at the first evaluation at least 1m after it became pending; any evaluation
  not over drops it);
- burn: the sidecar's TPOT burn rate over 5m reaching 14.4 (the fast page's short window, benchmark 3).

Healthy runs: no incident; after a warm-up, every warning that starts firing is a false one, unless the run was
not healthy (its TPOT SLO burnt over the run: then the slowdown is real and listed as such). Regression runs:
TPOT x2 (`tpot_regression`, which slows the running requests too) at a random phase of a scrape interval, after
the same warm-up; lead time = burn time - warning time (positive: the warning came first).
"""

from __future__ import annotations

import math
import os
import random
import statistics
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

from bench.table import markdown, median
from monitor.config import Deployment, Target, load_config
from monitor.conventions.names import GAUGES, TPOT_LEADING_FOR
from monitor.conventions.policy import PAGE_BURN_RATE
from monitor.conventions.slis import ENGINE_ROLES, REQUEST_ROLES, SLI_FAMILIES
from monitor.conventions.units import parse_duration
from monitor.slo.histogram import delta, good_ratio
from monitor.slo.leading import throughput_tpot

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kimi-k2.6-ascend.yaml"
STEP = 5.0
EPOCH = 1_800_000_000.0
HOLD = float(parse_duration(TPOT_LEADING_FOR))
RULE_WINDOW = 60.0  # names.TPOT_LEADING_WINDOW
SHARES = (0.3, 0.6, 0.9)  # of each row's capacity
# How this benchmark's goal lines start (today's and those of earlier runs): `python -m bench --only leading
# --write-results` replaces them in RESULTS.md.
GOAL_PREFIXES = ("3. lead of the TPOT warning", "3. false TPOT warnings")
WARM = 420.0
FACTOR = 2.0
# What the servers render each step: the signal's and the TPOT SLI's families (the sidecar skips the rest).
RENDERED = frozenset({SLI_FAMILIES["itl"], SLI_FAMILIES["tpot"], GAUGES["num_running_reqs"], GAUGES["gen_throughput"]})
ITL_SUM, ITL_COUNT = SLI_FAMILIES["itl"] + "_sum", SLI_FAMILIES["itl"] + "_count"


@cache
def recipe_rows() -> tuple[Deployment, ...]:
    """The rows with a TPOT target, with only their SGLang engine targets (the emulator serves those)."""
    return tuple(d.model_copy(update={"targets": [t for t in d.targets if t.role in ENGINE_ROLES]})
                 for d in load_config(EXAMPLE).deployments if d.tpot_target_seconds is not None)


def row(name: str) -> Deployment:
    return next(d for d in recipe_rows() if d.name == name)


# --- capacity --------------------------------------------------------------------------------------------
def _mean_field(dep: Deployment, rate: float) -> dict[str, float] | None:
    """What the emulator's model (monitor/emulate/model.py) gives at `rate` req/s, averaged: per decode rank the
    decode batch `b` and the requests prefilling beside it `p` (a fixed point: a bigger batch decodes slower and
    holds its slots longer), the share of decode and prefill slots held, and the TPOT SLO's quantile of the
    requests' TPOT (median at the mean batch x the model's per-request spread). None: the slots cannot keep up."""
    from statistics import NormalDist

    from monitor.emulate.disaggregation import BOOTSTRAP_SECONDS
    from monitor.emulate.engine import EmulatedDeployment
    from monitor.emulate.model import ACCEPT_SIGMA, KV_GBPS_MEDIAN, KV_MB_PER_TOKEN, TPOT_SIGMA, step_factor

    emu = EmulatedDeployment(dep, rate=0.0)
    m = emu.model
    deco = [(s, r) for s in emu.servers if s.spec.role in REQUEST_ROLES for r in s.ranks]
    pre = [r for s in emu.servers if s.spec.role == "prefill" for r in s.ranks]
    srv, rank = deco[0]
    unified = srv.spec.role == "server"
    lam = rate / len(deco)
    prefill = m.ttft_nominal  # the mean prompt's uncached tokens are the nominal ones
    tokens = m.output_tokens * 0.85 - 1  # completion lengths uniform over 70-100 % of the recipe's
    b = p = 0.0
    for _ in range(200):
        per_token = m.tpot_median * step_factor(b, rank.reference, p if unified else 0.0, rank.capacity)
        decode = tokens * per_token
        nb, p = lam * decode, (lam * prefill if unified else 0.0)
        if nb > rank.capacity * 4:
            return None
        if abs(nb - b) < 1e-9:
            break
        b = nb
    # PD: a decode slot is held from its preallocation: handshake, prefill, KV transfer, decode.
    kv = 0.002 + m.input_tokens * 0.9 * KV_MB_PER_TOKEN / 1024 / KV_GBPS_MEDIAN
    held = lam * (decode + prefill) if unified else lam * (
        BOOTSTRAP_SECONDS + prefill + kv + 0.5 * m.tpot_median + decode)
    # A request's TPOT: its own draw (lognormal) at the batch it decodes beside, which the arrivals move around
    # the mean: Poisson arrivals dealt round-robin over k decode ranks come to each rank k times more evenly
    # (Erlang-k gaps), so by about sqrt(b / k); two of those above it.
    busy_batch = min(b + 2 * math.sqrt(b / len(deco)), float(rank.capacity))
    slow = m.tpot_median * step_factor(busy_batch, rank.reference, p if unified else 0.0, rank.capacity)
    sigma = math.hypot(TPOT_SIGMA, ACCEPT_SIGMA if m.accept_length else 0.0)
    z = NormalDist().inv_cdf(dep.objective)
    return {"b": b, "p": p, "decode_busy": held / rank.capacity,
            "prefill_busy": rate * prefill / sum(r.capacity for r in pre) if pre else 0.0,
            "tpot_quantile": slow * math.exp(z * sigma), "target": dep.tpot_target_seconds or math.inf}


def _binding(mf: dict[str, float] | None) -> tuple[float, str]:
    """The largest of the three loads (1 = at the limit) and which one it is."""
    if mf is None:
        return math.inf, "decode slots"
    loads = {"decode slots": mf["decode_busy"], "prefill slots": mf["prefill_busy"],
             "TPOT SLO": mf["tpot_quantile"] / mf["target"]}
    name = max(loads, key=lambda k: loads[k])
    return loads[name], name


@cache
def capacity(name: str) -> tuple[float, str]:
    """The row's capacity: the highest arrival rate (req/s) at which its decode slots, its PD prefill slots and
    its TPOT SLO all hold on the emulator's model (`_mean_field`): slots busy at most all the time, and the TPOT
    SLO's quantile of the requests' TPOT (p99 at objective 99 %) at most the target. Returns the rate and
    which limit binds. Busy but healthy = a share of it; the runs measure how busy and how healthy it was."""
    dep = row(name)
    lo, hi = 0.0, 1e-3
    while _binding(_mean_field(dep, hi))[0] < 1.0:
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        if _binding(_mean_field(dep, mid))[0] < 1.0:
            lo = mid
        else:
            hi = mid
    return lo, _binding(_mean_field(dep, lo))[1]


# --- the rule, by the same formula -----------------------------------------------------------------------
class RuleEval:
    """SLOTPOTLeadingWarning as Prometheus evaluates it on the same scrapes (monitor/generate/leading.py)."""

    def __init__(self, target: float) -> None:
        self.target = target
        self.samples: deque[tuple[float, float, float]] = deque()  # (ts, ITL _sum, ITL _count) summed over series
        self.active_at: float | None = None

    def itl(self, now: float) -> float | None:
        inside = [s for s in self.samples if now - RULE_WINDOW < s[0] <= now]
        if len(inside) < 2:
            return None
        tokens = inside[-1][2] - inside[0][2]
        return (inside[-1][1] - inside[0][1]) / tokens if tokens > 0 else None

    def evaluate(self, now: float, itl_sum: float, itl_count: float,
                 load: dict[str, dict[str, float]]) -> tuple[float | None, bool]:
        """One evaluation after the scrape at `now`: (the `max` series or None, firing)."""
        self.samples.append((now, itl_sum, itl_count))
        while self.samples and self.samples[0][0] <= now - RULE_WINDOW:
            self.samples.popleft()
        known = [v for v in (self.itl(now), _rule_throughput(load)) if v is not None]
        value = max(known) if known else None
        if value is None or not value > self.target:
            self.active_at = None
            return value, False
        if self.active_at is None:
            self.active_at = now
        return value, now - self.active_at >= HOLD


def _rule_throughput(load: dict[str, dict[str, float]]) -> float | None:
    """`sum(running) / (sum(gen_throughput) > 0)`: 0 (not None) with generation but nothing running."""
    generated = sum(load.get(role, {}).get("gen_throughput", 0.0) for role in REQUEST_ROLES)
    if not generated > 0:
        return None
    return throughput_tpot(load) or 0.0


# --- one run ---------------------------------------------------------------------------------------------
class _Watch:
    """Warnings (start of firing, the stretch's start) and the instant readings of one signal."""

    def __init__(self) -> None:
        self.firing = False
        self.fired: list[dict[str, Any]] = []
        self.over_steps = 0
        self.stretch = self.longest = 0  # consecutive readings over the target: now, and the most seen

    def see(self, now: float, over: bool, firing: bool, detail: dict[str, Any]) -> None:
        self.over_steps += over
        self.stretch = self.stretch + 1 if over else 0
        self.longest = max(self.longest, self.stretch)
        if firing and not self.firing:
            self.fired.append({"at": now, **detail})
        self.firing = firing


def _truth(emu: Any) -> float | None:
    """The emulator's own mean seconds per token of the requests decoding now (what the signal estimates)."""
    rates = [r.rate for s in emu.servers if s.spec.role in REQUEST_ROLES for k in s.ranks for r in k.decoding
             if r.rate > 0]
    return statistics.fmean(rates) if rates else None


def lockstep(name: str, seed: int, share: float, *, healthy: float, inject: float | None = FACTOR,
             limit: float = 3600.0, warm: float = WARM) -> dict[str, Any]:
    """One run at `share` of the row's capacity: `warm` s of warm-up, `healthy` s watched for false warnings, then
    (unless `inject` is None) TPOT x`inject` at a random phase of a scrape interval, watched until the warning, the
    rule and the page fired or for `limit` s."""
    from monitor.emulate import EmulatedDeployment, Incident
    from monitor.emulate.exposition import render, server_families
    from monitor.feeds import target_wanted
    from monitor.parse.exposition import parse
    from monitor.slo.engine import DeploymentEngine

    dep = row(name)
    target = dep.tpot_target_seconds
    assert target is not None
    rate = share * capacity(name)[0]
    emu = EmulatedDeployment(dep, seed=seed, rate=rate)
    targets = [Target(role=s.spec.role, source="sglang", url=f"http://127.0.0.1:{9000 + i}/metrics")
               for i, s in enumerate(emu.servers)]
    engine = DeploymentEngine(dep.model_copy(update={"targets": targets}))
    wanted = {t.id: target_wanted(engine.deployment, t) for t in targets}  # as the sidecar's scrapes read them
    rule = RuleEval(target)
    side, prom = _Watch(), _Watch()
    after = {"warning": None, "rule": None, "burn5m": None, "page": None}
    phase = random.Random(seed).random()
    injected = None
    busy: list[float] = []
    tpot_start = tpot_end = None
    max_ratio = {"itl": 0.0, "gen_throughput": 0.0}
    over_by = {"itl": 0, "gen_throughput": 0}  # healthy readings over the target, by the estimate that was
    t = 0.0
    while True:
        t += STEP
        if inject is not None and injected is None and t > warm + healthy:
            emu.advance_to(t - STEP + phase * STEP)
            emu.add_incident(Incident(name, "tpot_regression", inject, start=emu.now))
            injected = emu.now
            tpot_end = engine.store.latest().hists.get("tpot")  # type: ignore[union-attr]
        emu.advance_to(t)
        itl_sum = itl_count = 0.0
        for srv, tgt in zip(emu.servers, targets):
            expo = parse(render(server_families(emu, srv, RENDERED), None)[0], wanted[tgt.id])
            engine.observe(tgt, expo, EPOCH + t)
            if srv.spec.role in REQUEST_ROLES:
                for smp in expo.selected:
                    if smp.name == ITL_SUM:
                        itl_sum += smp.value
                    elif smp.name == ITL_COUNT:
                        itl_count += smp.value
        engine.snapshot(EPOCH + t)
        st = engine.state(EPOCH + t)
        lead = st.leading_tpot
        assert lead is not None
        rule_value, rule_firing = rule.evaluate(t, itl_sum, itl_count, st.load)
        if t < warm:
            continue
        if tpot_start is None:
            tpot_start = engine.store.latest().hists.get("tpot")  # type: ignore[union-attr]
        detail = {"since": None if lead.over_since is None else lead.over_since - EPOCH, "itl": lead.itl_seconds,
                  "gen_throughput": lead.throughput_seconds, "running": st.load.get("all", {}).get("num_running_reqs"),
                  "truth": _truth(emu)}
        if injected is None:  # healthy: every warning is a false one
            busy.append(_busy(emu))
            for source, v in (("itl", lead.itl_seconds), ("gen_throughput", lead.throughput_seconds)):
                if v is not None:
                    max_ratio[source] = max(max_ratio[source], v / target)
                    over_by[source] += v > target
            side.see(t, lead.over_target, lead.warning, detail)
            prom.see(t, rule_value is not None and rule_value > target, rule_firing,
                     {**detail, "since": rule.active_at, "value": rule_value})
            if inject is None and t - warm >= healthy:
                break
            continue
        tpot = st.slis.get("tpot")
        burn = {w: tpot.windows[w].burn_rate if tpot is not None else math.nan for w in ("5m", "1h")}
        for key, fired in (("warning", lead.warning), ("rule", rule_firing), ("burn5m", burn["5m"] >= PAGE_BURN_RATE),
                           ("page", burn["5m"] >= PAGE_BURN_RATE and burn["1h"] >= PAGE_BURN_RATE)):
            if fired and after[key] is None:
                after[key] = t - injected
        if all(v is not None for v in after.values()) or t - injected >= limit:
            break
    if tpot_end is None:
        tpot_end = engine.store.latest().hists.get("tpot")  # type: ignore[union-attr]
    window = delta(tpot_end, tpot_start) if tpot_end is not None else None
    gr = good_ratio(window, target) if window is not None else None
    return {"row": name, "seed": seed, "share": share, "rate": rate, "inject": inject,
            "watched": max(len(busy) - 1, 0) * STEP, "requests": emu.finished, "busy": statistics.fmean(busy) if busy else 0.0,
            "tpot_burn": None if gr is None else (1 - gr.value) / (1 - dep.objective),
            "warnings": side.fired, "rule_warnings": prom.fired, "over_steps": side.over_steps,
            "steps": len(busy), "max_ratio": max_ratio, "over_by": over_by, "longest_over": side.longest * STEP,
            "rule_longest_over": prom.longest * STEP, "after": after}


def _busy(emu: Any) -> float:
    """Share of the binding slots held now: the decode-capable ones (PD: from preallocation), or PD prefill's."""
    deco = [r for s in emu.servers if s.spec.role in REQUEST_ROLES for r in s.ranks]
    held = sum(len(r.running) + len(r.transfer) for r in deco) / max(sum(r.capacity for r in deco), 1)
    pre = [r for s in emu.servers if s.spec.role == "prefill" for r in s.ranks]
    pheld = sum(len(r.running) for r in pre) / max(sum(r.capacity for r in pre), 1) if pre else 0.0
    return max(held, pheld)


def _job(args: tuple[str, int, float, float, float | None, float]) -> dict[str, Any]:
    name, seed, share, healthy, inject, limit = args
    return lockstep(name, seed, share, healthy=healthy, inject=inject, limit=limit)


def run(*, healthy_hours: float = 99.0, seeds: int = 3, shares: Sequence[float] = SHARES,
        rows: Sequence[str] | None = None, factor: float | None = FACTOR, limit: float = 3600.0,
        jobs: int | None = None) -> dict[str, Any]:
    """Rows x shares x seeds runs (seeds 300...): `healthy_hours` of healthy traffic split evenly over them, each
    followed by TPOT x`factor` (None: none) for at most `limit` s."""
    names = list(rows) if rows else [d.name for d in recipe_rows()]
    per_run = healthy_hours * 3600.0 / (len(names) * len(shares) * seeds)
    tasks = [(name, 300 + i, share, per_run, factor, limit) for name in names for share in shares for i in range(seeds)]
    jobs = jobs or min(len(os.sched_getaffinity(0)), 8)
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_job, tasks))
    else:
        results = [_job(t) for t in tasks]
    return {"rows": names, "shares": list(shares), "seeds": seeds, "factor": factor,
            "capacity": {n: capacity(n) for n in names}, "runs": results}


# --- report ----------------------------------------------------------------------------------------------
def _is_healthy(r: dict[str, Any]) -> bool:
    """Its TPOT SLO held over the watched hours (burn at most 1): a warning there is a false one."""
    return r["tpot_burn"] is None or r["tpot_burn"] <= 1.0


def _leads(runs: list[dict[str, Any]], over: str, by: str = "warning") -> list[float | None]:
    """Seconds from the warning (or the rule) to `over` (burn5m or page) per run; None where either is missing."""
    return [None if r["after"][over] is None or r["after"][by] is None else r["after"][over] - r["after"][by]
            for r in runs if r["inject"] is not None]


def _span(xs: Sequence[float | None]) -> str:
    got = [x for x in xs if x is not None]
    if not got:
        return "–"
    missing = len(xs) - len(got)
    return f"{median(got):.0f} [{min(got):.0f}–{max(got):.0f}]" + (f", {missing} not seen" if missing else "")


def totals(res: dict[str, Any]) -> dict[str, float]:
    healthy = [r for r in res["runs"] if _is_healthy(r)]
    return {"hours": sum(r["watched"] for r in healthy) / 3600, "runs": len(healthy),
            "warnings": sum(len(r["warnings"]) for r in healthy),
            "rule_warnings": sum(len(r["rule_warnings"]) for r in healthy),
            "over_steps": sum(r["over_steps"] for r in healthy), "steps": sum(r["steps"] for r in healthy),
            "over_itl": sum(r["over_by"]["itl"] for r in healthy),
            "over_thr": sum(r["over_by"]["gen_throughput"] for r in healthy),
            "longest": max((max(r["longest_over"], r["rule_longest_over"]) for r in healthy), default=0.0),
            "unhealthy": len(res["runs"]) - len(healthy),
            "unhealthy_hours": sum(r["watched"] for r in res["runs"] if not _is_healthy(r)) / 3600}


def goal_lines(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    tot = totals(res)
    out = [(f"3. false TPOT warnings (sidecar / rule) over {tot['hours']:.1f} healthy emulated h: "
            f"{len(res['rows'])} recipe rows x rates up to {max(res['shares']) * 100:.0f} % of capacity x "
            f"{res['seeds']} seeds", f"{tot['warnings']:.0f} / {tot['rule_warnings']:.0f}", "0 over >= 24 h",
            "met" if tot["warnings"] == 0 and tot["rule_warnings"] == 0 and tot["hours"] >= 24 else "MISSED")]
    if res["factor"] is None:
        return out
    for name in res["rows"]:
        runs = [r for r in res["runs"] if r["row"] == name]
        page, burn5 = _leads(runs, "page"), _leads(runs, "burn5m")
        ok = all(x is not None and x > 0 for x in page)
        out.append((f"3. lead of the TPOT warning over the page (5m & 1h burn >= {PAGE_BURN_RATE:g}), "
                    f"x{res['factor']:g}, {name}", f"median {_span(page)} s (over the 5m burn alone: {_span(burn5)} s)",
                    "> 0 s (warning first)", "met" if ok else "MISSED"))
    return out


def render(res: dict[str, Any]) -> str:
    tot = totals(res)
    shares = ", ".join(f"{s * 100:.0f}" for s in res["shares"])
    top = max(res["shares"])
    rows = []
    for name in res["rows"]:
        cap, bound = res["capacity"][name]
        runs = [r for r in res["runs"] if r["row"] == name]
        ok = [r for r in runs if _is_healthy(r)]
        busiest = [r for r in runs if r["share"] == top]
        burns = [r["tpot_burn"] for r in runs if r["tpot_burn"] is not None]
        after = [r["after"] for r in runs if r["inject"] is not None]
        rows.append([
            name, f"{cap:.3g} ({bound})", f"{sum(r['watched'] for r in ok) / 3600:.1f}",
            str(sum(r["requests"] for r in runs)),
            f"{statistics.fmean(r['busy'] for r in busiest) * 100:.0f} %" if busiest else "–",
            f"{max(burns):.2f}" if burns else "–",
            f"{sum(r['over_steps'] for r in ok)} / {sum(r['steps'] for r in ok)}",
            f"{max((r['longest_over'] for r in ok), default=0):.0f}",
            f"{max(r['max_ratio']['itl'] for r in runs):.2f} / {max(r['max_ratio']['gen_throughput'] for r in runs):.3g}",
            f"{sum(len(r['warnings']) for r in ok)} / {sum(len(r['rule_warnings']) for r in ok)}",
            _span([a["warning"] for a in after]), _span([a["burn5m"] for a in after]),
            _span([a["page"] for a in after]), _span(_leads(runs, "burn5m")), _span(_leads(runs, "page")),
            _span(_leads(runs, "page", "rule"))])
    out = [f"Every recipe row with a TPOT target at {shares} % of its capacity (the highest arrival rate at which its "
           f"decode slots, PD prefill slots and TPOT SLO hold on the emulator's model; which one binds in brackets), "
           f"{res['seeds']} seeds each: emulator and sidecar engine in lockstep on the emulated clock, a scrape every "
           f"{STEP:g} s, {WARM:.0f} s of warm-up, then the healthy hours, then TPOT x{res['factor']:g} (each run stops "
           f"once the warning, the rule and the page fired). **{tot['warnings']:.0f} false warnings from the "
           f"sidecar and {tot['rule_warnings']:.0f} from the rule over {tot['hours']:.1f} healthy emulated hours** "
           f"({tot['runs']:.0f} runs"
           + (f"; {tot['unhealthy']:.0f} runs, {tot['unhealthy_hours']:.1f} h, not counted: their TPOT SLO burnt over "
              f"the healthy part" if tot["unhealthy"] else "") +
           f"). A single reading was over the target in {tot['over_steps']:.0f} of {tot['steps']:.0f} refreshes, "
           f"what SLOWING showed before it waited for the hold ({tot['over_thr']:.0f} from gen_throughput, "
           f"{tot['over_itl']:.0f} from ITL); the longest stretch over it lasted {tot['longest']:.0f} s (the hold: "
           f"{HOLD:.0f} s). Times in seconds after the injection, median "
           f"[min–max] over the rates and seeds; page = the 5m and the 1h TPOT burn rate both >= {PAGE_BURN_RATE:g}.",
           "", markdown(["recipe row", "capacity req/s", "healthy h", "requests", f"slots busy at {top * 100:.0f} %",
                         "max TPOT burn of a run", "readings over target", "longest over s",
                         "max reading / target (itl / gen_throughput)", "false warnings (sidecar / rule)",
                         "warning s", "5m burn >= 14.4 s", "page s", "lead over 5m burn s", "lead over page s",
                         "rule's lead over page s"], rows)]
    fired = [(r, w, who) for r in res["runs"] for who in ("warnings", "rule_warnings") for w in r[who]]
    if fired:
        out += ["", "Warnings in the healthy hours:", "", markdown(
            ["recipe row", "rate %", "seed", "by", "run's TPOT SLO", "fired s", "over since s", "itl ms",
             "gen_throughput ms", "running", "emulator's own ms/token"],
            [[r["row"], f"{r['share'] * 100:.0f}", str(r["seed"]), "sidecar" if who == "warnings" else "rule",
              "held" if _is_healthy(r) else f"burnt ({r['tpot_burn']:.1f}x)", f"{w['at']:.0f}",
              "–" if w["since"] is None else f"{w['since']:.0f}", _ms(w["itl"]), _ms(w["gen_throughput"]),
              "–" if w["running"] is None else f"{w['running']:.0f}", _ms(w["truth"])] for r, w, who in fired])]
    return "\n".join(out)


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1000:.0f}"
