"""The SLI records against what SGLang 0.5.23 itself exposes (tests/fixtures/real: its own collectors'
output): every record's family is a histogram there, with the record's default edges."""

from __future__ import annotations

import pytest

from monitor.conventions.slis import SLI_BY_KEY, SLI_RECORDS
from monitor.conventions.units import format_le
from tests.conftest import REAL_TEXT


def histogram_edges(text: str, family: str) -> list[tuple[str, ...]]:
    """The finite `le` edges of every series of `family`, one tuple per series, in page order."""
    series: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith(family + "_bucket{"):
            continue
        labels = line[line.index("{") + 1:line.rindex("}")]
        pairs = dict(p.split("=", 1) for p in labels.split(","))
        le = pairs.pop("le").strip('"')
        if le != "+Inf":
            series.setdefault(",".join(f"{k}={v}" for k, v in sorted(pairs.items())), []).append(le)
    return [tuple(v) for v in series.values()]


@pytest.mark.parametrize("sli", SLI_RECORDS, ids=lambda s: s.key)
def test_every_record_is_a_histogram_of_sglang_with_its_default_edges(sli):
    text = REAL_TEXT.read_text()
    assert f"# TYPE {sli.family} histogram" in text
    found = histogram_edges(text, sli.family)
    assert found, sli.family
    want = tuple(format_le(b) for b in sli.buckets)
    assert all(edges == want for edges in found), (sli.key, found[0], want)


def test_a_record_with_a_launch_flag_names_one_sglang_spells():
    # SGLang 0.5.23's server_args: the three histogram bucket flags; queue time has fixed edges.
    assert {s.bucket_flag for s in SLI_RECORDS} == {"--bucket-time-to-first-token", "--bucket-inter-token-latency",
                                                    "--bucket-e2e-request-latency", None}
    assert SLI_BY_KEY["queue_time"].bucket_flag is None


def _planted(old: str, new: str) -> None:
    """Import conventions/slis.py's source again with one edit: what a maintainer's mistake would be."""
    import sys
    import types
    from pathlib import Path

    import monitor.conventions.slis as slis

    src = Path(slis.__file__).read_text()
    assert old in src, old
    module = types.ModuleType("planted_slis")
    sys.modules[module.__name__] = module  # dataclasses look their module up while the class is built
    try:
        exec(compile(src.replace(old, new, 1), "planted_slis.py", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]


def test_a_second_record_on_one_family_is_refused_at_import():
    import pytest

    with pytest.raises(ValueError, match="family 'sglang:e2e_request_latency_seconds' is in two SLI records"):
        _planted("SLI(QUEUE_TIME_SLI, QUEUE_TIME,", "SLI(QUEUE_TIME_SLI, E2E_FAMILY,")
    _planted("SLI(QUEUE_TIME_SLI, QUEUE_TIME,", "SLI(QUEUE_TIME_SLI, QUEUE_TIME,")  # the unplanted source imports


def test_a_family_spelled_outside_names_a_duplicate_key_or_inconsistent_buckets_are_refused():
    import dataclasses

    import pytest

    from monitor.conventions.slis import SLI_BY_KEY, SLI_RECORDS, check_records

    itl = SLI_BY_KEY["itl"]
    with pytest.raises(ValueError, match="not spelled in conventions/names.py"):
        check_records((*SLI_RECORDS, dataclasses.replace(itl, key="itl2", family="sglang:itl_by_hand_seconds")))
    with pytest.raises(ValueError, match="key 'itl' is in two SLI records"):
        check_records((*SLI_RECORDS, dataclasses.replace(SLI_BY_KEY["ttft"], key="itl")))
    with pytest.raises(ValueError, match="share the launch flag --bucket-inter-token-latency but not their buckets"):
        check_records(tuple(dataclasses.replace(r, buckets=r.buckets[:-1]) if r.key == "itl" else r
                            for r in SLI_RECORDS))
    with pytest.raises(ValueError, match="not strictly increasing"):
        check_records(tuple(dataclasses.replace(r, buckets=(1.0, 0.5)) if r.key == "queue_time" else r
                            for r in SLI_RECORDS))


def test_every_record_has_the_kind_of_its_measure():
    from monitor.conventions.slis import KIND_COUNTS, MEASURES, PER_REQUEST, PER_TOKEN, REQUEST_SLIS

    assert {s.key: s.kind for s in SLI_RECORDS} == {"ttft": PER_REQUEST, "tpot": PER_REQUEST, "itl": PER_TOKEN,
                                                   "e2e": PER_REQUEST, "queue_time": PER_REQUEST}
    assert all(s.measure in MEASURES and s.counts == KIND_COUNTS[s.kind] for s in SLI_RECORDS)
    # What the request log judges: per-request records whose measure a line carries, and marked so.
    assert all(SLI_BY_KEY[k].kind == PER_REQUEST and SLI_BY_KEY[k].measure.log_fields for k in REQUEST_SLIS)


def test_a_record_the_request_log_or_a_prefill_server_cannot_have_is_refused():
    import dataclasses

    from monitor.conventions.slis import SLI_BY_KEY, SLI_RECORDS, check_records

    def with_(key: str, **changes: object) -> tuple:
        return tuple(dataclasses.replace(r, **changes) if r.key == key else r for r in SLI_RECORDS)

    # ITL is per token: a request-log line has no per-token intervals, and one request no single verdict.
    with pytest.raises(ValueError, match="itl: request_log=True but .* cannot judge its measure "
                                         "'inter_token_latency' \\(per token"):
        check_records(with_("itl", request_log=True))
    # Queue time is on the line (`queue_time`): it could be judged (today it is not part of goodput).
    check_records(with_("queue_time", request_log=True))
    with pytest.raises(ValueError, match="a per-token SLI counts 'output tokens', not 'requests'"):
        check_records(with_("itl", counts="requests"))
    with pytest.raises(ValueError, match="prefill_records=True but a PD prefill server does not observe"):
        check_records(with_("ttft", prefill_records=True))
    unknown = dataclasses.replace(SLI_BY_KEY["ttft"].measure, name="made_up")
    with pytest.raises(ValueError, match="measure 'made_up' is not one of"):
        check_records(with_("ttft", measure=unknown))
