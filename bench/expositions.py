"""Large SGLang expositions to benchmark on: the real fixture scaled over scheduler ranks, and the emulator's.

SGLang's scheduler families are emitted once per scheduler process, labelled with its ranks (and its
pid); `--enable-metrics-for-all-schedulers` makes every TP rank emit, not only attention-TP rank 0.
Scaling the fixture therefore means repeating each scheduler-labelled series (`tp_rank="0"` in the
fixture) once per (dp_rank, tp_rank), which is what a larger server serves.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real" / "sglang_0.5.23_server_metrics.txt"
_PID_RE = re.compile(r'pid="(\d+)"')


class Exposition(NamedTuple):
    name: str
    text: str
    origin: str  # how it was made, for the results table

    @property
    def samples(self) -> int:
        return sum(1 for line in self.text.split("\n") if line and not line.startswith("#"))

    @property
    def size_bytes(self) -> int:
        return len(self.text.encode())


def fixture_text() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def _relabel(line: str, dp: int, tp: int, index: int, with_dp: bool) -> str:
    line = line.replace('tp_rank="0"', f'tp_rank="{tp}"')
    line = _PID_RE.sub(lambda m: f'pid="{int(m.group(1)) + index}"', line)  # one process per scheduler
    if with_dp:  # label names are sorted in SGLang's output: dp_rank comes first
        line = line.replace("{", f'{{dp_rank="{dp}",', 1)
    return line


def replicate(text: str, dp_ranks: int, tp_ranks: int = 1) -> str:
    """The fixture as a server with dp_ranks x tp_ranks emitting schedulers would serve it.

    Consecutive scheduler lines (one family's series) are repeated as a block per rank, so each
    series stays contiguous, as prometheus_client's MultiProcessCollector writes it.
    """
    out: list[str] = []
    block: list[str] = []
    ranks = [(d, t) for d in range(dp_ranks) for t in range(tp_ranks)]

    def flush() -> None:
        for index, (d, t) in enumerate(ranks):
            out.extend(_relabel(line, d, t, index, dp_ranks > 1) for line in block)
        block.clear()

    for line in text.split("\n"):
        if 'tp_rank="0"' in line and not line.startswith("#"):
            block.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def emulated_text(dp_ranks: int, seconds: float = 600.0) -> str:
    """A DP-attention server (tp = dp, attention-TP size 1: every TP rank is a scheduler that emits)
    after `seconds` of emulated traffic, rendered by the emulator as SGLang renders it."""
    from monitor.config import parse_config
    from monitor.emulate.engine import EmulatedDeployment
    from monitor.emulate.exposition import render_server

    cfg = parse_config({"deployments": [{
        "name": "bench", "model": "bench/model", "tpot_target_seconds": 0.1, "ttft_target_seconds": 2.0,
        "input_tokens": 2000, "output_tokens": 300,
        "launch": {"tp_size": dp_ranks, "dp_size": dp_ranks, "enable_dp_attention": dp_ranks > 1},
    }]})
    dep = EmulatedDeployment(cfg.deployments[0], seed=1)
    dep.advance(seconds)
    body, _ = render_server(dep, dep.servers[0], None, None)
    return body.decode()


def catalogue(quick: bool) -> list[Exposition]:
    """The expositions of the parse benchmark, smallest first."""
    base = fixture_text()
    if quick:
        return [
            Exposition("fixture, 1 scheduler", base, "real SGLang 0.5.23 output"),
            Exposition("fixture x 4 DP", replicate(base, 4), "fixture replicated"),
            Exposition("emulator, 4 DP-attn ranks", emulated_text(4, 60.0), "monitor.emulate"),
        ]
    return [
        Exposition("fixture, 1 scheduler", base, "real SGLang 0.5.23 output"),
        Exposition("fixture x 32 DP (anchor)", replicate(base, 32), "fixture replicated (anchor recipe)"),
        Exposition("emulator, 32 DP-attn ranks", emulated_text(32), "monitor.emulate, tp=dp=32"),
        Exposition("fixture 8 DP x 8 TP, all sched.", replicate(base, 8, 8), "fixture replicated"),
    ]
