"""What an emulated server answers on `/metrics`, built and rendered the way SGLang does it.

Counters and histograms are what `observe.Observer` recorded in each process's and rank's store; the
scheduler gauges are read off the ranks' state when scraped (`rank_gauges`): running = requests in
decode, token usage = the KV they hold, gen_throughput = tokens produced over the last few seconds.

SGLang builds a new CollectorRegistry per scrape (MultiProcessCollector) and renders it with
prometheus_client's `choose_encoder(Accept)`; we do the same with a collector that yields the
emulated families, so text 0.0.4 keeps `sglang:` names and OpenMetrics gets prometheus_client's
`sglang_` escaping. Like MultiProcessCollector: label names sorted, histogram samples in the order
`_sum`, buckets, `_count`, no `_created`, lazily created tokenizer children.

It reads a deployment as `ScrapedDeployment` (what a scrape reads of it), not as `engine.EmulatedDeployment`,
which imports this module (`rank_gauges`).
"""

from __future__ import annotations

import gzip
import random
import time
import zlib
from collections.abc import Container, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from monitor.conventions.slis import PREFILL_RECORDED_SLIS, SLI_FAMILIES
from monitor.emulate.catalog import ALL_FAMILIES, Family
from monitor.emulate.state import Histogram, LabelKey

if TYPE_CHECKING:
    from monitor.config import Deployment
    from monitor.emulate.incidents import Effects
    from monitor.emulate.model import LatencyModel
    from monitor.emulate.prefix_cache import KVCache
    from monitor.emulate.sim import RankSim, ServerSim

# Constants of the real fixture's engine (memory sizes, context length): nothing to model.
STATIC_GAUGES: dict[str, float] = {
    "sglang:weight_memory_usage_gb": 15.0,
    "sglang:kv_cache_memory_usage_gb": 48.8,
    "sglang:graph_memory_usage_gb": 0.9,
    "sglang:page_size": 1.0,
    "sglang:context_len": 131072.0,
    "sglang:startup_available_gpu_memory_gb": 78.5,
    "sglang:is_cuda_graph": 1.0,
    "sglang:new_token_ratio": 0.3,
}
STARTUP_SECONDS = {"load_weight": 21.4, "kv_cache_allocation": 3.1, "scheduler_e2e": 48.2,
                   "tokenizer_e2e": 2.7, "decode": 17.9}


class ScrapedDeployment(Protocol):
    """What a scrape reads of a deployment (engine.EmulatedDeployment)."""

    deployment: Deployment  # the NPU exporter's model name and chip ids come from its hardware and name
    now: float
    model: LatencyModel
    servers: list[ServerSim]
    kv: KVCache

    def effects(self, role: str) -> Effects: ...


def rank_gauges(dep: ScrapedDeployment, srv: ServerSim, rank: RankSim) -> dict[str, float]:
    """Scheduler gauges of one rank right now (what its last log_stats would have written)."""
    now, role = dep.now, srv.spec.role
    eff = dep.effects(role)
    kv = dep.kv.usage(rank, eff)
    total, used, evictable = kv.total, kv.used, kv.evictable
    thr = rank.gen_throughput(now) if role != "prefill" else 0.0
    accept = 0.0
    if dep.model.accept_length:  # the batch's mean accepted length now (SGLang: over its last log interval)
        batch = [r.accept for r in rank.decoding if r.accept] or [rank.last_accept]
        accept = sum(eff.accepted(a) for a in batch) / len(batch)
    drafts = dep.model.draft_tokens
    cap = dep.kv.capacity(srv, rank)
    running = len(rank.running) if role == "prefill" else len(rank.decoding)
    return {
        "sglang:num_running_reqs": float(running),
        "sglang:num_queue_reqs": float(len(rank.waiting)),
        "sglang:gen_throughput": thr,
        "sglang:cache_hit_rate": rank.last_hit if role != "decode" else 0.0,
        "sglang:decode_sum_seq_lens": float(int(kv.seq)),
        "sglang:token_usage": kv.usage,
        "sglang:full_token_usage": kv.usage,
        "sglang:num_used_tokens": float(int(used)),
        "sglang:kv_used_tokens": float(int(used)),
        "sglang:kv_available_tokens": float(int(total - used - evictable)),
        "sglang:kv_evictable_tokens": float(int(evictable)),
        "sglang:max_total_num_tokens": float(total),
        "sglang:num_pages": float(total),
        "sglang:spec_accept_length": accept,
        "sglang:spec_accept_rate": (accept - 1) / max(drafts - 1, 1) if accept else 0.0,
        "sglang:spec_num_steps": float(max(drafts - 1, 0)),
        "sglang:spec_num_draft_tokens": float(drafts),
        "sglang:num_prefill_bootstrap_queue_reqs": float(len(rank.bootstrap)),
        "sglang:num_prefill_inflight_queue_reqs": float(len(rank.inflight)),
        "sglang:num_decode_prealloc_queue_reqs": float(len(rank.prealloc)),
        "sglang:num_decode_transfer_queue_reqs": float(len(rank.transfer)),
        "sglang:utilization": min(len(rank.running) / cap, 1.0),
        "sglang:num_retracted_reqs": float(len(rank.retracted)),
    }


