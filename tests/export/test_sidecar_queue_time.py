"""The queue-time SLI end to end: an emulated PD pair, the sidecar's SLI against the emulator's request log."""

from __future__ import annotations

from monitor.config import parse_config
from monitor.emulate.request_log import read_records
from tests.export.lockstep import run_lockstep

TARGET = 0.1  # an edge of SGLang's fixed queue-time buckets


def test_the_queue_time_sli_counts_the_prefill_queue_once_per_request(tmp_path):
    cfg = parse_config({"deployments": [{
        "name": "pd", "mode": "pd-disaggregated", "queue_time_target_seconds": TARGET, "objective": 0.9,
        "input_tokens": 2000, "output_tokens": 32, "launch": {"prefill": {"max_running_requests": 2}},
        "targets": [{"role": "prefill", "url": "http://127.0.0.1:1/metrics"},
                    {"role": "decode", "url": "http://127.0.0.1:2/metrics"}],
    }]})
    logs = tmp_path / "logs"

    text, status = run_lockstep(cfg, logs, seed=5, rates={"pd": 4.0}, steps=60)
    records = list(read_records(logs))
    waits = [r["queue_time"] for r in records]
    assert len(waits) > 300 and any(w > TARGET for w in waits) and any(w <= TARGET for w in waits)
    sli = next(s for s in status.deployments[0].slis if s.sli == "queue_time")
    hour = next(w for w in sli.windows if w.window == "1h")
    truth = sum(w <= TARGET for w in waits) / len(waits)
    # The histogram also holds the requests admitted but not finished at the end (a few of ~1,000).
    assert hour.events is not None and abs(hour.events - len(waits)) <= 0.03 * len(waits)
    assert hour.good_ratio is not None and abs(hour.good_ratio - truth) < 0.02
    assert sli.target_is_bucket_edge and sli.fix_flag is None
    assert 'slo_monitor_sli_good_ratio{deployment="pd",sli="queue_time",window="1h"}' in text
