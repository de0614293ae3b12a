"""Build SGLang-shaped expositions from raw observations (independent of the emulator)."""

from __future__ import annotations

import bisect

from monitor.conventions.slis import DEFAULT_BUCKETS, SLI_FAMILIES
from monitor.conventions.units import format_le


def histogram_lines(family: str, edges, observations, labels: str) -> list[str]:
    counts = [0] * (len(edges) + 1)
    for v in observations:
        counts[bisect.bisect_left(edges, v)] += 1
    lines, cum = [], 0
    for edge, c in zip([*edges, float("inf")], counts):
        cum += c
        lines.append(f'{family}_bucket{{{labels},le="{format_le(edge)}"}} {float(cum)}')
    lines.append(f"{family}_sum{{{labels}}} {float(sum(observations))}")
    lines.append(f"{family}_count{{{labels}}} {float(len(observations))}")
    return lines


def exposition(tpot=(), ttft=(), *, engine="unified", running=None, dp_ranks=1, tp_ranks=1,
               edges_tpot=None, requests=None) -> str:
    base = f'engine_type="{engine}",is_streaming="true",model_name="m"'
    lines = [f"# TYPE {SLI_FAMILIES['tpot']} histogram"]
    lines += histogram_lines(SLI_FAMILIES["tpot"], list(edges_tpot or DEFAULT_BUCKETS["tpot"]), list(tpot), base)
    lines += histogram_lines(SLI_FAMILIES["ttft"], list(DEFAULT_BUCKETS["ttft"]), list(ttft), base)
    if requests is not None:
        lines.append(f"sglang:num_requests_total{{{base}}} {float(requests)}")
    if running is not None:
        for dp in range(dp_ranks):
            for tp in range(tp_ranks):
                dpl = f',dp_rank="{dp}"' if dp_ranks > 1 else ""
                lines.append(f'sglang:num_running_reqs{{engine_type="{engine}",model_name="m",moe_ep_rank="0",'
                             f'pp_rank="0",tp_rank="{tp}"{dpl}}} {float(running)}')
    return "\n".join(lines) + "\n"
