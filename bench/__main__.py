"""`python -m bench [--quick] [--write-results] [--only NAME ...]`: every benchmark, one report.

The machine is shared: contenders are interleaved or run side by side and repeated, medians with
ranges reported; absolute numbers move with the load, ratios measured side by side much less. The
report opens with every goal of issue 16 (item 4 of issue 19, item 2 of issue 24) as one line: measured, goal, verdict.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench import (
    big,
    detection,
    emulator,
    fleet,
    generate_fleet,
    growth,
    leading,
    metrics_page,
    parse_cpu,
    provenance,
    victoriametrics,
)
from bench.expositions import catalogue
from bench.table import markdown

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
BENCHES = ("parse", "fleet", "big", "detection", "leading", "emulator", "growth", "metrics", "generate",
           "victoriametrics")
BY_NAME = {"parse": parse_cpu, "fleet": fleet, "big": big, "detection": detection, "leading": leading,
           "emulator": emulator, "growth": growth, "metrics": metrics_page, "generate": generate_fleet,
           "victoriametrics": victoriametrics}
NOTES = """## How to read this

- Absolute CPU numbers move by +-30 % with the other jobs on this 2-core machine (the load average at the
  start and end of the run is above); the ratios are measured side by side in one run (the sidecar and
  Prometheus scraping the same served bytes at the same time, in-process contenders interleaved in
  rotating order) and move much less. Ranges are [min–max] of the windows (live) or the IQR (in-process).
- Benchmark 1, live: the real `python -m monitor run`, Prometheus 2.42 and Prometheus 3 scraping the same
  served bytes at the same time (three processes sharing the 2 cores; both ratios come from the same
  windows), CPU of each process tree (every thread; the sidecar's parser
  workers would count too) per scrape the target server counted. Prometheus must parse and store every sample; the sidecar skips the families it does not read (monitor/parse/
  blocks.py) and checks the rest only for their family's name. In-process: the parts of a scrape.
- Scaled expositions: the fixture's scheduler series (`tp_rank="0"`) repeated per (dp_rank, tp_rank),
  pids distinct, as SGLang serves them (bench/expositions.py); the emulator's is a tp = dp = 32
  DP-attention server, where every TP rank is a scheduler (the emulator emits attention-TP rank 0 of each
  DP group, which here is every rank; it has no separate `--enable-metrics-for-all-schedulers` switch).
- Benchmark 2: the live part is real (HTTP, scrape loop, the shipped parse placement: bodies of 256 KiB to
  4 MiB in a thread beside the event loop, or on it when no other parse ran in the last 50 ms, larger ones
  in worker processes) with each target serving its own pids; the 6 h part runs on a simulated clock and only the cycles whose snapshot the store keeps (bench/fleet.py), so its
  RSS is the held state of 6 h uptime, not a 6 h soak test.
- Benchmark 2b: the big target is parsed in a worker process (over 4 MiB); the ungrouped one takes the full
  scan (~1 s of CPU there), the 1M-series one fails at the series limit after the first ~60,000 lines.
- Benchmark 3: emulator and sidecar on the emulated clock, stepped 1 s at a time (real HTTP, real
  control endpoint, real exporter). A page needs the 1h window above 14.4 too; only the 5m is measured.
- Benchmark 4: the emulator's deployment and the sidecar's SLO engine in one process, in lockstep on the
  emulated clock, stepped 5 s (the default scrape interval): the servers render the families the signal and
  the TPOT SLI read, the sidecar's parser and engine take them (no HTTP: the hours are what counts here; the
  scrape path is benchmark 1's and the tests'). The rule is SLOTPOTLeadingWarning's expression and `for`
  evaluated by the same formula on the same scrapes. bench/leading.py says how capacity is set.
