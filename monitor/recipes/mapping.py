"""One recipe row plus its commands -> one `config.Deployment`, with every oddity as a warning."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from monitor.config import Baseline, Deployment, Mode, Target
from monitor.recipes import launch as L
from monitor.recipes.buckets import tpot_advice
from monitor.recipes.commands import Command
from monitor.recipes.errors import RecipeError
from monitor.recipes.values import DatasetShape, close_to


@dataclass
class Spec:
    """What the page states about one deployment (table row, section line or PR text)."""

    source: str
    line: int
    name: str
    model: str | None = None
    hardware: str | None = None
    cards: int | None = None
    mode: Mode | None = None
    dataset: str | None = None
    shape: DatasetShape | None = None
    tpot_target: float | None = None
    quantization: str | None = None
    group: str | None = None
    title: str | None = None
    section_line: int | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Options:
    ttft_target: float | None = None
    add_bucket_flags: bool = False


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g} ms"


def _origin(cmd: Command) -> str:
    return f"line {cmd.line}"


def _server_targets(servers: list[Command], warnings: list[str]) -> list[Target]:
    targets: list[Target] = []
    seen: set[str] = set()
    for cmd in servers:
        role = L.server_role(cmd)
        url, wildcard = L.server_url(cmd)
        where = f"{_origin(cmd)} ({role}, {cmd.program})"
        if not cmd.has("--enable-metrics"):
            warnings.append(
                f"{where} has no --enable-metrics: this server exposes no /metrics and the sidecar will see "
                "no SLI data; add --enable-metrics to the launch command"
            )
        if not cmd.has("--port"):
            warnings.append(f"{where} has no --port; assuming SGLang's default {L.SERVER_DEFAULT_PORT}")
        if wildcard:
            warnings.append(
                f"{where} listens on {cmd.value('--host')!r} (all interfaces); the target uses 127.0.0.1, "
                "i.e. a sidecar on that node — replace it with the node's address to scrape from elsewhere"
            )
        nnodes = cmd.int("--nnodes") or 1
        if nnodes > 1:
            hosts = cmd.host_array or []
            spread = f" ({', '.join(hosts)})" if len(hosts) > 1 else ""
            warnings.append(
                f"{where} spans {nnodes} nodes{spread}; only node-rank 0 runs the HTTP server, so its "
                f"{url} is the only {role} target (scheduler metrics of other nodes are not served)"
            )
            if not cmd.has("--dist-init-addr") or not cmd.has("--node-rank"):
                warnings.append(
                    f"{where} sets --nnodes {nnodes} without --dist-init-addr/--node-rank: as written it "
                    "cannot form a multi-node group; the page leaves out how the other node is started"
                )
        if url in seen:
            warnings.append(f"{where} repeats target {url}; kept once")
            continue
        seen.add(url)
        targets.append(Target(role=role, url=url))  # type: ignore[arg-type]
    return targets


def _base(url: str | None) -> str:
    return (url or "").removesuffix("/metrics").rstrip("/")


def _check_router(router: Command, servers: list[Command], warnings: list[str]) -> None:
    by_role: dict[str, dict[str, Command]] = {"prefill": {}, "decode": {}}
    for cmd in servers:
        role = L.server_role(cmd)
        if role in by_role:
            by_role[role][_base(L.server_url(cmd)[0])] = cmd
    info = L.router_launch(router)
    for role in ("prefill", "decode"):
        for entry in info.get(role, []):
            url = entry.get("url") or ""
            cmd = by_role[role].get(url.rstrip("/"))
            if cmd is None:
                known = ", ".join(by_role[role]) or "none"
                warnings.append(f"line {router.line}: router --{role} {url} matches no {role} server ({known})")
                continue
            bootstrap = cmd.int("--disaggregation-bootstrap-port")
            if role == "prefill" and entry.get("bootstrap_port") not in (None, bootstrap):
                warnings.append(
                    f"line {router.line}: router gives prefill {url} bootstrap port {entry['bootstrap_port']}, "
                    f"but the prefill server (line {cmd.line}) uses {bootstrap or 'the default'}"
                )


def _shape(spec: Spec, bench: dict[str, Any] | None, warnings: list[str]) -> dict[str, Any]:
    """Dataset shape: the benchmark's own numbers, checked against the table's label."""
    measured = L.bench_shape(bench) if bench else {}
    label = spec.shape
    out: dict[str, Any] = {}
    for key, candidates in (("input_tokens", label.input_tokens if label else ()),
                            ("output_tokens", label.output_tokens if label else ())):
        if key in measured:
            out[key] = measured[key]
            if candidates and not close_to(measured[key], candidates):
                warnings.append(
                    f"dataset {spec.dataset!r} says {key.split('_')[0]} ≈ {' or '.join(map(str, candidates))} "
                    f"tokens, but the benchmark (line {bench['line'] if bench else '?'}) uses {measured[key]}; "
                    "kept the benchmark's value"
                )
        elif candidates:
            out[key] = candidates[0]
            if len(candidates) > 1:
                warnings.append(
                    f"no benchmark command gives the exact {key.replace('_', ' ')}; read {spec.dataset!r} "
                    f"with K = 1000 ({candidates[0]}; with K = 1024 it would be {candidates[1]})"
                )
    hit_label = label.prefix_cache_hit if label else None
    hit = measured.get("prefix_cache_hit", hit_label)
    if hit_label is not None and "prefix_cache_hit" in measured and abs(measured["prefix_cache_hit"] - hit_label) > 0.01:
        warnings.append(
            f"dataset {spec.dataset!r} says {hit_label:.0%} prefix cache hits, the benchmark's shared prefix "
            f"gives {measured['prefix_cache_hit']:.1%}; kept the benchmark's value"
        )
    if hit is not None:
        out["prefix_cache_hit"] = hit
    image = measured.get("image_inputs") or (f"1 x {label.image_resolution}" if label and label.image_resolution else None)
    if label and label.image_resolution and measured.get("image_inputs") and label.image_resolution not in image:
        warnings.append(f"dataset {spec.dataset!r} names {label.image_resolution}, the benchmark sends {image}")
    if image:
        out["image_inputs"] = image
        if "input_tokens" in out:
            warnings.append(
                f"input_tokens ({out['input_tokens']}) counts text tokens only; each request also carries "
                f"{image} image(s), whose vision tokens dominate prefill and TTFT"
            )
    return out


def _consistency(spec: Spec, servers: list[Command], bench: dict[str, Any] | None, entry: Command | None,
                 shape: dict[str, Any], warnings: list[str]) -> None:
    if bench and entry is not None:
        entry_port = entry.int("--port") or L.SERVER_DEFAULT_PORT
        if bench.get("port") not in (None, entry_port):
            warnings.append(
                f"the benchmark (line {bench['line']}) targets port {bench['port']}, but requests enter at "
                f"{entry_port} ({entry.kind}, line {entry.line})"
            )
    takes_load = [c for c in servers if L.server_role(c) in ("server", "decode")]
    concurrency = bench.get("max_concurrency") if bench else None
    for cmd in takes_load:
        mrr = cmd.int("--max-running-requests")
        if concurrency and mrr and concurrency > mrr:
            warnings.append(
                f"benchmark concurrency {concurrency} exceeds --max-running-requests {mrr} (line {cmd.line}): "
                "requests queue, and queueing time shows up in TTFT"
            )
    total = (shape.get("input_tokens") or 0) + (shape.get("output_tokens") or 0)
    for cmd in servers:
        ctx = cmd.int("--context-length")
        if ctx and total > ctx and not shape.get("image_inputs"):
            warnings.append(f"dataset needs {total} tokens per request but --context-length is {ctx} (line {cmd.line})")
        if shape.get("prefix_cache_hit") and L.server_role(cmd) in ("server", "prefill") and cmd.has("--disable-radix-cache"):
            warnings.append(
                f"dataset expects {shape['prefix_cache_hit']:.0%} prefix cache hits but line {cmd.line} passes "
                "--disable-radix-cache, so no prefix is reused"
            )


def build(spec: Spec, commands: list[Command], options: Options, baseline: Baseline | None = None) -> Deployment:
    warnings = list(spec.warnings)
    servers = [c for c in commands if c.kind == "server"]
    routers = [c for c in commands if c.kind == "router"]
    benches = [c for c in commands if c.kind == "bench"]
    for cmd in commands:
        warnings.extend(cmd.notes)
    if not servers:
        warnings.append("no sglang server command found for this deployment: it has no scrape targets")
    roles = {L.server_role(c) for c in servers}
    cmd_mode: Mode | None = ("pd-disaggregated" if roles & {"prefill", "decode"} else "pd-mixed") if servers else None
    mode: Mode = cmd_mode or spec.mode or "pd-mixed"
    if spec.mode and cmd_mode and spec.mode != cmd_mode:
        warnings.append(f"the page says {spec.mode} but the launch commands are {cmd_mode}; used {cmd_mode}")
    if mode == "pd-disaggregated" and not roles >= {"prefill", "decode"}:
        warnings.append(f"PD disaggregation with only {', '.join(sorted(roles))} server(s)")

    targets = _server_targets(servers, warnings)
    router = routers[0] if routers else None
    if len(routers) > 1:
        warnings.append(f"{len(routers)} router commands; used the first (line {routers[0].line})")
    if router is not None:
        _check_router(router, servers, warnings)
        targets.append(Target(role="router", url=L.router_url(router)))
    elif mode == "pd-disaggregated":
        warnings.append("PD disaggregation without a sglang_router.launch_router command: no router target")

    bench = L.bench_launch(benches[0]) if benches else None
    if len(benches) > 1:
        warnings.append(f"{len(benches)} benchmark commands; used the first (line {benches[0].line})")
    shape = _shape(spec, bench, warnings)
    entry = router if mode == "pd-disaggregated" and router is not None else (servers[0] if servers else None)
    _consistency(spec, servers, bench, entry, shape, warnings)

    launch: dict[str, Any] = {"source": f"{spec.source}:{spec.section_line or spec.line}"}
    if spec.title:
        launch["section"] = spec.title
    if spec.group:
        launch["group"] = spec.group
    launch["servers"] = [L.server_launch(c) for c in servers]
    if router is not None:
        launch["router"] = L.router_launch(router)
    if bench is not None:
        launch["bench"] = bench

    buckets: dict[str, list[float]] = {}
    recommended: list[str] = []
    if servers and not all(c.has("--enable-metrics") for c in servers):
        recommended.append("--enable-metrics")
    if spec.tpot_target is not None:
        advice = tpot_advice(spec.tpot_target)
        launched = next((c.values("--bucket-inter-token-latency")[-1] for c in servers
                         if c.has("--bucket-inter-token-latency")), None)
        if advice and launched:
            edges = sorted(float(v) for v in launched)
            buckets = {"tpot": edges, "itl": edges}
            if not any(abs(e - spec.tpot_target) < 1e-9 for e in edges):
                warnings.append(f"TPOT target {_ms(spec.tpot_target)} is not an edge of the launched "
                                "--bucket-inter-token-latency list; add it")
        elif advice:
            edges, flag = advice
            where = "every sglang server command (prefill and decode)" if mode == "pd-disaggregated" else "the sglang server command"
            if options.add_bucket_flags:
                buckets = {"tpot": list(edges), "itl": list(edges)}
                recommended.append(flag)
                warnings.append(
                    f"TPOT target {_ms(spec.tpot_target)} is not an edge of SGLang's default TPOT/ITL buckets; "
                    f"buckets assume {where} is launched with launch.recommended_flags ({flag.split()[0]} …) — "
                    "without it the good-event count would be wrong"
                )
            else:
                warnings.append(
                    f"TPOT target {_ms(spec.tpot_target)} is not an edge of SGLang's default TPOT/ITL buckets, "
                    f"so attainment can only be interpolated; add to {where}: {flag}"
                )
    if options.add_bucket_flags and recommended:
        launch["recommended_flags"] = recommended

    if options.ttft_target is None and baseline is not None and baseline.ttft_mean_seconds:
        warnings.append(
            f"no TTFT target (the source gives none); the measured mean TTFT {baseline.ttft_mean_seconds:g} s is "
            "kept as baseline only — pass --ttft-target SECONDS to alert on TTFT"
        )
    quantization = spec.quantization or next((c.value("--quantization") for c in servers if c.has("--quantization")), None)
    try:
        return Deployment(
            name=spec.name,
            model=spec.model or "unknown",
            hardware=spec.hardware or "unknown",
            cards=spec.cards,
            mode=mode,
            dataset=spec.dataset,
            input_tokens=shape.get("input_tokens"),
            output_tokens=shape.get("output_tokens"),
            prefix_cache_hit=shape.get("prefix_cache_hit"),
            image_inputs=shape.get("image_inputs"),
            quantization=quantization,
            tpot_target_seconds=spec.tpot_target,
            ttft_target_seconds=options.ttft_target,
            buckets=buckets,
            baseline=baseline,
            targets=targets,
            launch=launch,
            warnings=warnings,
        )
    except ValidationError as err:
        raise RecipeError(spec.source, spec.line, f"cannot build deployment {spec.name!r}: {err}") from None
