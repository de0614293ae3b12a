"""Sloth as a peer: our rules and the real Sloth's rules (from the specs `slo-monitor generate --format sloth` writes)
evaluated together by one Prometheus rule engine over the same emulated scrapes, and read back at every evaluation.

The engine is `promtool test rules` (Prometheus's own rule manager, PromQL engine and storage): a running Prometheus
evaluates rules only at wall-clock time, so it cannot evaluate five emulated hours of history, while promtool's unit
test evaluates every group at every interval over given series, ALERTS included. The rule groups run in file order at
each evaluation (`group_eval_order`: each rule set's recordings before the alerts that read them). Each evaluation's
numbers are read back through promtool's own report: a `promql_expr_test` that expects nothing at that time fails
and prints every sample the query returned, with full float precision (Go's `FormatFloat(v, 'E', -1)`).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from monitor.conventions import names
from monitor.conventions.policy import BURN_RATE_ALERTS, RULE_WINDOWS
from monitor.conventions.units import parse_prometheus_duration
from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.interop.sloth import render_sloth
from monitor.slo_plan import plan_slis
from tools.sloth_compare.history import STEP, History

PERIOD = "period"  # our `slo_monitor:sli_error:ratio_period` and Sloth's `slo:sli_error:ratio_rate30d`
WINDOWS = (*RULE_WINDOWS, PERIOD)
SLOTH_ERROR = re.compile(r"^slo:sli_error:ratio_rate(\w+)$")
# A PromQL regex (RE2, in a PromQL string: no backslashes); the names hold only [a-z0-9_:].
DUMPED = "|".join([
    names.NS + ":(sli_error|burn_rate):ratio_rate[a-z0-9]+", names.sli_good("5m"), names.sli_total("5m"),
    names.SLI_ERROR_PERIOD, names.PERIOD_BURN_RATE, "slo:sli_error:ratio_rate[a-z0-9]+", "slo:error_budget:ratio",
    "slo:current_burn_rate:ratio", "slo:period_burn_rate:ratio", "ALERTS",
])
SAMPLE = re.compile(r'\{((?:[^"{}]|"(?:[^"\\]|\\.)*")*)\} ([^\s,]+)')  # `{labels} value`, comma-separated
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
TIME = re.compile(r'^\s*expr: .*, time: (\S+),\s*$')
SEVERITIES = tuple(dict.fromkeys(sev for sev, *_ in BURN_RATE_ALERTS))

Key = tuple[str, str]  # (deployment, sli)


class CompareError(RuntimeError):
    pass


@dataclass
class Readout:
    """Everything read back, per evaluation step (0, 1, ... at STEP seconds)."""

    ours_error: dict[tuple[str, str, str], dict[int, float]] = field(default_factory=dict)  # (dep, sli, window)
    ours_burn: dict[tuple[str, str, str], dict[int, float]] = field(default_factory=dict)
    ours_good5m: dict[Key, dict[int, float]] = field(default_factory=dict)
    ours_total5m: dict[Key, dict[int, float]] = field(default_factory=dict)
    sloth_error: dict[tuple[str, str, str], dict[int, float]] = field(default_factory=dict)
    sloth_budget: dict[Key, float] = field(default_factory=dict)
    sloth_current_burn: dict[Key, dict[int, float]] = field(default_factory=dict)
    sloth_period_burn: dict[Key, dict[int, float]] = field(default_factory=dict)
    alerts: dict[tuple[str, str, str, str], set[int]] = field(default_factory=dict)  # (who, dep, sli, severity)
    steps: int = 0

    def sloth_burn(self, key: tuple[str, str, str]) -> dict[int, float]:
        """Sloth's burn rate over a window: its error ratio / its `slo:error_budget:ratio`, what its alerts compare
        (`ratio > factor * budget`); Sloth records it for 5m (`slo:current_burn_rate:ratio`) and the period only."""
        budget = self.sloth_budget[key[:2]]
        return {s: v / budget for s, v in self.sloth_error.get(key, {}).items()}


def _labels(text: str) -> dict[str, str]:
    return {k: json.loads(f'"{v}"') for k, v in LABEL.findall(text)}


def parse_report(text: str, steps: int) -> Readout:
    """promtool's failure report -> the samples each evaluation's query returned."""
    out = Readout(steps=steps)
    step = -1
    for line in text.splitlines():
        if m := TIME.match(line):
            step = round(parse_prometheus_duration(m.group(1)) / STEP)
            continue
        body = line.strip()
        if not body.startswith("got: ") or step < 0:
            continue
        for labels_text, value_text in SAMPLE.findall(body[5:]):
            _store(out, _labels(labels_text), float(value_text), step)
    return out


def _store(out: Readout, labels: dict[str, str], value: float, step: int) -> None:
    name = labels.get("__name__", "")
    dep, sli = labels.get("sloth_service") or labels.get("deployment", ""), labels.get("sloth_slo") or labels.get("sli", "")
    if name == "ALERTS":
        if labels.get("alertstate") != "firing":
            return
        who = "ours" if labels["alertname"] in (names.ALERT_PAGE, names.ALERT_TICKET) else "sloth"
        out.alerts.setdefault((who, dep, sli, labels["severity"]), set()).add(step)
    elif name.startswith(names.NS + ":"):
        if name == names.sli_good("5m"):
            out.ours_good5m.setdefault((dep, sli), {})[step] = value
        elif name == names.sli_total("5m"):
            out.ours_total5m.setdefault((dep, sli), {})[step] = value
        elif name in (names.SLI_ERROR_PERIOD, names.PERIOD_BURN_RATE):
            table = out.ours_error if name == names.SLI_ERROR_PERIOD else out.ours_burn
            table.setdefault((dep, sli, PERIOD), {})[step] = value
        else:
            kind, _, rest = name.removeprefix(names.NS + ":").partition(":")
            table = out.ours_error if kind == "sli_error" else out.ours_burn
            table.setdefault((dep, sli, rest.removeprefix("ratio_rate")), {})[step] = value
    elif m := SLOTH_ERROR.match(name):
        window = PERIOD if m.group(1) not in RULE_WINDOWS else m.group(1)
        out.sloth_error.setdefault((dep, sli, window), {})[step] = value
    elif name == "slo:error_budget:ratio":
        out.sloth_budget[(dep, sli)] = value
    elif name == "slo:current_burn_rate:ratio":
        out.sloth_current_burn.setdefault((dep, sli), {})[step] = value
    elif name == "slo:period_burn_rate:ratio":
        out.sloth_period_burn.setdefault((dep, sli), {})[step] = value


def _run(argv: list[str], what: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except OSError as err:
        raise CompareError(f"{what}: {err}") from err


def sloth_rules(history: History, sloth: str, workdir: Path) -> dict[str, Path]:
    """Run the real Sloth on each spec `slo-monitor generate --format sloth` writes: deployment -> its rules file."""
    out = {}
    for rel, text in render_sloth(history.config).items():
        dep = history.config.deployment(Path(rel).stem)
        spec = workdir / rel
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(text)
        rules = workdir / "sloth-rules" / f"{dep.name}.yml"
        rules.parent.mkdir(parents=True, exist_ok=True)
        res = _run([sloth, "generate", "--no-log", "-i", str(spec), "-o", str(rules),
                    f"--default-slo-period={dep.period}"], "sloth generate")
        if res.returncode != 0:
            raise CompareError(f"sloth generate -i {rel} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
        out[dep.name] = rules
    return out


def our_rules(history: History, workdir: Path) -> dict[str, Path]:
    files = generate(history.config, Options(config_name="sloth-compare"))
    out = {}
    for dep in history.config.deployments:
        path = workdir / "ours" / f"{dep.name}.rules.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[f"alerts/{names.rules_file(dep.name)}"])
        out[dep.name] = path
    return out


def _groups(path: Path) -> list[str]:
    return [g["name"] for g in yaml.safe_load(path.read_text())["groups"]]


def _value(v: float | None) -> str:
    return "_" if v is None else repr(v)


def evaluate(history: History, sloth: str, promtool: str, workdir: Path | None = None) -> Readout:
    """Both rule sets over the history in one promtool run; the numbers of every evaluation."""
    with tempfile.TemporaryDirectory(prefix="sloth-compare-") as tmp:
        work = workdir or Path(tmp)
        files = [*our_rules(history, work).values(), *sloth_rules(history, sloth, work).values()]
        test = {
            "rule_files": [str(f) for f in files],
            "evaluation_interval": f"{STEP}s",
            "group_eval_order": [g for f in files for g in _groups(f)],
            "tests": [{
                "interval": f"{STEP}s",
                "input_series": [{"series": s, "values": " ".join(_value(v) for v in vals)}
                                 for s, vals in sorted(history.series.items())],
                "promql_expr_test": [{"expr": f'{{__name__=~"{DUMPED}"}}', "eval_time": f"{step * STEP}s",
                                      "exp_samples": []} for step in range(history.steps)],
            }],
        }
        path = work / "compare.test.yml"
        path.write_text(yaml.safe_dump(test, sort_keys=False, width=1 << 20))
        res = _run([promtool, "test", "rules", str(path)], "promtool test rules")
        report = res.stdout + res.stderr
        if "got: " not in report:
            raise CompareError(f"promtool test rules read nothing back ({res.returncode}): {report.strip()[-3000:]}")
        if " err: " in report or "rule: " in report:
            raise CompareError(f"a rule failed to evaluate: {report.strip()[-3000:]}")
        return parse_report(report, history.steps)


# --- the comparison ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowRow:
    deployment: str
    sli: str
    window: str
    evaluations: int  # evaluations where both had a number
    nan_vs_absent: int  # Sloth NaN (0/0: no traffic in the window) where we record nothing
    mismatched: int  # any other evaluation where one side had a number and the other not
    max_error_diff: float
    max_burn_diff: float


@dataclass(frozen=True)
class AlertRow:
    deployment: str
    sli: str
    severity: str
    ours: tuple[tuple[int, int | None], ...]  # (fired at step, resolved at step or None: still firing)
    sloth: tuple[tuple[int, int | None], ...]


def _finite(series: dict[int, float]) -> dict[int, float]:
    return {s: v for s, v in series.items() if not math.isnan(v)}


def slos(history: History) -> list[Key]:
    return [(d.name, p.sli) for d in history.config.deployments for p in plan_slis(d, approximate=True)]


def window_rows(r: Readout, keys: list[Key], windows: tuple[str, ...] = tuple(RULE_WINDOWS)) -> list[WindowRow]:
    rows = []
    for dep, sli in keys:
        for w in windows:
            ours_e, sloth_all = r.ours_error.get((dep, sli, w), {}), r.sloth_error.get((dep, sli, w), {})
            sloth_e = _finite(sloth_all)
            ours_b, sloth_b = r.ours_burn.get((dep, sli, w), {}), r.sloth_burn((dep, sli, w))
            both = sorted(set(ours_e) & set(sloth_e))
            nan = {s for s, v in sloth_all.items() if math.isnan(v) and s not in ours_e}
            odd = (set(ours_e) ^ set(sloth_e)) - nan
            rows.append(WindowRow(
                dep, sli, w, len(both), len(nan), len(odd),
                max((abs(ours_e[s] - sloth_e[s]) for s in both), default=math.nan),
                max((abs(ours_b[s] - sloth_b[s]) for s in both), default=math.nan)))
    return rows


def alert_rows(r: Readout, keys: list[Key]) -> list[AlertRow]:
    rows = []
    for dep, sli in keys:
        for sev in SEVERITIES:
            ours, sloth = r.alerts.get(("ours", dep, sli, sev), set()), r.alerts.get(("sloth", dep, sli, sev), set())
            rows.append(AlertRow(dep, sli, sev, _episodes(ours, r.steps), _episodes(sloth, r.steps)))
    return rows


def _episodes(steps: set[int], total: int) -> tuple[tuple[int, int | None], ...]:
    """Firing steps -> (fired at, resolved at); resolved None when still firing at the last evaluation."""
    out: list[list[int]] = []
    for s in sorted(steps):
        if out and out[-1][1] == s:
            out[-1][1] = s + 1
        else:
            out.append([s, s + 1])
    return tuple((a, None if b >= total else b) for a, b in out)


def gap(a: float, b: float) -> float:
    """|a - b|, NaN equal to NaN (both undefined the same way) and infinitely far from a number."""
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    return abs(a - b)


def period_check(r: Readout, key: Key) -> tuple[float, float]:
    """The largest gaps between each side's period SLI and the definition said for it, over every evaluation:
    ours = sum of the 5m good rates / sum of the 5m total rates (traffic-weighted); Sloth's = the mean of its 5m error
    ratios (each 5m window weighs the same, whatever its traffic)."""
    ours, sloth = r.ours_error.get((*key, PERIOD), {}), r.sloth_error.get((*key, PERIOD), {})
    good, total, sloth5 = r.ours_good5m.get(key, {}), r.ours_total5m.get(key, {}), r.sloth_error.get((*key, "5m"), {})
    ours_gap = sloth_gap = 0.0
    for s, v in ours.items():
        g = sum(x for t, x in good.items() if t <= s)
        n = sum(x for t, x in total.items() if t <= s)
        ours_gap = max(ours_gap, gap(v, 1 - g / n))
    for s, v in sloth.items():
        past = [x for t, x in sloth5.items() if t <= s]
        sloth_gap = max(sloth_gap, gap(v, sum(past) / len(past)))  # a NaN among them: NaN, as in PromQL
    return ours_gap, sloth_gap
