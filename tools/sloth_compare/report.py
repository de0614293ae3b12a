"""docs/sloth-comparison.md: the numbers of one comparison run, and what differs between Sloth and us and why."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

from monitor.conventions import names
from monitor.conventions.policy import BURN_RATE_ALERTS, RULE_WINDOWS
from tools.sloth_compare.compare import (
    PERIOD,
    AlertRow,
    Readout,
    WindowRow,
    alert_rows,
    gap,
    period_check,
    slos,
    window_rows,
)
from tools.sloth_compare.history import (
    HOURS,
    IDLE,
    IDLE_AT,
    IDLE_FOR,
    RATE,
    REGRESSION_AT,
    REGRESSION_FACTOR,
    REGRESSION_FOR,
    STEP,
    History,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "sloth-comparison.md"
COMMAND = "make sloth-compare"  # = .venv/bin/python -m tools.sloth_compare
TOLERANCE = 1e-9
SNAPSHOT = REGRESSION_AT + 30 * 60  # half an hour into the regression
PERIOD_TIMES = (REGRESSION_AT, REGRESSION_AT + REGRESSION_FOR, IDLE_AT, HOURS * 3600)


def sloth_version() -> str:
    m = re.search(r"^SLOTH_MODULE=v(\S+)", (ROOT / "tools" / "go_tools.sh").read_text(), re.M)
    return m.group(1) if m else "?"


def prometheus_version(promtool: str) -> str:
    out = subprocess.run([promtool, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"version (\S+)", out)
    return m.group(1) if m else "?"


def clock(step: int | None) -> str:
    if step is None:
        return "still firing"
    seconds = step * STEP
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}"


def num(v: float | None) -> str:
    if v is None:
        return "absent"
    return "NaN" if math.isnan(v) else f"{v:.12g}"


def diff(v: float) -> str:
    if math.isinf(v):
        return "NaN vs a number"
    return "n/a" if math.isnan(v) else "0" if v == 0 else f"{v:.1e}"


def _snapshot(r: Readout, history: History) -> list[str]:
    step = SNAPSHOT // STEP
    lines = ["| deployment | window | our error ratio | Sloth's | \\|diff\\| | our burn rate | Sloth's | \\|diff\\| |",
             "|---|---|---|---|---|---|---|---|"]
    for dep in history.config.deployments:
        for w in (*RULE_WINDOWS, PERIOD):
            key = (dep.name, "tpot", w)
            oe, se = r.ours_error.get(key, {}).get(step), r.sloth_error.get(key, {}).get(step)
            ob, sb = r.ours_burn.get(key, {}).get(step), r.sloth_burn(key).get(step)
            de = diff(gap(oe, se)) if oe is not None and se is not None else "n/a"
            db = diff(gap(ob, sb)) if ob is not None and sb is not None else "n/a"
            lines.append(f"| {dep.name} | {'period (30d)' if w == PERIOD else w} | {num(oe)} | {num(se)} | {de} "
                         f"| {num(ob)} | {num(sb)} | {db} |")
    return lines


def _windows(rows: list[WindowRow]) -> list[str]:
    lines = ["| SLO | window | evaluations compared | max \\|diff\\| error ratio | max \\|diff\\| burn rate "
             "| Sloth NaN, ours absent | other mismatches |", "|---|---|---|---|---|---|---|"]
    for w in rows:
        lines.append(f"| {w.deployment} {w.sli} | {w.window} | {w.evaluations} | {diff(w.max_error_diff)} "
                     f"| {diff(w.max_burn_diff)} | {w.nan_vs_absent} | {w.mismatched} |")
    return lines


def _period(r: Readout, history: History) -> list[str]:
    lines = ["| SLO | at | our period error ratio (traffic-weighted) | Sloth's (mean of 5m ratios) | \\|diff\\| |",
             "|---|---|---|---|---|"]
    for key in slos(history):
        for t in PERIOD_TIMES:
            step = min(t // STEP, r.steps - 1)
            o, s = r.ours_error.get((*key, PERIOD), {}).get(step), r.sloth_error.get((*key, PERIOD), {}).get(step)
            d = diff(gap(o, s)) if o is not None and s is not None else "n/a"
            lines.append(f"| {key[0]} {key[1]} | {clock(step)} | {num(o)} | {num(s)} | {d} |")
    return lines


def _episodes(eps: tuple[tuple[int, int | None], ...]) -> str:
    return ", ".join(f"{clock(a)} → {clock(b)}" for a, b in eps) or "never"


def _alerts(rows: list[AlertRow]) -> list[str]:
    lines = ["| SLO | severity | ours fired → resolved | Sloth's fired → resolved | same |", "|---|---|---|---|---|"]
    for a in rows:
        lines.append(f"| {a.deployment} {a.sli} | {a.severity} | {_episodes(a.ours)} | {_episodes(a.sloth)} "
                     f"| {'yes' if a.ours == a.sloth else '**no**'} |")
    return lines


def render(history: History, r: Readout, prometheus: str) -> str:
    keys = slos(history)
    rows = window_rows(r, keys)
    worst_e = max(w.max_error_diff for w in rows if not math.isnan(w.max_error_diff))
    worst_b = max(w.max_burn_diff for w in rows if not math.isnan(w.max_burn_diff))
    compared = sum(w.evaluations for w in rows)
    checks = {key: period_check(r, key) for key in keys}
    pairs = ", ".join(f"{sev} {f:g}× over {lw} and {sw}" for sev, lw, sw, f in BURN_RATE_ALERTS)
    deps = "; ".join(
        f"`{d.name}` ({'PD: prefill + decode' if d.mode == 'pd-disaggregated' else 'one unified server'}, objective "
        f"{d.objective:g}, targets " + ", ".join(f"{s} {d.target_seconds(s):g} s" for s in d.slis)
        + (f", goodput objective {d.goodput_objective:g}" if d.goodput_objective is not None else "") + ")"
        for d in history.config.deployments)
    out = [
        "# Sloth as a peer, side by side",
        "",
        f"Generated by `{COMMAND}` (`.venv/bin/python -m tools.sloth_compare`; `--check` says whether this file is "
        "what a run writes): do not edit by hand. `tests/interop/test_sloth_peer.py` runs the same comparison on "
        "Prometheus 2.42 and 3 and checks this file.",
        "",
        "## What was run",
        "",
        f"- **History**: the emulator (`monitor.emulate`, seed 1, in lockstep) serving {deps}, "
        f"{RATE:g} requests/s each, for {HOURS} hours, scraped every {STEP} s as the generated scrape config would "
        f"(the SGLang histograms, plus the sidecar's request-log goodput counters). Incident: a TPOT regression "
        f"(decode {REGRESSION_FACTOR:g}× slower) on both deployments from {clock(REGRESSION_AT // STEP)} to "
        f"{clock((REGRESSION_AT + REGRESSION_FOR) // STEP)}; then `{IDLE}` has no traffic from "
        f"{clock(IDLE_AT // STEP)} to {clock((IDLE_AT + IDLE_FOR) // STEP)} (its counters stand still).",
        "- **Our rules**: `slo-monitor generate` for that config (the deployments' rule files, as written).",
        f"- **Sloth's rules**: the specs `slo-monitor generate --format sloth` writes, through the real Sloth "
        f"{sloth_version()} (`sloth generate -i <deployment>.yaml -o <rules> --default-slo-period=30d`).",
        f"- **One Prometheus**: both rule sets evaluated together by Prometheus {prometheus}'s rule engine over that "
        f"history (`promtool test rules`: a running server evaluates rules only at wall-clock time), every group at "
        f"every {STEP} s, each rule set's recordings before the alerts that read them; every recorded series and "
        f"`ALERTS` read back at every evaluation ({r.steps} evaluations).",
        "",
        "Names: Sloth's `slo:sli_error:ratio_rate<w>{sloth_service=<deployment>, sloth_slo=<sli>}` is our "
        "`slo_monitor:sli_error:ratio_rate<w>{deployment, sli}` for w in "
        + ", ".join(RULE_WINDOWS) + "; Sloth's `slo:sli_error:ratio_rate30d` is our "
        f"`{names.SLI_ERROR_PERIOD}{{period=\"30d\"}}`. Sloth records no burn rate per window (only "
        "`slo:current_burn_rate:ratio`, the 5m one, and `slo:period_burn_rate:ratio`); its alerts compare "
        "`error ratio > factor × slo:error_budget:ratio`, so its burn rate per window below is its error ratio / its "
        f"`slo:error_budget:ratio`, against our `{names.burn_rate('<w>')}`. Both use the same windows and factors "
        f"(the SRE workbook's: {pairs}).",
        "",
        "## Result",
        "",
        f"Where the definitions match (every SLI window, {compared} evaluations): largest |diff| {diff(worst_e)} in "
        f"an error ratio and {diff(worst_b)} in a burn rate (tolerance {TOLERANCE:g}), and every burn-rate alert "
        "fired and resolved at the same evaluation. They differ in the period SLI (30d) and where a window has no "
        "traffic, as explained under [Differences](#differences).",
        "",
        f"### TPOT at {clock(SNAPSHOT // STEP)}, half an hour into the regression",
        "",
        *_snapshot(r, history),
        "",
        "The windows 1d and 3d (and the period) hold the whole history here: it is shorter than they are.",
        "",
        "### Every SLO, every window, every evaluation",
        "",
        *_windows(rows),
        "",
        "### Burn-rate alerts (`ALERTS{alertstate=\"firing\"}`)",
        "",
        "Ours: `SLOErrorBudgetBurnFast` (page) and `SLOErrorBudgetBurnSlow` (ticket), one rule per window pair, "
        "fired when either pair fires; Sloth's: one `SGLang<SLI>SLOBurn` rule per severity (the two pairs `or`-ed). "
        "The ticket alerts fire early here: their 1d and 3d windows hold only the history's hours.",
        "",
        *_alerts(alert_rows(r, keys)),
        "",
        "### The period SLI (30d): not the same definition",
        "",
        *_period(r, history),
        "",
        "Each side is exactly its own definition at every evaluation (largest gap, ours / Sloth's: "
        + ", ".join(f"{k[0]} {k[1]} {diff(a)} / {diff(b)}" for k, (a, b) in checks.items()) + ").",
        "",
        "## Differences",
        "",
        "What differs, and why. The per-window numbers agree because the spec carries our own queries: Sloth's "
        "`error_query`/`total_query` are our `sli_total - sli_good` and `sli_total` (`monitor/interop/sloth.py`), so "
        "everything SGLang-specific travels with them: which PD role answers a request (`role=~\"decode\"`: a PD "
        "prefill server's E2E covers its part only and would count each request twice), the interpolation between "
        "bucket edges for a target that is not one (`unified` TTFT 1.5 s above), goodput from the sidecar's "
        "request-log counters, the gateway's availability counters. A spec written by hand against SGLang's "
        "histograms would get none of this; that is not a difference between the two rule engines.",
        "",
        "1. **Period SLI.** Ours is traffic-weighted: `sum_over_time` of the 5m good rates over the period / "
        "the same of the 5m total rates, every request weighing the same. Sloth's is the mean of its 5m error "
        "ratios (`sum_over_time / count_over_time`), every 5m window weighing the same whatever its traffic: a quiet "
        "hour's errors count as much as a busy hour's. Measured above; it moves the period burn rate and the "
        "remaining error budget (`slo:period_error_budget_remaining:ratio` vs ours), not the alerts.",
        "2. **No traffic.** Sloth's ratio is `(total - good) / total`: 0/0 is NaN while a window has no requests; "
        "ours (`1 - good / (total > 0)`) records nothing. Neither pages on it (NaN > x is false). But one NaN 5m "
        "sample makes Sloth's period SLI NaN until it leaves the period (up to 30 days: see `pd` above after its "
        "idle spell), and `slo:period_burn_rate:ratio` and its remaining budget with it; ours keeps counting.",
        "3. **Alert rules.** Same conditions, shaped differently: Sloth's one rule per severity `or`s the two "
        "window pairs; ours has one rule per pair, labelled `long_window`, `short_window`, `burn_rate_threshold`, "
        "so a page says which pair fired. Alert names and labels differ (`sloth_*` labels vs `deployment`, `sli`). "
        "Where `factor × budget >= 1` (objective 0.9 or lower for the 14.4× page) we write no rule; Sloth writes one "
        "that can never fire.",
        "4. **Evaluation order.** Our recordings and alerts are in one group, so an alert reads the ratios recorded "
        "at the same evaluation. Sloth puts recordings, meta recordings and alerts in three groups; a Prometheus "
        "server runs groups independently, so its alerts can read ratios one evaluation old (here the groups are "
        "run in order: the firing times above are the rules', not the scheduling's).",
        "5. **Thresholds and budgets as floats.** Sloth computes the budget as `vector(1 - objective)` "
        "(`1 - 0.999` = 0.0009999999999999432) and the thresholds as `factor * budget`; ours are written rounded "
        "(`0.001`, and factors for a period other than 30 d to 6 decimals: 28d's slow ticket factor is 0.933333 "
        "for us and 0.9333333333333333 for Sloth). A relative difference below 1e-6 in where an alert fires; none "
        "here (30d).",
        "8. **Prometheus 2.42.** Its range selectors are closed and Prometheus 3's left-open, so the numbers "
        "differ between versions; on each, Sloth's and ours agree as above (the test runs both).",
        "6. **Period and time scale.** Sloth takes the period from `--default-slo-period` (the spec has no such "
        "field: our spec's header says which to pass) and knows 28d and 30d windows unless given a windows "
        "catalog; ours takes any `period`. `--time-scale` (our end-to-end tests' shortened windows) has no Sloth "
        "equivalent: the specs always use the nominal windows.",
        "7. **What only we record.** The sidecar's own numbers (per-window SLIs without Prometheus, leading TPOT, "
        "symptom alerts) and the good/total rates per window (`slo_monitor:sli_good:rate<w>`, "
        "`slo_monitor:sli_total:rate<w>`); Sloth records the error ratio only.",
        "",
    ]
    return "\n".join(out)
