from __future__ import annotations

import json

import pytest

from monitor.requestlog.records import RecordError, evaluate, parse_line, parse_record, request_tpot
from tests.requestlog.conftest import rec


def test_tpot_is_bench_serving_formula_excluding_first_token():
    r = parse_record(rec("a", 100.0, ttft=0.5, e2e=2.5, tokens=41))
    assert r.tpot == pytest.approx(2.0 / 40)
    assert r.ttft == 0.5 and r.e2e == 2.5 and r.finished_ts == 100.0 and r.success


def test_tpot_is_zero_for_one_token_and_met():
    r = parse_record(rec("a", 100.0, ttft=0.5, e2e=0.5, tokens=1))
    assert r.tpot == 0.0
    assert evaluate(r, {"ttft": 1.0, "tpot": 0.001}).good


def test_decode_throughput_only_as_fallback():
    assert request_tpot(None, 0.5, 11, 20.0) == pytest.approx(0.05)
    assert request_tpot(2.5, 0.5, 11, 1.0) == pytest.approx(0.2)  # formula wins over throughput


def test_abort_is_failed_and_not_judged_on_latency():
    v = evaluate(parse_record(rec("a", 1.0, finish="abort", ttft=None)), {"ttft": 1.0})
    assert not v.good and v.missed == {"failed"}
    assert v.sli_good["ttft"] is None  # SGLang's TTFT histogram skips aborts


def test_request_missing_several_slos():
    v = evaluate(parse_record(rec("a", 1.0, ttft=3.0, e2e=10.0, tokens=11)), {"ttft": 1.0, "tpot": 0.1, "e2e": 5})
    assert v.missed == {"ttft", "tpot", "e2e"} and not v.good


def test_finish_time_falls_back_to_received_plus_e2e():
    obj = rec("a", 50.0, e2e=2.0)
    del obj["request_finished_ts"], obj["response_sent_to_client_ts"]
    assert parse_record(obj).finished_ts == 50.0


@pytest.mark.parametrize("text, what", [
    ("{not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"e2e_latency": 1.0}), "no finish time"),
    (json.dumps({**rec("a", 1.0), "e2e_latency": "slow"}), "e2e_latency"),
])
def test_malformed_lines_say_why(text, what):
    with pytest.raises(RecordError, match=what):
        parse_line(text)


def test_every_request_log_record_is_judged_by_its_measure():
    from monitor.conventions.slis import REQUEST_SLIS, SLI_BY_KEY
    from monitor.requestlog.records import JUDGED, READINGS

    assert tuple(JUDGED) == REQUEST_SLIS
    assert all(JUDGED[k] is READINGS[SLI_BY_KEY[k].measure] for k in REQUEST_SLIS)
    r = parse_record(rec("a", 1.0, ttft=0.5, e2e=2.5, tokens=41))
    assert {k: JUDGED[k].value(r) for k in REQUEST_SLIS} == {"ttft": 0.5, "tpot": pytest.approx(0.05), "e2e": 2.5}


def test_a_measure_the_line_carries_without_a_reading_is_refused_not_a_key_error():
    from monitor.conventions.slis import QUEUE_WAIT
    from monitor.requestlog.records import READINGS, check_readings

    assert parse_record(rec("a", 1.0)).queue_time == 0.01 and READINGS[QUEUE_WAIT].value(parse_record(rec("a", 1.0)))
    without = {m: r for m, r in READINGS.items() if m != QUEUE_WAIT}
    with pytest.raises(ValueError, match="no reading in monitor/requestlog/records.py READINGS for the measure"
                                         "\\(s\\) queue_time"):
        check_readings(without)


def test_a_bad_value_in_a_field_no_judged_sli_reads_loses_nothing():
    """queue_time is parsed (the queue-wait measure reads it) but no request-log SLI judges it today: a bad value
    there leaves the field out instead of dropping the line from goodput."""
    from monitor.requestlog.records import JUDGED_FIELDS, parse_line
    assert "queue_time" not in JUDGED_FIELDS
    line = ('{"rid": "a", "request_finished_ts": 100.0, "first_token_latency": 0.5, "e2e_latency": 2.0, '
            '"completion_tokens": 10, "finish_reason": {"type": "stop"}, "queue_time": "soon"}')
    rec = parse_line(line)
    assert rec.queue_time is None and rec.e2e == 2.0
