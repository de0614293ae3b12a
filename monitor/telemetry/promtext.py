"""Prometheus text exposition -> flat samples, for the exporter collectors."""

from __future__ import annotations

import math
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families


class ExpositionError(ValueError):
    """A body that is not Prometheus text format."""


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


def samples(text: str) -> list[Sample]:
    """Every sample with a finite value. Lines that are only `...` (documentation elisions, as in
    Huawei's npu-exporter example) are dropped first."""
    body = "\n".join(ln for ln in text.splitlines() if ln.strip() != "...")
    try:
        out = [Sample(s.name, dict(s.labels), float(s.value))
               for fam in text_string_to_metric_families(body) for s in fam.samples]
    except (ValueError, TypeError, IndexError) as err:
        raise ExpositionError(f"not Prometheus text format: {err}") from None
    return [s for s in out if math.isfinite(s.value)]
