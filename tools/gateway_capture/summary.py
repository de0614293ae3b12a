"""Print measurements.json as one line per probe: what the client and the worker saw, what each gateway
family recorded (docs/gateways.md quotes these lines).

    .venv/bin/python -m tools.gateway_capture.summary [tests/fixtures/gateway/measurements.json]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from tools.gateway_capture.capture import ROOT

OBSERVED = ("smg_router_request_duration_seconds", "smg_http_request_duration_seconds", "smg_pd_ttft_seconds",
            "smg_pd_prefill_duration_seconds", "smg_pd_decode_ttft_seconds", "smg_pd_kv_transfer_duration_seconds")


def _label(key: str, name: str) -> str:
    m = re.search(name + r'="([^"]*)"', key)
    return m.group(1) if m else ""


def _counted(changes: dict[str, float], family: str, *labels: str) -> list[str]:
    return [":".join(_label(k, n) for n in labels) + f"+{v:g}" for k, v in changes.items()
            if k.startswith(family + "{")]


def probe_line(p: dict[str, Any]) -> str:
    c, ch = p["client"], p["changes"]
    obs = []
    for fam in OBSERVED:
        total = sum(v for k, v in ch.items() if k.startswith(fam + "_sum{"))
        n = sum(v for k, v in ch.items() if k.startswith(fam + "_count{"))
        if n:
            obs.append(f"{fam.removeprefix('smg_').removesuffix('_seconds')}={total:.3f}s/{n:g}")
    work = [w for w in p["workers"] if w["role"] in ("decode", "server")]
    w = f" worker(head {work[0]['head']} first {work[0]['first_token']} end {work[0]['end']})" if work else ""
    return (f"{p['name']:28s} client {c.get('status')} head {c.get('head')} first {c.get('first_data')} "
            f"end {c.get('end')}{w} | {' '.join(obs)} | responses {_counted(ch, 'smg_http_responses_total', 'status_code', 'error_code')} "
            f"errors {_counted(ch, 'smg_router_request_errors_total', 'error_type')}")


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "gateway" / "measurements.json"
    for key, run in json.loads(path.read_text()).items():
        print(f"== {key} (/engine_metrics: HTTP {run.get('engine_metrics_status')})")
        for p in run["probes"]:
            print("  " + probe_line(p))
            for m in p["client"].get("mid") or []:
                moved = sorted({k.split("{")[0] + (f"[{_label(k, 'status_code')}]" if "responses" in k else "")
                                for k in m["changes"] if k.split("{")[0].endswith(("_count", "_total"))})
                print(f"      scraped {m['at_seconds_after_head']} s after the head: moved {moved}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