def decode_load(dep: ScrapedDeployment) -> float:
    """Busy share of the decode-capable slots (drives accelerator utilisation)."""
    ranks = [r for s in dep.servers if s.spec.role != "prefill" for r in s.ranks]
    return sum(len(r.running) for r in ranks) / max(sum(r.capacity for r in ranks), 1)


def _sorted(labels: dict[str, str]) -> dict[str, str]:
    return dict(sorted(labels.items()))


def _add_histogram(metric: Metric, labels: dict[str, str], hist: Histogram) -> None:
    metric.add_sample(metric.name + "_sum", _sorted(labels), hist.sum)
    for edge, acc in zip((*hist.edges, float("inf")), hist.cumulative()):
        metric.add_sample(metric.name + "_bucket", _sorted({**labels, "le": floatToGoString(edge)}), acc)
    metric.add_sample(metric.name + "_count", _sorted(labels), hist.count)


def _store_samples(metric: Metric, fam: Family, counters: dict[tuple[str, LabelKey], float],
                   histograms: dict[tuple[str, LabelKey], Histogram], match: dict[str, str] | None = None) -> None:
    want = set((match or {}).items())
    if fam.type == "counter":
        for (name, key), value in counters.items():
            if name == fam.name and want <= set(key):
                metric.add_sample(fam.name + "_total", dict(key), value)
    elif fam.type == "histogram":
        for (name, key), hist in histograms.items():
            if name == fam.name and want <= set(key):
                _add_histogram(metric, dict(key), hist)


def _tokenizer(metric: Metric, fam: Family, srv: ServerSim) -> None:
    if fam.type == "gauge":  # startup_time_seconds{phase}: set once at startup
        for extra in fam.extra:
            phase = dict(extra).get("phase", "")
            metric.add_sample(fam.name, _sorted({**srv.base_labels(), **dict(extra)}), STARTUP_SECONDS.get(phase, 1.0))
        return
    _store_samples(metric, fam, srv.store.counters, srv.store.histograms)


def _scheduler(metric: Metric, fam: Family, srv: ServerSim, rank: RankSim, gauges: dict[str, float]) -> None:
    for labels in rank.labels:
        base = {**srv.base_labels(), **labels}
        if fam.type == "gauge":
            value = gauges.get(fam.name, STATIC_GAUGES.get(fam.name, 0.0))
            if fam.name == "sglang:fwd_occupancy":
                value = gauges["sglang:utilization"] * 0.55
            for extra in fam.extra or ((),):
                extra_d = dict(extra)
                v = 0.0 if "gt" in extra_d else value  # routing-key gauge-histograms: no routing keys
                if fam.kind == "pid":
                    extra_d["pid"] = str(srv.pid)
                metric.add_sample(fam.name, _sorted({**base, **extra_d}), v)
        elif fam.type == "counter":
            _store_samples(metric, fam, rank.store.counters, {}, base)
        else:
            before = len(metric.samples)
            _store_samples(metric, fam, {}, rank.store.histograms, base)
            if len(metric.samples) == before:  # created at scheduler start, nothing observed yet
                for extra in fam.extra or ((),):
                    _add_histogram(metric, {**base, **dict(extra)}, Histogram(fam.buckets))


