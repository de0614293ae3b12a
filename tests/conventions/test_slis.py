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
