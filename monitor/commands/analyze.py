"""`slo-monitor analyze`: post-incident report of one deployment from Prometheus or the sidecar's recording."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable

from monitor.analyze.report import Report, analyze
from monitor.conventions.slis import GOODPUT_SLI, SLIS
from monitor.conventions.units import parse_duration
from monitor.record.store import RecordingError


def _progress(msg: str) -> None:
    print(f"analyze: {msg}", file=sys.stderr, flush=True)


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float(parse_duration(text))


def build_report(args: argparse.Namespace, *, now: Callable[[], float] = time.time,
                 progress: Callable[[str], None] = _progress) -> Report:
    from monitor.analyze.baseline import first_data
    from monitor.analyze.timeparse import iso, parse_time
    from monitor.interop.load import load_config

    config = load_config(args.config) if args.config else None
    dep_cfg = config.deployment(args.deployment) if config else None
    t_now = now()
    if getattr(args, "now", None):  # the instant relative times count from: the page's, when analysing later
        t_now = parse_time(args.now, t_now)
    t1, t2 = parse_time(args.from_, t_now), parse_time(args.to, t_now)
    if t2 <= t1:
        raise ValueError(f"--to ({args.to}) must be after --from ({args.from_})")
    span = t2 - t1
    window = _seconds(args.window) if args.window else auto_window(span)
    step = _seconds(args.step) if args.step else None
    start = t1 - span - window
    baseline = None
    if getattr(args, "baseline", None):
        b1, sep, b2 = args.baseline.partition("..")
        if not sep or not b1 or not b2:
            raise ValueError(f"--baseline {args.baseline!r}: expected T1..T2 (e.g. 2026-01-05T10:00:00Z..now-3h)")
        baseline = (parse_time(b1, t_now), parse_time(b2, t_now))
        if baseline[1] <= baseline[0]:
            raise ValueError(f"--baseline {args.baseline!r}: its end must be after its start")
        if baseline[1] > t1:
            raise ValueError(f"--baseline {args.baseline!r}: it must end at or before --from")
        start = min(start, baseline[0] - window)
    if args.prometheus:
        from monitor.analyze.prometheus import PrometheusError, load_prometheus

        try:
            ds = asyncio.run(load_prometheus(args.prometheus, args.deployment, start, t2, span,
                                             deployment_config=dep_cfg, step=step, progress=progress,
                                             timeout=args.timeout))
        except PrometheusError as err:
            raise ValueError(str(err)) from None
    else:
        from monitor.analyze.recording import load_recording

        path = args.recording or (config.sidecar.recording_path if config else None)
        if not path:
            raise ValueError("give --prometheus URL or --recording FILE (or a config with sidecar.recording_path)")
        try:
            ds = load_recording(path, args.deployment, start - (step or 0), t2, deployment_config=dep_cfg,
                                step=step, progress=progress)
        except RecordingError as err:
            raise ValueError(str(err)) from None
    notes = []
    first = first_data(ds)
    if baseline is None and first is not None and t1 + ds.step < first < t2:
        # The data begins inside the range (a deployment, or its recording, younger than --from): the range read
        # is what exists, and the window a fifth of that; a window as long as the data leaves nothing to compare.
        notes.append(f"no data before {iso(first)}: the range read starts there, not at --from ({iso(t1)})")
        t1 = first
        if not args.window:
            window = auto_window(t2 - t1)
    progress(f"analysing {len(ds.times)} steps of {ds.step:g} s, {len(ds.series)} series ...")
    report = analyze(ds, t1, t2, window, args.sli or None, baseline)
    report.notes[:0] = notes
    if not args.window:
        report.notes.append(f"SLI window {window:g} s, chosen from the {t2 - t1:g} s range (a fifth of it, 1 to 5 "
                            "minutes): pass --window to choose another")
    return report


def auto_window(span: float) -> float:
    """The SLI short window when none is given: a fifth of the range in whole minutes, 1 to 5 minutes. The
    page alert's 5m suits an hour; on a ten-minute recording it would take the baseline's first five minutes
    as warm-up and leave nothing to compare with."""
    return float(min(300, max(60, 60 * int(span / 5 // 60))))


def _handler(args: argparse.Namespace) -> int:
    from monitor.analyze.output import previous_report, write_report

    rep = build_report(args)
    replaced = previous_report(args.output)
    paths = write_report(rep, args.output)
    if replaced is not None:
        print(f"{args.output}: replaced the report of {replaced} (-o DIR keeps each report apart)", file=sys.stderr)
    print(rep.verdict.first_line)  # what on-call reads first: mechanism, confidence, when, how much
    print(rep.verdict.headline)  # then the whole reading: demand, consequences, what contributed, what breached
    primary = rep.primary
    if primary is not None:
        from monitor.analyze.fmt import summary

        print(summary(rep, primary))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "analyze", help="post-incident report: breach timeline, percentiles vs baseline, what moved with it",
        description="Analyse one deployment between two times from Prometheus or the sidecar's recording, and "
                    "write report.md, a self-contained report.html and report.json.")
    p.add_argument("--deployment", "-d", required=True, help="deployment name (the `deployment` label)")
    p.add_argument("--from", dest="from_", required=True, metavar="T1",
                   help="start of the range to read, e.g. the last hour: now-1h (also RFC3339, unix seconds, `now`; "
                        "or --from=-1h); the incident is found inside it")
    p.add_argument("--to", required=True, metavar="T2", help="end of the range (same forms; e.g. now)")
    p.add_argument("--now", metavar="T", help="the instant `now` and relative times count from (default: the "
                   "clock); e.g. the page's time, to read the range on-call read then (--from now-1h --to now)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prometheus", metavar="URL", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    src.add_argument("--recording", metavar="FILE", help="the sidecar's SQLite recording")
    p.add_argument("-c", "--config", help="config with the deployment's targets, objective and recipe baseline")
    p.add_argument("-o", "--output", default="slo-report", help="report directory (default: slo-report)")
    p.add_argument("--baseline", metavar="T1..T2",
                   help="healthy period to compare with (default: as long as the range, right before --from; "
                        "parts without data or traffic are left out and said)")
    p.add_argument("--window", help="SLI short window for the breach timeline (default: a fifth of the range, "
                                    "1m to 5m: 5m from a 25-minute range up)")
    p.add_argument("--step", help="analysis step (default: span/300 rounded, at least the scrape interval)")
    p.add_argument("--sli", action="append", choices=[*SLIS, GOODPUT_SLI], help="analyse only this SLI (repeatable)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per Prometheus query (default 30)")
    p.set_defaults(func=_handler)
