"""`parse` as a job for another process: plain values across the pipe, errors as values.

A worker process receives the body and the parse arguments and sends back plain tuples: pickling a
list of NamedTuples costs ~6x more than the same values as tuples, and exceptions with their own
constructor arguments (ParseError) do not survive pickling, so they travel as (kind, message).
"""

from __future__ import annotations

from typing import Any

from monitor.parse.exposition import Dated, Exposition, LimitExceeded, Limits, ParseError, Sample, parse

Wire = tuple[str, Any]


def parse_job(body: bytes, wanted: frozenset[str] | None, content_type: str, count_families: bool,
              limits: Limits) -> Wire:
    """Run in the worker: ("ok", exposition as tuples) or ("parse" | "limit", message)."""
    try:
        e = parse(body, wanted, content_type=content_type, count_families=count_families, limits=limits)
    except ParseError as err:
        return "parse", (err.line, str(err))
    except LimitExceeded as err:
        return "limit", str(err)
    dated = None if e.dated is None else tuple(e.dated)
    return "ok", (e.format, e.families, e.samples, e.types, [tuple(s) for s in e.selected], dated)


def from_wire(result: Wire) -> Exposition:
    """Back in the sidecar: the exposition, or the error the worker met, raised here."""
    kind, value = result
    if kind == "parse":
        line, message = value
        err = ParseError(line, "")
        err.args = (message,)
        raise err
    if kind == "limit":
        raise LimitExceeded(value)
    fmt, families, samples, types, selected, dated = value
    return Exposition(fmt, families, samples, types, [Sample(*s) for s in selected],
                      None if dated is None else Dated(*dated))
