"""Which emulated processes a deployment has, on which ports, and the config that points at them.

Port layout (deterministic from the config order and `base_port`):
    base_port                 control endpoint (`/control/...`)
    then per deployment, in config order:
        one port per SGLang server (mixed `server`s, else `prefill`s then `decode`s)
        one port for its npu-exporter `/metrics`
        two ports reserved for a real sglang-router: API port, then its Prometheus port
"""

from __future__ import annotations

import random
import socket
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from monitor.config import Config, Deployment, Target

ENGINE_TYPE = {"server": "unified", "prefill": "prefill", "decode": "decode"}
HOST = "127.0.0.1"
DEFAULT_MAX_RUNNING = 64
NPU_CHIPS_DEFAULT = 8


def _norm_key(key: str) -> str:
    return key.lstrip("-").replace("-", "_").lower()


def _as_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(v)


def _as_int(v: Any, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def launch_for(launch: dict[str, Any], role: str) -> dict[str, Any]:
    """Flags of one role: top-level keys, overridden by a `prefill:`/`decode:`/`server:` sub-mapping.

    Keys may be spelled as flags (`--tp-size`) or as ServerArgs fields (`tp_size`)."""
    flat = {_norm_key(k): v for k, v in launch.items() if not isinstance(v, (dict, list))}
    # The recipe importer's shape: {"servers": [{"role": "decode", "tp_size": 16, ...}, ...]}.
    entries = [e for e in launch.get("servers") or [] if isinstance(e, dict)]
    same = [e for e in entries if e.get("role") == role] or entries
    if same:
        flat.update({_norm_key(k): v for k, v in same[0].items() if k not in ("role", "line", "command", "hosts")})
    for key in (role, f"{role}_args", f"{role}_launch"):
        sub = launch.get(key)
        if isinstance(sub, dict):
            flat.update({_norm_key(k): v for k, v in sub.items()})
    return flat


@dataclass(frozen=True)
class ServerSpec:
    deployment: str
    role: str  # server | prefill | decode
    index: int
    port: int
    model_name: str
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    enable_dp_attention: bool = False
    max_running_requests: int = DEFAULT_MAX_RUNNING
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int = 0
    disable_radix_cache: bool = False
    launch: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def name(self) -> str:
        return f"{self.deployment}-{self.role}-{self.index}"

    @property
    def engine_type(self) -> str:
        return ENGINE_TYPE[self.role]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def rank_labels(self, dp_index: int) -> list[dict[str, str]]:
        """Label sets of the schedulers that emit for one DP group: attn_tp_rank 0, one per PP stage."""
        dp = max(self.dp_size, 1)
        # DP attention: the global TP rank of the group's first scheduler; plain DP: rank in the replica.
        tp = dp_index * max(self.tp_size // dp, 1) if dp > 1 and self.enable_dp_attention else 0
        out = []
        for pp in range(max(self.pp_size, 1)):
            labels = {"tp_rank": str(tp), "pp_rank": str(pp), "moe_ep_rank": str(tp if self.ep_size > 1 else 0)}
            if dp > 1:
                labels["dp_rank"] = str(dp_index)
            out.append(labels)
        return out


def server_spec(dep: Deployment, role: str, index: int, port: int) -> ServerSpec:
    flags = launch_for(dep.launch, role)
    tp = _as_int(flags.get("tp_size", flags.get("tp")), 1)
    dp = _as_int(flags.get("dp_size", flags.get("dp")), 1)
    spec_algo = flags.get("speculative_algorithm")
    drafts = _as_int(flags.get("speculative_num_draft_tokens"), 0)
    if spec_algo and not drafts:
        drafts = _as_int(flags.get("speculative_dspark_block_size"), 0) or _as_int(
            flags.get("speculative_num_steps"), 3) + 1
    return ServerSpec(
        deployment=dep.name,
        role=role,
        index=index,
        port=port,
        model_name=str(flags.get("served_model_name") or (dep.model if dep.model != "unknown" else dep.name)),
        tp_size=tp,
        pp_size=_as_int(flags.get("pp_size"), 1),
        dp_size=dp,
        ep_size=_as_int(flags.get("ep_size", flags.get("expert_parallel_size")), 1),
        enable_dp_attention=_as_bool(flags.get("enable_dp_attention", False)),
        max_running_requests=_as_int(flags.get("max_running_requests"), DEFAULT_MAX_RUNNING),
        speculative_algorithm=str(spec_algo) if spec_algo else None,
        speculative_num_draft_tokens=drafts,
        disable_radix_cache=_as_bool(flags.get("disable_radix_cache", False)),
        launch=flags,
    )


def server_roles(dep: Deployment) -> list[str]:
    """Roles of the servers, one entry each: counted from the config's targets, else from the mode."""
    counts = Counter(t.role for t in dep.targets if t.role in ENGINE_TYPE)
    if not counts:  # the recipe importer lists one launch entry per server command
        counts = Counter(e.get("role") for e in dep.launch.get("servers") or [] if isinstance(e, dict))
    launch = {_norm_key(k): v for k, v in dep.launch.items() if not isinstance(v, (dict, list))}
    if dep.mode == "pd-disaggregated":
        n_p = counts.get("prefill") or _as_int(launch.get("prefill_servers"), 1)
        n_d = counts.get("decode") or _as_int(launch.get("decode_servers"), 1)
        return ["prefill"] * n_p + ["decode"] * n_d
    n = counts.get("server") or _as_int(launch.get("servers"), 1)
    return ["server"] * n


@dataclass(frozen=True)
class DeploymentLayout:
    name: str
    servers: tuple[ServerSpec, ...]
    npu_port: int
    router_port: int
    router_metrics_port: int
    chips: int

    def by_role(self, role: str) -> list[ServerSpec]:
        return [s for s in self.servers if s.role == role]

    @property
    def npu_url(self) -> str:
        return f"http://{HOST}:{self.npu_port}/metrics"


@dataclass(frozen=True)
class Layout:
    base_port: int
    control_port: int
    deployments: tuple[DeploymentLayout, ...]

    def deployment(self, name: str) -> DeploymentLayout:
        for d in self.deployments:
            if d.name == name:
                return d
        raise KeyError(f"no deployment named {name!r}")

    @property
    def control_url(self) -> str:
        return f"http://{HOST}:{self.control_port}"

    @property
    def port_count(self) -> int:
        return 1 + sum(len(d.servers) + 3 for d in self.deployments)


def plan(config: Config, base_port: int) -> Layout:
    port = base_port + 1
    layouts = []
    for dep in config.deployments:
        servers = []
        seen: Counter[str] = Counter()
        for role in server_roles(dep):
            servers.append(server_spec(dep, role, seen[role], port))
            seen[role] += 1
            port += 1
        chips = dep.cards or NPU_CHIPS_DEFAULT
        layouts.append(DeploymentLayout(dep.name, tuple(servers), port, port + 1, port + 2, min(chips, 16)))
        port += 3
    return Layout(base_port, base_port, tuple(layouts))


def localize(config: Config, base_port: int, request_log_dir: str | None = None) -> Config:
    """The same config with every deployment's targets pointing at the emulator's 127.0.0.1 ports.

    A router target is kept only when the input had one; it points at the port reserved for a real
    router's Prometheus listener (start it with `monitor.emulate.router`)."""
    layout = plan(config, base_port)
    deployments = []
    for dep, dl in zip(config.deployments, layout.deployments):
        targets = [Target(role=s.role, url=f"{s.url}/metrics", name=s.name) for s in dl.servers]
        targets.append(Target(role="npu", source="npu-exporter", url=dl.npu_url, name=f"{dep.name}-npu"))
        if any(t.role == "router" for t in dep.targets):
            gateway = next((t.gateway for t in dep.targets if t.gateway), None)  # which one to launch there
            targets.append(Target(role="router", url=f"http://{HOST}:{dl.router_metrics_port}/metrics",
                                  name=f"{dep.name}-router", gateway=gateway))
        if request_log_dir:
            for s in dl.servers:
                if s.role != "prefill":
                    targets.append(Target(role="request-log", path=f"{request_log_dir}/{s.name}",
                                          name=f"{s.name}-request-log"))
        deployments.append(dep.model_copy(update={"targets": targets}))
    return config.model_copy(update={"deployments": deployments})


def _ephemeral_low() -> int:
    """The lowest local port the kernel gives outgoing connections (Linux default range 32768-60999)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def find_free_base_port(count: int, attempts: int = 200) -> int:
    """A random base port whose `count` consecutive ports are all free right now (tests and demos).

    Chosen below the kernel's ephemeral range where there is room: a port free now inside that range can be
    taken, before the emulator or a gateway binds it, by any outgoing connection on the machine (a scrape, a
    gateway's connection to its workers), and the listener then fails to start."""
    rng = random.SystemRandom()
    lo = _ephemeral_low()
    start, stop = (10000, lo - count) if lo - count - 10000 >= 20 * count else (1024, 65535 - count)
    for _ in range(attempts):
        base = rng.randrange(start, stop)
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((HOST, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports on {HOST}")


def find_free_port() -> int:
    """One free port for a listener a test or benchmark starts (outside the ephemeral range, as above)."""
    return find_free_base_port(1)
