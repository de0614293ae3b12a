"""Ascend MindCluster npu-exporter (`http://<node>:8082/metrics`, `npu_chip_info_*` gauges).

One chip per `id` label, which is the chip *physical* id (it becomes `device`; `chip` is "0").
The exporter writes -1 when a DCMI/hccn_tool read failed, so every negative value is "missing".
Health is 1 healthy / 0 unhealthy / -1 unknown: unhealthy (DCMI health != 0) has no grade, so it
maps to `unhealthy` at level 2 (alarm).
"""

from __future__ import annotations

from collections import defaultdict

from monitor.conventions.names import NPU_EXPORTER_PREFIX
from monitor.telemetry.exposition import exporter_samples
from monitor.telemetry.model import MIB, UNHEALTHY, UNKNOWN, Process, Reading, memory_pair, ratio_from_percent

P = NPU_EXPORTER_PREFIX
ERROR_CODE_FAMILIES = (f"{P}error_code", *(f"{P}error_code_{i}" for i in range(1, 10)))


def _ok(value: float | None) -> float | None:
    return None if value is None or value < 0 else value


def _chip(cid: str, v: dict[str, float], meta: dict[str, str], procs: list[Process] | None, node: str) -> Reading:
    hbm_total, hbm_used = _ok(v.get(f"{P}hbm_total_memory")), _ok(v.get(f"{P}hbm_used_memory"))
    ddr_total, ddr_used = _ok(v.get(f"{P}total_memory")), _ok(v.get(f"{P}used_memory"))
    used, total, kind = memory_pair(hbm_used, hbm_total, ddr_used, ddr_total)
    status = v.get(f"{P}health_status")
    health, label = (0, "ok") if status == 1 else (UNHEALTHY[1], UNHEALTHY[0]) if status == 0 else (None, UNKNOWN)
    ecc = {kind_: int(x) for kind_, key in (("correctable", "single"), ("uncorrectable", "double"))
           if (x := _ok(v.get(f"{P}hbm_ecc_{key}_bit_error_cnt"))) is not None}
    link = v.get(f"{P}link_status")
    codes = tuple(f"{int(x):08X}" for f in ERROR_CODE_FAMILIES if (x := _ok(v.get(f))))
    util = _ok(v.get(f"{P}utilization"))
    if util is None:
        util = _ok(v.get(f"{P}overall_utilization"))
    if procs is None and v.get(f"{P}process_info_num") == 0:
        procs = []
    return Reading(
        node=node, device=cid, chip="0", vendor="huawei",
        model=meta.get("model_name") or meta.get("name") or "unknown",
        utilization_ratio=ratio_from_percent(util),
        memory_used_bytes=int(used * MIB) if used is not None else None,
        memory_total_bytes=int(total * MIB) if total is not None else None,
        memory_kind=kind,  # type: ignore[arg-type]
        temperature_celsius=_ok(v.get(f"{P}temperature")),
        power_watts=_ok(v.get(f"{P}power")),
        health=health, health_label=label, ecc_errors=ecc,
        links={"roce": link == 1} if link is not None and link >= 0 else {},
        processes=tuple(procs) if procs is not None else None,
        error_codes=codes,
        bus_id=meta.get("pcie_bus_info") or None,
        uuid=meta.get("vdie_id") or None,
        phy_id=cid,
    )


def parse_npu_exporter(text: str, node: str) -> list[Reading]:
    values: dict[str, dict[str, float]] = defaultdict(dict)
    meta: dict[str, dict[str, str]] = {}
    procs: dict[str, list[Process]] = {}
    for s in exporter_samples(text):
        cid = s.labels.get("id")
        if cid is None or not s.name.startswith(P):
            continue  # machine_* counts, container_* and vnpu_* series are not per chip
        meta.setdefault(cid, {}).update({k: x for k, x in s.labels.items() if x})
        if s.name == f"{P}process_info" and "process_id" in s.labels:
            mb = _ok(s.value)
            procs.setdefault(cid, []).append(Process(
                pid=int(s.labels["process_id"]), memory_bytes=int(mb * MIB) if mb is not None else None))
        else:
            values[cid][s.name] = s.value
    ids = sorted(set(values) | set(procs), key=lambda c: (len(c), c))
    return [_chip(c, values.get(c, {}), meta.get(c, {}), procs.get(c), node) for c in ids]