# What SGLang's tokenizer skips on a PD prefill server (it still records E2E and the counters).
_PREFILL_SKIPS = frozenset(f for sli, f in SLI_FAMILIES.items() if sli not in PREFILL_RECORDED_SLIS)


def server_families(dep: ScrapedDeployment, srv: ServerSim, only: Container[str] | None = None) -> list[Metric]:
    """What the server's /metrics holds right now; `only`: just these families (by canonical name)."""
    role = srv.spec.role
    gauges = {id(r): rank_gauges(dep, srv, r) for r in srv.ranks}
    out = []
    for fam in ALL_FAMILIES:
        if role not in fam.roles or (only is not None and fam.name not in only):
            continue
        if role == "prefill" and fam.name in _PREFILL_SKIPS:
            continue  # a PD prefill server never observes them
        metric = Metric(fam.name, fam.help, fam.type)
        if fam.kind == "tok":
            _tokenizer(metric, fam, srv)
        elif fam.kind == "http":
            _store_samples(metric, fam, srv.store.counters, {})
        elif fam.kind == "bare":
            metric.add_sample(fam.name, {}, 0.0)
        else:
            for rank in srv.ranks:
                _scheduler(metric, fam, srv, rank, gauges[id(rank)])
        if metric.samples:  # MultiProcessCollector has no family without a child
            out.append(metric)
    return out


