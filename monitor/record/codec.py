"""JSON encoding of engine state (histograms, snapshots, accumulators). JSON has no Infinity: +Inf
edges are written as the string "+Inf".

A book is keyed by target id, which holds the target's URL: it is written redacted (no password,
no token in the file) and mapped back to the configured target on reading (`book_from(ids=...)`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from monitor.redaction import redact_str
from monitor.slo.accumulate import HistAccumulator, ScalarAccumulator, SeriesBook
from monitor.slo.histogram import Hist
from monitor.slo.windows import Snapshot


def _edge(e: float) -> float | str:
    return "+Inf" if e == math.inf else e


def _unedge(e: float | str) -> float:
    return math.inf if e == "+Inf" else float(e)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def hist_to(h: Hist) -> list[Any]:
    return [[_edge(e) for e in h.edges], list(h.cumulative), _num(h.sum), h.count]


def hist_from(data: list[Any]) -> Hist:
    edges, cum, total, count = data
    return Hist(tuple(_unedge(e) for e in edges), tuple(float(c) for c in cum),
                math.nan if total is None else float(total), float(count))


def snapshot_to(s: Snapshot) -> dict[str, Any]:
    return {"ts": s.ts, "hists": {k: hist_to(h) for k, h in s.hists.items()}, "counters": s.counters}


def snapshot_from(data: dict[str, Any]) -> Snapshot:
    return Snapshot(float(data["ts"]), {k: hist_from(v) for k, v in data["hists"].items()},
                    {k: float(v) for k, v in data["counters"].items()})


def _key_to(key: tuple) -> list[Any]:
    tid, family, labels = key
    return [redact_str(tid), family, [list(p) for p in labels]]


def id_mapper(ids: Iterable[str]) -> dict[str, str]:
    """Recorded (redacted) target id -> the configured one. Two targets whose ids differ only in a
    secret would read as one; the first configured wins."""
    out: dict[str, str] = {}
    for tid in ids:
        out.setdefault(redact_str(tid), tid)
    return out


def _real_id(tid: str, ids: dict[str, str]) -> str:
    if tid in ids:
        return ids[tid]
    head, sep, worker = tid.partition(" worker ")  # a gateway's worker: "<target id> worker <address>"
    return f"{ids[head]}{sep}{worker}" if sep and head in ids else tid


def _key_from(data: list[Any], ids: dict[str, str]) -> tuple:
    tid, family, labels = data
    return (_real_id(tid, ids), family, tuple((k, v) for k, v in labels))


def book_to(book: SeriesBook) -> dict[str, Any]:
    hists = []
    for key, acc in book.hists.items():
        if acc.last_raw is None:
            continue
        hists.append([_key_to(key), hist_to(acc.last_raw), hist_to(acc.offset) if acc.offset else None, acc.resets,
                      acc.seen])
    scalars = [[_key_to(key), acc.last_raw, acc.offset, acc.resets, acc.seen]
               for key, acc in book.scalars.items() if acc.last_raw is not None]
    return {"hists": hists, "scalars": scalars,
            "retired_hists": {f: hist_to(h) for f, h in book.retired_hists.items()},
            "retired_scalars": book.retired_scalars}


def book_from(data: dict[str, Any], ids: Iterable[str] = ()) -> SeriesBook:
    """`ids`: the deployment's configured target ids, to map redacted keys back to. Also reads books
    recorded before series expiry (no `seen`, no retired totals) and before redaction (ids in clear)."""
    book = SeriesBook()
    known = id_mapper(ids)
    for key, raw, offset, resets, *seen in data.get("hists", []):
        book.hists[_key_from(key, known)] = HistAccumulator(hist_from(raw), hist_from(offset) if offset else None, resets,
                                                     float(seen[0]) if seen else 0.0)
    for key, raw, offset, resets, *seen in data.get("scalars", []):
        book.scalars[_key_from(key, known)] = ScalarAccumulator(raw, offset, resets, float(seen[0]) if seen else 0.0)
    book.retired_hists = {f: hist_from(h) for f, h in data.get("retired_hists", {}).items()}
    book.retired_scalars = {f: float(v) for f, v in data.get("retired_scalars", {}).items()}
    return book
