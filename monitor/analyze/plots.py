"""PNG plots of a Report (matplotlib, Agg backend: no display, no files besides the bytes returned)."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, deterministic
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from monitor.analyze.report import Report, SliReport  # noqa: E402
from monitor.conventions.policy import BURN_RATE_ALERTS

PAGE_FACTORS = sorted({f for sev, _, _, f in BURN_RATE_ALERTS if sev == "page"}, reverse=True)  # 14.4, 6
BREACH = "#d62728"
TOP_MOVERS = 4


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def _xs(times: tuple[float, ...]) -> list[datetime]:
    return [_dt(t) for t in times]


def _decorate(ax, rep: Report, s: SliReport) -> None:
    ax.axvspan(_dt(rep.baseline.start), _dt(rep.baseline.end), color="#999999", alpha=0.10, lw=0)
    for e in s.episodes:
        ax.axvspan(_dt(e.start), _dt(e.end if e.end is not None else rep.t2), color=BREACH, alpha=0.15, lw=0)
    for t in (rep.t1, rep.t2):
        ax.axvline(_dt(t), color="#555555", lw=0.8, ls=":")
    ax.grid(True, alpha=0.3)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=timezone.utc))


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _vals(v: tuple[float | None, ...], scale: float = 1.0) -> list[float]:
    return [float("nan") if x is None else x * scale for x in v]


def sli_plot(rep: Report, s: SliReport) -> bytes:
    """Latency quantiles against the target, and the SLI against its objective; breaches shaded."""
    tr = s.track
    xs = _xs(tr.times)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.6), sharex=True, layout="constrained")
    if tr.spec.latency:
        for vals, name, color in ((tr.p50, "p50", "#1f77b4"), (tr.p90, "p90", "#ff7f0e"), (tr.p99, "p99", "#9467bd")):
            top.plot(xs, _vals(vals, 1000), label=f"{name} ({tr.window:g} s window)", color=color, lw=1.2)
        top.axhline(tr.spec.target * 1000, color=BREACH, ls="--", lw=1.2, label=f"target {tr.spec.target * 1000:g} ms")
        top.set_ylabel(f"{s.sli.upper()} (ms)")
        top.set_title(f"{rep.deployment}: {s.sli.upper()} against its target (red: out of objective; grey: baseline)")
    else:  # goodput: requests per step that met every target, and those that did not
        bad = tuple(None if e is None or b is None else e * b for e, b in zip(tr.events_step, tr.bad_step))
        good = tuple(None if e is None or b is None else e - b for e, b in zip(tr.events_step, bad))
        top.plot(xs, _vals(good), label="met every target", color="#2ca02c", lw=1.2)
        top.plot(xs, _vals(bad), label="missed a target or failed", color=BREACH, lw=1.2)
        top.set_ylabel(f"requests per {rep.step:g} s")
        top.set_title(f"{rep.deployment}: goodput (red shading: out of objective; grey: baseline)")
    top.legend(loc="upper left", fontsize=8)
    bottom.plot(xs, _vals(tr.good_ratio, 100), color="#2ca02c", lw=1.2, label=f"good ratio ({tr.window:g} s window)")
    bottom.axhline(tr.spec.objective * 100, color=BREACH, ls="--", lw=1.2, label=f"objective {tr.spec.objective:.2%}")
    bottom.set_ylabel("SLI (%)")
    bottom.legend(loc="lower left", fontsize=8)
    for ax in (top, bottom):
        _decorate(ax, rep, s)
    return _png(fig)


def burn_plot(rep: Report, s: SliReport) -> bytes:
    tr = s.track
    xs = _xs(tr.times)
    fig, ax = plt.subplots(figsize=(10, 3.2), layout="constrained")
    ax.plot(xs, _vals(tr.burn), color="#d62728", lw=1.2, label=f"burn rate, {tr.window:g} s window")
    ax.plot(xs, _vals(tr.burn_long), color="#8c564b", lw=1.2, label=f"burn rate, {tr.long_window:g} s window")
    for f in PAGE_FACTORS:
        ax.axhline(f, color="#333333", ls="--", lw=0.9)
        ax.annotate(f"page {f:g}x", (xs[-1], f), fontsize=8, va="bottom", ha="right")
    peak = max([v for v in tr.burn if v is not None] + [PAGE_FACTORS[0]])
    ax.set_ylim(0, peak * 1.1)
    ax.set_ylabel("burn rate (x budget)")
    ax.set_title(f"{s.sli.upper()} error-budget burn rate with the page thresholds")
    ax.legend(loc="upper left", fontsize=8)
    _decorate(ax, rep, s)
    return _png(fig)


def movers_plot(rep: Report, s: SliReport) -> bytes | None:
    top = s.ranking[:TOP_MOVERS]
    if not top:
        return None
    tr = s.track
    xs = _xs(tr.times)
    fig, axes = plt.subplots(len(top), 1, figsize=(10, 1.9 * len(top) + 0.6), sharex=True, layout="constrained",
                             squeeze=False)
    y = tr.bad_step if s.correlated_with == "bad ratio" else tr.mean_step
    for ax, c in zip(axes[:, 0], top):
        series = rep.dataset.series[c.key]
        ax.plot(xs, _vals(series.values), color="#1f77b4", lw=1.3)
        ax.set_ylabel(c.unit, fontsize=8)
        ax.set_title(f"#{top.index(c) + 1} {c.label}: score {c.score:.2f}, Spearman {c.r_at_lag:+.2f} at lag "
                     f"{c.lag_seconds:+g} s", fontsize=9, loc="left")
        twin = ax.twinx()
        twin.plot(xs, _vals(y), color=BREACH, lw=0.8, alpha=0.5)
        twin.set_ylabel(f"{s.sli} {s.correlated_with}", fontsize=7, color=BREACH)
        twin.tick_params(axis="y", labelsize=7, colors=BREACH)
        _decorate(ax, rep, s)
    fig.suptitle(f"What moved with {s.sli.upper()} (blue), against its per-step {s.correlated_with} (red)", fontsize=10)
    return _png(fig)


def render_all(rep: Report) -> dict[str, bytes]:
    """file name -> PNG bytes, for every SLI of the report (movers only where the SLI breached)."""
    out: dict[str, bytes] = {}
    for name, s in rep.slis.items():
        out[f"{name}-sli.png"] = sli_plot(rep, s)
        out[f"{name}-burn.png"] = burn_plot(rep, s)
        if s.episodes:
            movers = movers_plot(rep, s)
            if movers:
                out[f"{name}-movers.png"] = movers
    return out