class _Families:
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def render(families: Iterable[Metric], accept: str | None, accept_encoding: str | None = None) -> tuple[bytes, dict[str, str]]:
    """Body and headers for one scrape, negotiated as prometheus_client's ASGI app does."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    encoder, content_type = choose_encoder(accept or "")
    body = encoder(registry)
    headers = {"Content-Type": content_type}
    if "gzip" in (accept_encoding or ""):
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    return body, headers


def render_server(dep: ScrapedDeployment, srv: ServerSim, accept: str | None,
                  accept_encoding: str | None = None) -> tuple[bytes, dict[str, str]]:
    return render(server_families(dep, srv), accept, accept_encoding)


# --- Ascend npu-exporter ------------------------------------------------------------------------
NPU_FAMILIES: tuple[tuple[str, str], ...] = (
    ("npu_chip_info_health_status", "the npu health status, 1 is healthy, 0 is unhealthy, -1 is unknown"),
    ("npu_chip_info_temperature", "the npu temperature, unit is 'centigrade'"),
    ("npu_chip_info_power", "the npu power, unit is 'W'"),
    ("npu_chip_info_utilization", "the ai core utilization"),
    ("npu_chip_info_hbm_total_memory", "the npu hbm total memory, unit is 'MB'"),
    ("npu_chip_info_hbm_used_memory", "the npu hbm used memory, unit is 'MB'"),
)
HBM_TOTAL_MB = 65536.0


def _npu_model_name(hardware: str) -> str:
    h = hardware.lower()
    if "a3" in h:
        return "910C-Ascend-V1"
    if "a2" in h or "910b" in h:
        return "910B-Ascend-V1"
    return "910A-Ascend-V1"


# A chip's healthy temperature and power, after the real A3 capture (tests/fixtures/npu-smi/910_93_info_vllm-ascend-
# issue3548-16chips-load_npusmi25.3.rc1.txt): cards draw 165 W idle and 200 W serving at 8 % AI Core, their chips sit
# at 30-33 degC either way (cooled well, a chip's temperature barely follows its power), and a serving chip holds
# 78-80 % of its HBM (the KV pool is allocated at start-up and does not move with load).
IDLE_WATTS = 165.0
DYNAMIC_WATTS = 220.0  # from idle to every AI Core busy
COOLANT_CELSIUS = 30.0  # what the chips sit at idle, before the per-chip spread
CELSIUS_PER_WATT = 0.02  # +4.4 degC from idle to full load: within the capture's spread at light load
HBM_POOL_SHARE = 0.90  # --mem-fraction-static 0.9: weights and the KV pool, reserved up front
# Each reading's own noise (deterministic per chip and scrape step, so a rerun reads the same): watts, degC, MB.
POWER_NOISE_WATTS, TEMPERATURE_NOISE_CELSIUS, HBM_NOISE_MB = 3.0, 0.4, 24.0
NOISE_STEP_SECONDS = 1.0


def _noise(dep: ScrapedDeployment, chip: int, what: str) -> float:
    """A standard normal draw for this chip, reading and scrape step (not Python's salted str hash)."""
    key = f"{dep.deployment.name}:{chip}:{what}:{int(dep.now // NOISE_STEP_SECONDS)}"
    return random.Random(zlib.crc32(key.encode())).gauss(0.0, 1.0)


def npu_chip_values(dep: ScrapedDeployment, chip: int) -> dict[str, float]:
    eff = dep.effects("decode" if any(s.spec.role == "decode" for s in dep.servers) else "server")
    load = decode_load(dep)
    wobble = ((chip * 7919) % 13) / 13.0  # fixed per-chip spread (cooling, silicon): the capture's 30-33 degC
    power = eff.chip_power(IDLE_WATTS + 10.0 * wobble, DYNAMIC_WATTS * load)
    temp = eff.chip_temperature(COOLANT_CELSIUS + 3.0 * wobble + CELSIUS_PER_WATT * (power - IDLE_WATTS))
    hbm = HBM_TOTAL_MB * HBM_POOL_SHARE  # preallocated: flat with load and with the KV cache's state
    return {
        "npu_chip_info_health_status": 1.0,
        "npu_chip_info_temperature": round(temp + TEMPERATURE_NOISE_CELSIUS * _noise(dep, chip, "t")),
        "npu_chip_info_power": round(power + POWER_NOISE_WATTS * _noise(dep, chip, "p"), 1),
        "npu_chip_info_utilization": round(min(100.0, 15.0 + 80.0 * load)),
        "npu_chip_info_hbm_total_memory": HBM_TOTAL_MB,
        "npu_chip_info_hbm_used_memory": round(min(hbm + HBM_NOISE_MB * _noise(dep, chip, "m"), HBM_TOTAL_MB)),
    }


def render_npu(dep: ScrapedDeployment, chips: int, wall_ms: int | None = None) -> str:
    """npu-exporter text: gauges with explicit millisecond timestamps, the CardLabel label set."""
    ts = int(time.time() * 1000) if wall_ms is None else wall_ms
    model = _npu_model_name(dep.deployment.hardware)
    values = [npu_chip_values(dep, c) for c in range(chips)]
    lines = [
        "# HELP machine_npu_nums Amount of npu installed on the machine.",
        "# TYPE machine_npu_nums gauge",
        f"machine_npu_nums {chips}",
    ]
    for name, help_text in NPU_FAMILIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for chip in range(chips):
            labels = (f'container_name="",id="{chip}",model_name="{model}",namespace="",'
                      f'pcie_bus_info="0000:{0x3D + chip * 0x19 & 0xFF:02X}:00.0",pod_name="",'
                      f'vdie_id="{_vdie(dep.deployment.name, chip)}"')
            v: Any = values[chip][name]
            text = str(int(v)) if float(v).is_integer() else str(v)
            lines.append(f"{name}{{{labels}}} {text} {ts}")
    return "\n".join(lines) + "\n"


def _vdie(name: str, chip: int) -> str:

    h = zlib.crc32(f"{name}/{chip}".encode())
    return f"{h:08X}-{(h >> 3) & 0xFFFFFFFF:08X}-{(h * 31) & 0xFFFFFFFF:08X}-14CC040A-{chip:02X}102003"