- Benchmark 6: bench/growth.py says what is simulated (the clock, the traffic, the skipped cycles) and what
  is real (the sidecar's engines, read model, recording and its thinning); the day of recording replays the
  last tick's rows with their timestamps moved on.
- Benchmark 7: bench/metrics_page.py says what runs (one child process serving the same fed sidecar with the
  cached /metrics and the one before it, side by side) and what the client measures; the state is fed, not
  scraped, so the only load is the /metrics requests.
- Benchmark 5: the emulator and the load generator share the machine (2 cores); "sustained" means the
  client-side TPOT stayed within 2 % of the server's, i.e. tokens left when the scheduler produced them.
- Benchmark 9: bench/victoriametrics.py says what runs (VictoriaMetrics, vmagent, vmalert and Prometheus 3
  side by side on the same served targets and the same generated rules) and which counter each figure reads.
"""


def machine() -> str:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    proms = []
    for build in parse_cpu.PROMETHEUS_BY_WHO.values():
        try:
            prom = subprocess.run([build.server, "--version"], capture_output=True, text=True, timeout=10)
            proms.append(f"{(prom.stdout or prom.stderr).splitlines()[0]} ({build.server})")
        except (OSError, IndexError, subprocess.TimeoutExpired):
            proms.append(f"{build.server}: not installed ({build.install})")
    prom_v = "\n- ".join(proms)
    from importlib.metadata import version

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"- CPU: {cpu}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), shared with other jobs\n"
            f"- Python {platform.python_version()} ({sys.executable}), prometheus_client {version('prometheus_client')},"
            f" aiohttp {version('aiohttp')}\n- {prom_v}\n- {platform.system()} {platform.release()}; load average at start {load}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, seconds instead of minutes")
    ap.add_argument("--write-results", action="store_true", help=f"write the report to {RESULTS.name}")
    ap.add_argument("--only", nargs="+", choices=BENCHES, default=list(BENCHES),
                    help=f"run these only; with --write-results their sections and goal lines replace those in "
                         f"{RESULTS.name}, the rest of it stays")
    lead = ap.add_argument_group("leading (benchmark 4)")
    lead.add_argument("--healthy-hours", type=float, default=99.0, metavar="H",
                      help="emulated healthy hours in all, split over rows x rates x seeds (default 99)")
    lead.add_argument("--seeds", type=int, default=3, help="healthy runs per row and rate (default 3)")
    lead.add_argument("--rates", type=_shares, default=leading.SHARES, metavar="S,S,...",
                      help="arrival rates as shares of each row's capacity (default 0.3,0.6,0.9)")
    lead.add_argument("--jobs", type=int, default=None, help="processes for its runs (default: the usable cores, "
                      "at most 8)")
    args = ap.parse_args(argv)
    q = args.quick
    started = time.time()
    head = f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{' (--quick)' if q else ''}\n\n{machine()}"
    sections: list[str] = []
    goals: list[tuple[str, str, str, str]] = []

    def emit(bench: str, title: str, body: str) -> None:
        text = f"## {title}\n\n{provenance.stamp(bench)}\n\n{body}"
        print(text + "\n", flush=True)
        sections.append(text)

    print(head + "\n", flush=True)
    if "parse" in args.only:
        expos = catalogue(q)
        results = parse_cpu.run_inprocess(expos, repeats=3 if q else 9)
        gz = parse_cpu.run_live(results, rounds=2 if q else 4, seconds=3 if q else 15,
                                gzip_for=expos[1].name if len(expos) > 1 else None)
        goals += parse_cpu.goal_lines(results)
        emit("parse", "1. CPU per scrape: sidecar vs Prometheus 2.42 and Prometheus 3", parse_cpu.render(results, gz))
    if "fleet" in args.only:
        kw = ({"sizes": (8, 16), "interval": 1.0, "cycles": 2, "sim_hours": 0.05, "dp_ranks": 4} if q
              else {"sizes": (100, 200, 400)})
        res = fleet.run(**kw)
        goals += fleet.goal_lines(res)
        emit("fleet", "2. 100, 200 and 400 targets of the 32-DP-rank exposition at 5 s, one sidecar", fleet.render(res))
    if "big" in args.only:
        res_big = big.run(cycles=2, scale=0.1) if q else big.run()
        goals += big.goal_lines(res_big)
        emit("big", "2b. A 50 MB target beside a normal one (issue 19 item 4)", big.render(res_big))
    if "detection" in args.only:
        kw = {"trials": 1, "warm": 60.0, "limit": 120.0} if q else {"trials": 5, "warm": 330.0, "limit": 240.0}
        det = detection.run(**kw)
        emit("detection", "3. Detection latency: TPOT regression to burn rate 5m >= 14.4",
             detection.render(det, factor=2.0, warm=kw["warm"]))
    if "leading" in args.only:
        if q:
            kw: dict = {"healthy_hours": 0.2, "seeds": 1, "shares": (0.6,), "limit": 600.0,
                        "rows": [r.name for r in leading.recipe_rows()][1:3]}
        else:
            kw = {"healthy_hours": args.healthy_hours, "seeds": args.seeds, "shares": args.rates}
        began = time.time()
        lead = leading.run(**kw, jobs=args.jobs)
        goals += leading.goal_lines(lead)
        emit("leading", LEADING_TITLE, leading.render(lead) + f"\n\nRegenerated by `python -m bench --only leading --write-results` "
             f"in {time.time() - began:.0f} s ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).")
    if "emulator" in args.only:
        kw = {"seconds": 4.0, "token_clients": (10, 60), "request_clients": (32,)} if q else {}
        emit("emulator", "5. Emulator: real requests/s and streamed tokens/s it sustains", emulator.render(emulator.run(**kw)))
    if "growth" in args.only:
        kw = ({"deployments": 10, "hours": 1.0, "rec_deployments": 4, "rec_minutes": 5.0, "day_deployments": 1}
              if q else {})
        emit("growth", "6. Per deployment as windows fill: RSS, /api/v1/status bytes, recording bytes (issue 24 item 13)",
             growth.render(growth.run(**kw)))
    if "metrics" in args.only:
        kw = {"deployments": 20, "concurrency": (10,), "rounds": 1} if q else {}
        page = metrics_page.run(**kw)
        goals += metrics_page.goal_lines(page)
        emit("metrics", "7. /healthz under concurrent /metrics, with the page cache and without (issue 24 item 2)",
             metrics_page.render(page))
    if "generate" in args.only:
        gen = generate_fleet.run(sizes=(20, 100), rounds=1) if q else generate_fleet.run()
        goals += generate_fleet.goal_lines(gen)
        emit("generate", "8. `slo-monitor generate` for a fleet: time, memory, PrometheusRule objects (issue 33 item 5)",
             generate_fleet.render(gen))
    if "victoriametrics" in args.only:
        vm = (victoriametrics.run({3: ("5s", "5s")}, warmup=10.0, window=15.0) if q else victoriametrics.run())
        emit("victoriametrics", "9. VictoriaMetrics beside Prometheus 3: samples/s ingested, rule evaluation, memory "
             "(issue 35 item 5)", victoriametrics.render(vm))
    end = ("Total wall time " + f"{time.time() - started:.0f} s; load average at end "
           + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(end)
    summary = ("## Goals (issue 16; issue 19 item 4; issue 24 item 2)\n\nEach measured in this run, side by side where it is a "
               "ratio.\n\n" + markdown(["goal", "measured", "target", "verdict"], goals)) if goals else ""
    if summary:
        print(summary)
    if args.write_results and set(args.only) != set(BENCHES) and RESULTS.exists():
        RESULTS.write_text(merge_results(RESULTS.read_text(), [*sections, NOTES], goals,
                                         goal_prefixes(args.only, goals)))
        print(f"updated {', '.join(args.only)} in {RESULTS}")
    elif args.write_results:
        RESULTS.write_text("# Benchmark results\n\nWritten by `python -m bench --write-results` (`make bench`).\n\n"
                           + "\n\n".join([head, *([summary] if summary else []), *sections, end]) + "\n\n" + NOTES)
        print(f"wrote {RESULTS}")
    return 0


LEADING_TITLE = "4. The leading TPOT warning: false warnings over healthy hours, lead over the burn signal"


def _shares(text: str) -> tuple[float, ...]:
    try:
        shares = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: shares of capacity, e.g. 0.3,0.6,0.9") from None
    if not shares or not all(0 < x <= 2 for x in shares):
        raise argparse.ArgumentTypeError(f"{text!r}: each share must be over 0 and at most 2")
    return shares


def _section_number(title: str) -> str:
    return title.split(" ", 1)[0]


def merge_results(old: str, sections: list[str], goals: list[tuple[str, str, str, str]],
                  prefixes: tuple[str, ...]) -> str:
    """RESULTS.md with the sections just run in place of those of the same number (`## 4. ...`), and their goal
    lines in place of the goal lines that start with one of `prefixes` (`goal_prefixes`); every other section
    and goal line as it was."""
    parts = old.split("\n## ")
    for text in sections:
        title = text.removeprefix("## ").split("\n", 1)[0]
        at = next((i for i, p in enumerate(parts) if i and _section_number(p) == _section_number(title)), None)
        if at is None:
            at = next((i for i, p in enumerate(parts) if i and p.startswith("How to read")), len(parts))
            parts.insert(at, text.removeprefix("## "))
        else:
            parts[at] = text.removeprefix("## ").rstrip("\n") + "\n"
    out = "\n## ".join(parts)
    if not goals:
        return out
    lines = out.split("\n")
    table = [i for i, line in enumerate(lines) if line.startswith("| goal ")]
    if not table:
        return out
    start = table[0]
    end = start
    while end + 1 < len(lines) and lines[end + 1].startswith("|"):
        end += 1
    rows = [_cells(line) for line in lines[start + 2:end + 1]]
    kept = [r for r in rows if not r[0].startswith(prefixes)]
    first = next((i for i, r in enumerate(rows) if r[0].startswith(prefixes)), len(kept))
    merged = kept[:first] + [list(g) for g in goals] + kept[first:]
    lines[start:end + 1] = markdown(["goal", "measured", "target", "verdict"], merged).split("\n")
    return "\n".join(lines)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def goal_prefixes(only: list[str], goals: list[tuple[str, str, str, str]]) -> tuple[str, ...]:
    """How the goal lines of the benchmarks in `only` start: a module's GOAL_PREFIXES, else each new goal's text
    up to its first comma."""
    own = tuple(p for name in only for p in getattr(BY_NAME[name], "GOAL_PREFIXES", ()))
    return own + tuple(g[0].split(",", 1)[0] for g in goals)


if __name__ == "__main__":
    raise SystemExit(main())
