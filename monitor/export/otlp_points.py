"""StatusResponse (and extra Prometheus families) -> OTLP points, derived from the Prometheus families.

The OTLP export must not be a second definition of the sidecar's series: every point here is a
sample of `families_from_status` (or of the accelerator families), with the *same* name and the
Prometheus labels as attributes. An OpenTelemetry collector's Prometheus (or remote-write)
exporter then writes back exactly the series the sidecar's `/metrics` has.

Units follow one rule: a unit is set only when the name already ends with the unit's Prometheus
suffix (`_seconds` -> "s", `_ratio` -> "1", `_bytes` -> "By", ...). The OTLP -> Prometheus
translator appends a suffix for the unit when the name lacks it, and for unit "1" it *moves* a
`ratio` token to the end, so `..._good_ratio_lower_bound` with unit "1" would come back as
`..._good_lower_bound_ratio`. Names without such a suffix (counts, flags, `_sum` of a summary,
`_per_second` rates) get no unit. Prometheus 3's own OTLP receiver stores every name unchanged under
each of its translation strategies (tests/export/test_otlp_prometheus3.py, docs/prometheus3.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import Metric

from monitor.export.prometheus import families_from_status
from monitor.status_model import StatusResponse

Kind = Literal["gauge", "counter"]

# Prometheus base-unit suffix -> UCUM unit understood by the OTLP -> Prometheus translator.
UNIT_SUFFIXES: dict[str, str] = {
    "_seconds": "s",
    "_ratio": "1",
    "_bytes": "By",
    "_celsius": "Cel",
    "_watts": "W",
}


@dataclass(frozen=True)
class OtlpPoint:
    name: str
    unit: str
    kind: Kind
    description: str
    attributes: tuple[tuple[str, str], ...]
    value: float

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.attributes)


def unit_for(name: str) -> str:
    for suffix, unit in UNIT_SUFFIXES.items():
        if name.endswith(suffix):
            return unit
    return ""


def _kind(family: Metric, sample_name: str) -> Kind:
    # Only true counters are monotonic sums. A summary's `_count`/`_sum` here cover a sliding
    # window (they go down), so they are gauges, as are its quantiles.
    if family.type == "counter" and sample_name.endswith("_total"):
        return "counter"
    return "gauge"


def points_from_families(families: Iterable[Metric]) -> list[OtlpPoint]:
    """One point per sample; `_created` samples and non-finite values are left out."""
    points: list[OtlpPoint] = []
    for family in families:
        for sample in family.samples:
            if sample.name.endswith("_created") or not math.isfinite(sample.value):
                continue
            points.append(OtlpPoint(
                name=sample.name, unit=unit_for(sample.name), kind=_kind(family, sample.name),
                description=family.documentation, attributes=tuple(sorted(sample.labels.items())),
                value=float(sample.value),
            ))
    return points


def points_from_status(status: StatusResponse, extra: Iterable[Metric] = ()) -> list[OtlpPoint]:
    """The sidecar's SLO series for `status`, then `extra` (accelerator families), as OTLP points."""
    return points_from_families([*families_from_status(status), *extra])
