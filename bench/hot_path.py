"""The scrape hot path's guard: the sidecar's parse + SLO update of one scrape of the anchor exposition (the real
fixture x 32 DP ranks), measured side by side with the same scrape by the code of the commit whose cost was last
accepted (`bench/hot_path.json`), each in its own process, on this machine, in this run.

Side by side, because no fixed ratio carries across machines: the sidecar's cost as a ratio to prometheus_client's
parser read 0.0109 here and 0.0144 on CI's machine, same code (the two spend their time differently). The ratio is
still measured and recorded, as a figure to read. `tests/bench/test_hot_path.py` fails when the code now costs over
1.25x the accepted commit's (issue #33: reading more families on every scrape cost 3.7x unseen). `python -m
bench.hot_path` measures and prints; `--write` records HEAD as the accepted commit, and refuses a growth over the
limit unless `--accept REASON` says why (`make bench` writes).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from bench import parse_cpu, provenance
from bench.expositions import fixture_text, replicate

FIGURE = Path(__file__).with_name("hot_path.json")
LIMIT = 1.25  # how much costlier a scrape may be than the accepted commit's before the suite fails
DP_RANKS = 32


def measure(rounds: int = 5, scrapes: int = 7) -> dict[str, float]:
    """Medians over `rounds` interleaved rounds (each: `scrapes` sidecar scrapes, then one prometheus_client
    parse), CPU time of this process: the sidecar's ms per scrape (parse + update, as benchmark 1's in-process
    `sidecar` contender times it), the client's ms per parse, their ratio."""
    run = parse_cpu.contenders(replicate(fixture_text(), DP_RANKS))
    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for _ in range(scrapes):
            gc.collect()  # as run_inprocess does: no collection of another contender's garbage inside a timing
            run["sidecar"](out)
        gc.collect()
        run["prometheus_client"](out)
    side, client = statistics.median(out["sidecar"]), statistics.median(out["prometheus_client"])
    return {"sidecar_ms": side * 1e3, "prometheus_client_ms": client * 1e3, "ratio": side / client}


def committed() -> dict[str, Any]:
    return json.loads(FIGURE.read_text())


ROOT = Path(__file__).resolve().parents[1]
# What the measured scrape imports: the package, the benchmark's contenders (and the test helpers they import), the
# fixture it scales (5 MB in all, in about 0.1 s).
TREE = ("monitor", "bench", "tests")
# Run in a fresh interpreter whose first import path is the tree given (not the editable install's checkout).
_DRIVER = """
import gc, json, statistics, sys, time
tree = sys.argv[1]
sys.path.insert(0, tree)
import monitor
assert monitor.__file__.startswith(tree), f"measured {monitor.__file__}, not the tree at {tree}"
from bench.expositions import fixture_text, replicate
from bench.parse_cpu import contenders
scrape = contenders(replicate(fixture_text(), int(sys.argv[2])))["sidecar"]
out = {}
for _ in range(int(sys.argv[3])):
    gc.collect()
    scrape(out)
print(json.dumps(statistics.median(out["sidecar"][3:]) * 1e3))
"""


def tree_at(commit: str, into: Path) -> Path:
    """The measured parts of the tree at `commit`, extracted under `into` (the clone's history holds it)."""
    try:
        tar = subprocess.run(["git", "archive", "--format=tar", commit, "--", *TREE], cwd=ROOT,
                             capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"cannot read the hot path at {commit} from this clone's history (a shallow clone? "
                           f"`git fetch --unshallow`): {e.stderr.decode().strip()}") from e
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        # The "data" filter where this Python has it (3.11.4+, 3.12): the archive is our own history either way.
        t.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return into


def sidecar_ms(tree: Path, scrapes: int = 40) -> float:
    """The median CPU ms of one sidecar scrape (parse + update) by the code in `tree`, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    got = subprocess.run([sys.executable, "-c", _DRIVER, str(tree), str(DP_RANKS), str(scrapes)], cwd=tree,
                         env=env, capture_output=True, text=True)
    if got.returncode:
        raise RuntimeError(f"the hot path of {tree} did not run: {got.stderr.strip()[-2000:]}")
    return float(got.stdout)


def side_by_side(then: Path, now: Path = ROOT, rounds: int = 3) -> dict[str, float]:
    """The code in `now` against the code in `then`, alternating which goes first each round so that a drift of
    the machine falls on both: the medians of each's ms per scrape and their ratio (`growth`)."""
    times: dict[str, list[float]] = {"then": [], "now": []}
    for r in range(rounds):
        for name in (("then", "now") if r % 2 == 0 else ("now", "then")):
            times[name].append(sidecar_ms(then if name == "then" else now))
    then_ms, now_ms = statistics.median(times["then"]), statistics.median(times["now"])
    return {"then_ms": then_ms, "now_ms": now_ms, "growth": now_ms / then_ms}


def against_accepted(rounds: int = 3) -> dict[str, Any]:
    """The working tree's hot path against the accepted commit's, side by side."""
    commit = committed()["commit"]
    with tempfile.TemporaryDirectory(prefix="hot-path-") as d:
        got: dict[str, Any] = side_by_side(tree_at(commit, Path(d)), ROOT, rounds)
    return got | {"commit": commit}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hot_path", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"record HEAD as the accepted commit in {FIGURE.name}")
    ap.add_argument("--accept", metavar="REASON", help="with --write: record a growth over the limit, for this reason")
    args = ap.parse_args(argv)
    ab = against_accepted()
    print(f"against the accepted {ab['commit']}: {ab['now_ms']:.2f} ms a scrape now, {ab['then_ms']:.2f} ms then, "
          f"{ab['growth']:.2f}x (limit {LIMIT}x)")
    if args.write and ab["growth"] > LIMIT and not args.accept:
        print(f"not written: the hot path grew {ab['growth']:.2f}x since {ab['commit']}; find what made every scrape "
              "read or do more (`python -m bench --only parse`), or say why it must with --accept REASON")
        return 1
    # The figure the suite compares with: the median of three measurements, so that one noisy sitting (a client
    # parse slowed by other load) does not commit a ratio the suite's own measurement then drifts 1.4x from.
    got = sorted((measure(rounds=9) for _ in range(3 if args.write else 1)), key=lambda g: g["ratio"])[
        1 if args.write else 0]
    print(f"sidecar parse + update {got['sidecar_ms']:.2f} ms, prometheus_client {got['prometheus_client_ms']:.1f} ms,"
          f" ratio {got['ratio']:.5f}")
    if args.write:
        record = {"ratio": round(got["ratio"], 6), "sidecar_ms": round(got["sidecar_ms"], 3),
                  "prometheus_client_ms": round(got["prometheus_client_ms"], 1),
                  "commit": provenance.commit_of(provenance.MEASURES["hot_path"]),
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "exposition": f"tests/fixtures/real/sglang_0.5.23_server_metrics.txt x {DP_RANKS} DP ranks",
                  "growth_since_previous": round(ab["growth"], 3), "previous": ab["commit"]}
        if args.accept:
            record["accepted_growth"] = args.accept
        FIGURE.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {FIGURE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
