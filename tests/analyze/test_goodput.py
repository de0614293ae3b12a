"""Goodput in the post-incident analysis: the sidecar's request-log counters, as Prometheus returns them."""

from __future__ import annotations

from monitor.analyze import html, markdown
from monitor.analyze.plots import render_all
from monitor.analyze.prometheus import build_dataset
from monitor.analyze.report import analyze
from monitor.config import parse_config
from monitor.conventions.slis import SLI_FAMILIES

STEP = 15.0
T0 = 1_800_000_000.0
N = 240  # one hour
INCIDENT = (T0 + 1800, T0 + 2400)  # half of the requests miss a target


def counters() -> tuple[list, list]:
    """(good, total) range results for two request-log targets; target b restarts with lost state mid-run."""
    good = {"a": [], "b": []}
    total = {"a": [], "b": []}
    cg = {"a": 0.0, "b": 0.0}
    ct = {"a": 0.0, "b": 0.0}
    for i in range(N):
        ts = T0 + i * STEP
        bad_share = 0.5 if INCIDENT[0] <= ts < INCIDENT[1] else 0.01
        for t in ("a", "b"):
            if t == "b" and i == 60:
                cg[t] = ct[t] = 0.0  # the sidecar lost its offsets file: its counters start again
            ct[t] += 10
            cg[t] += 10 * (1 - bad_share)
            good[t].append((ts, cg[t]))
            total[t].append((ts, ct[t]))
    return ([({"target": t}, good[t]) for t in good], [({"target": t}, total[t]) for t in total])


def dataset():
    cfg = parse_config({"deployments": [{"name": "kimi", "tpot_target_seconds": 0.04, "goodput_objective": 0.95,
                                         "targets": [{"role": "decode", "url": "http://10.0.0.2:30000/metrics"},
                                                     {"role": "request-log", "path": "/var/log/sglang"}]}]})
    good, total = counters()
    results = {f"hist.{sli}.{part}": [] for sli in SLI_FAMILIES for part in ("bucket", "sum")}
    results.update({"gauges.count": [], "gauges.ratio": [], "gauges.sidecar": [],
                    "goodput.good": good, "goodput.total": total})
    times = tuple(T0 + i * STEP for i in range(N))
    return build_dataset("http://prom", "kimi", times, STEP, results, {}, cfg.deployments[0], STEP)


def test_goodput_counters_become_a_monotone_sli_with_the_configured_objective():
    ds = dataset()
    assert ds.slis["goodput"].objective == 0.95 and not ds.slis["goodput"].latency
    hs = ds.hists["goodput"]
    totals = [h.total for h in hs]
    assert totals == sorted(totals)  # b's reset did not make the sum go back
    assert totals[-1] == 2 * 10 * N  # every request of both targets, once: none lost to the reset, none twice


def test_goodput_breach_is_found_with_its_window_and_reported_without_latency_percentiles():
    ds = dataset()
    rep = analyze(ds, T0 + 1200, T0 + 3300, 300)
    g = rep.slis["goodput"]
    main = g.main_episode
    assert main is not None and main.end is not None
    # 5m window, 5 % budget: 14.4x needs 72 % bad over 5 minutes, 1x needs 5 %: it leaves its objective within
    # the first minute of the incident and re-enters within a window of its end.
    assert INCIDENT[0] <= main.start <= INCIDENT[0] + 60
    assert INCIDENT[1] <= main.end <= INCIDENT[1] + 300 + STEP
    assert 9 < main.peak_burn <= 10.01  # 50 % bad / 5 % budget
    text = markdown.render(rep, {})
    assert "GOODPUT (requests meeting every target, objective 95.00%)" in text
    assert text.count("### Percentiles") == 0  # goodput has no latency distribution
    plots = render_all(rep)
    assert plots["goodput-sli.png"].startswith(b"\x89PNG") and plots["goodput-burn.png"].startswith(b"\x89PNG")
    assert "GOODPUT" in html.render(rep, plots)
