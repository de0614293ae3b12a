"""`python -m tools.victoriametrics` (`make victoriametrics`): run the sharded fleet on VictoriaMetrics beside
Prometheus 3 (tools/victoriametrics/fleet.py), inject a TPOT incident, compare every recording and the alerts'
firing times, run the faults, and write docs/victoriametrics.md."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tools.victoriametrics import faults
from tools.victoriametrics.compare import _alert_key, compare
from tools.victoriametrics.fleet import COMPARED, Fleet, wait_until
from tools.victoriametrics.report import DOC, ROOT, render

N = 30
INCIDENT_SECONDS = 60.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.victoriametrics", description=__doc__)
    p.add_argument("--deployments", type=int, default=N)
    args = p.parse_args(argv)
    began = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="vmfleet-"))
    fleet = Fleet(tmp, args.deployments).start()
    try:
        wait_until(lambda: len(fleet.query("vm", 'slo_monitor:sli_total:rate5m{sli="tpot"} > 0')) == args.deployments,
                   180, what="the TPOT SLI of every deployment on VictoriaMetrics")
        t_start = time.time()
        time.sleep(90)  # healthy: the 30m (60 s) window covered before the incident
        dep = COMPARED[0]
        print(f"victoriametrics: incident on {dep} ...", file=sys.stderr, flush=True)
        t_inc = fleet.incident(dep, "tpot_regression", factor=faults.INCIDENT_FACTOR)
        time.sleep(INCIDENT_SECONDS)
        t_clear = fleet.clear()
        time.sleep(40)
        comparison = compare(fleet, dep, t_start, time.time() - 10)
        pages: dict[str, float] = {}
        for t, alert in fleet.pages(t_inc):
            pages.setdefault(_alert_key(alert["labels"]["alertname"], alert["labels"]), t)
        faults.settle(fleet, dep)
        print("victoriametrics: faults ...", file=sys.stderr, flush=True)
        taken = {dep}
        results = [faults.vm_restart(fleet, "mixed-006", kill=False), faults.vm_restart(fleet, "mixed-008", kill=True)]
        taken |= {"mixed-006", "mixed-008"}
        shard_dep = next(d.name for d in fleet.config.deployments if d.name not in taken and d.name.startswith("mixed"))
        results.append(faults.sidecar_restart(fleet, shard_dep))
        taken.add(shard_dep)
        moved = next(d for d in faults.scraped_by(fleet, 1) if d not in taken and d.startswith("mixed"))
        results.append(faults.vmagent_takeover(fleet, moved))
    finally:
        fleet.close()
        fleet.keep_logs(ROOT / "var" / "vmfleet-logs")
    text = render(comparison, t_inc, t_clear, pages, results, args.deployments, time.monotonic() - began)
    DOC.write_text(text)
    print(f"{DOC.relative_to(ROOT)} written ({time.monotonic() - began:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
