"""`python -m tools.incident_lab [--check]` (`make confusion`): run every incident kind in lockstep, backfill a real
Prometheus from the capture, analyse each from both sources and write the confusion table into docs/analysis.md
(`--check`: only say whether the committed table is what was measured; exit 1 when it drifted).

`python -m tools.incident_lab --grid [--seeds N] [--jobs J] [--only SCENARIO] [--rate LOAD] [--magnitude M]
[--save FILE | --load FILE]`
(`make confusion-grid`): the experiment of tools/incident_lab/grid.py (every kind at three magnitudes, three
arrival rates, healthy controls, pairs, seeds split into tuned and held-out), analysed from the recording; the
whole grid writes its section at the top of docs/analysis.md, a slice of it (--only/--rate/--magnitude) only
prints. `--capacity`: the probe the grid's arrival rates come from.

`python -m tools.incident_lab --random [--seeds N] [--jobs J] [--runs-per-seed K] [--save FILE | --load FILE]
[--no-write]` (`make confusion-random`): the randomized lab of tools/incident_lab/randomized.py (per seed,
K runs with a drawn workload, load, scenario, shape, magnitude and analysed range); the whole lab writes its section
after the grid's in docs/analysis.md and its results to docs/analysis-random.json.gz, a smaller one
(--runs-per-seed other than the default, --no-write, --load) only prints. `--random --capacity`: its workloads'
capacity probe."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tools.incident_lab import grid, randomized
from tools.incident_lab.confusion import DOC, analyse, doc_table, table, write_doc
from tools.incident_lab.lockstep import run_lab
from tools.incident_lab.prometheus import serving


def main_grid(args: argparse.Namespace) -> int:
    if args.load:  # render what a run saved, without running it
        g = grid.load(args.load)
        partial = g.loads != grid.LOADS or {(r.scenario, r.magnitude) for r in g.results} != {
            (c.scenario, c.magnitude) for c in grid.CELLS}
    else:
        cells = grid.select(args.only or (), args.magnitude or ())
        loads, seeds = tuple(args.rate or grid.LOADS), tuple(range(args.seeds))
        partial = bool(args.only or args.rate or args.magnitude)
        grid.log(f"{len(cells)} cells x {len(loads)} rates x {len(seeds)} seeds = "
                 f"{len(cells) * len(loads) * len(seeds)} runs in "
                 f"{len(seeds) * len(loads) * -(-len(cells) // grid.CHUNK)} tasks, "
                 f"{args.jobs} at once")
        g = grid.run_grid(seeds, jobs=args.jobs, loads=loads, cells=cells, progress=grid.log)
    if args.save:
        grid.save(g, args.save)
        grid.log(f"results saved to {args.save}")
    if not (partial or args.no_write or args.load):  # the doc's section and the results it is rendered from
        grid.save(g, grid.RESULTS)
        grid.log(f"results saved to {grid.RESULTS}")
    text = grid.section(g, cut=args.cut)
    print(text)
    right = sum(r.right for r in g.results)
    grid.log(f"{right}/{len(g.results)} right; the grid took {g.seconds:.0f} s ({g.seconds / 60:.1f} min)")
    if partial or args.no_write:
        grid.log(f"a slice of the grid: {DOC} not written")
        return 0
    grid.log(f"{DOC}: {'updated' if grid.write_doc(text) else 'unchanged'}")
    return 0


def main_random(args: argparse.Namespace) -> int:
    if args.load:  # render what a run saved, without running it
        lab = randomized.load(args.load)
    elif args.reanalyse:  # the analysis of kept recordings, without emulating them again
        lab = randomized.reanalyse(args.reanalyse, runs_per_seed=args.runs_per_seed, jobs=args.jobs,
                                   progress=grid.log)
    else:
        seeds = tuple(range(args.seeds))
        grid.log(f"randomized lab: {args.runs_per_seed} runs x {len(seeds)} seeds = {args.runs_per_seed * len(seeds)}"
                 f" runs, {args.jobs} processes at once")
        lab = randomized.run_random(seeds, runs_per_seed=args.runs_per_seed, jobs=args.jobs, keep=args.keep,
                                    progress=grid.log)
    partial = lab.runs_per_seed != randomized.RUNS_PER_SEED
    if args.save:
        randomized.save(lab, args.save)
        grid.log(f"results saved to {args.save}")
    write = not (partial or args.no_write or args.load or args.reanalyse)
    if write:  # the doc's section and the results it is rendered from
        randomized.save(lab, randomized.RESULTS)
        grid.log(f"results saved to {randomized.RESULTS}")
    text = randomized.section(lab)
    print(text)
    n = len(lab.results)
    grid.log(f"randomized lab: {sum(r.right for r in lab.results)}/{n} right; it took {lab.seconds:.0f} s "
             f"({lab.seconds / max(n, 1):.1f} s a run)")
    if not write:
        grid.log(f"{DOC} not written (--no-write, --load, or not the whole lab)")
        return 0
    grid.log(f"{DOC}: {'updated' if randomized.write_doc(text) else 'unchanged'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.incident_lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare with docs/analysis.md instead of writing it")
    p.add_argument("--grid", action="store_true", help="run the grid (tools/incident_lab/grid.py)")
    p.add_argument("--random", action="store_true", help="run the randomized lab (tools/incident_lab/randomized.py)")
    p.add_argument("--seeds", type=int, default=10,
                   help="grid / random: seeds 0..N-1 (even: tuned, odd: held-out)")
    p.add_argument("--jobs", type=int, default=grid.default_jobs(), help="grid / random: processes at once")
    p.add_argument("--runs-per-seed", type=int, default=randomized.RUNS_PER_SEED,
                   help="random: runs drawn per seed (another number than the default only prints)")
    p.add_argument("--only", action="append", choices=grid.SCENARIO_NAMES, metavar="SCENARIO",
                   help=f"grid: only this scenario (repeatable): {', '.join(grid.SCENARIO_NAMES)}")
    p.add_argument("--rate", action="append", choices=grid.LOADS, help="grid: only this arrival rate (repeatable)")
    p.add_argument("--magnitude", action="append", choices=grid.MAGNITUDES,
                   help="grid: only this magnitude (repeatable; healthy controls and pairs always run)")
    p.add_argument("--no-write", action="store_true",
                   help="grid / random: print the section, do not write the doc")
    p.add_argument("--cut", default="", help="grid: a sentence for the doc saying what was cut to fit the time")
    p.add_argument("--save", type=Path, help="grid / random: also save every run's result as JSON here")
    p.add_argument("--load", type=Path,
                   help="grid / random: render the section from results saved with --save (no run)")
    p.add_argument("--keep", type=Path, help="random: keep every task's recording in this directory")
    p.add_argument("--reanalyse", type=Path, metavar="DIR",
                   help="random: analyse the recordings kept with --keep again (no emulation; prints only)")
    p.add_argument("--capacity", action="store_true",
                   help="print the capacity probe the grid's rates come from (with --random: its workloads')")
    args = p.parse_args(argv)
    if args.capacity:
        return randomized.main_capacity() if args.random else grid.main_capacity()
    if args.random:
        return main_random(args)
    if args.grid:
        return main_grid(args)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="incident-lab-") as tmp:
        work = Path(tmp)
        print("incident lab: running every scenario in lockstep ...", file=sys.stderr, flush=True)
        run = run_lab(work)
        assert run.openmetrics is not None
        print("incident lab: backfilling Prometheus and analysing ...", file=sys.stderr, flush=True)
        with serving(run.openmetrics, work, run.interval) as url:
            outcomes = analyse(run, url)
    text = table(outcomes)
    print(text)
    wrong = [f"{o.scenario.name} ({o.source}): {o.mechanism}" for o in outcomes if not o.right]
    print(f"incident lab: {len(outcomes) - len(wrong)}/{len(outcomes)} right in {time.monotonic() - began:.0f} s"
          + (f"; wrong: {', '.join(wrong)}" if wrong else ""), file=sys.stderr)
    if args.check:
        same = doc_table() == text
        print(f"{DOC}: {'up to date' if same else 'DRIFTED: run make confusion'}", file=sys.stderr)
        return 0 if same else 1
    print(f"{DOC}: {'updated' if write_doc(text) else 'unchanged'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
