"""npu-exporter / dcgm-exporter text through the project's one exposition parser (`monitor.parse`).

The collectors want every sample of a small exposition as name -> labels mapping -> value; values that
are not finite are no reading (the exporters write NaN where a read failed), so they are left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

from monitor.parse.exposition import parse


class ExporterSample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


def exporter_samples(text: str) -> Iterator[ExporterSample]:
    """Every finite sample; raises `monitor.parse.exposition.ParseError` on text that is not an exposition."""
    for s in parse(text).selected:
        if math.isfinite(s.value):
            yield ExporterSample(s.name, dict(s.labels), s.value)
