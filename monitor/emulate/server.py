"""The emulator process: aiohttp listeners for every emulated server, npu-exporter and the control port.

`Emulator` starts and stops in-process (tests) and is what `slo-monitor emulate` runs. The emulated
clock is `speed` emulated seconds per real second plus whatever `advance()` added (speed 0: only
`advance()` moves it). It is brought up to date lazily: by the clock task, which sleeps until the next
scheduled event, and by every request handler before it reads the scheduler, so a token due at an
emulated time leaves at that wall time (speed 1), not at the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import socket
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from aiohttp import web

from monitor.config import Config
from monitor.conventions.slis import DEFAULT_BUCKETS
from monitor.emulate.control import MAX_ADVANCE_SECONDS, control_app
from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.exposition import render_npu, render_server
from monitor.emulate.incidents import Incident, parse_spec
from monitor.emulate.serving import SERVER_KEY, ServingEndpoints, Waiter, count_http
from monitor.emulate.sim import ServerSim
from monitor.emulate.topology import HOST, DeploymentLayout, Layout, localize, plan
from monitor.signals import on_stop_signals

log = logging.getLogger(__name__)
ADVANCE_STEP_SECONDS = 60.0  # a long advance runs in steps, yielding to the event loop (and SIGTERM) between


class _DropHttp2Probes(logging.Filter):
    """The router's gRPC probe speaks HTTP/2 to an HTTP/1.1 port; aiohttp logs each as a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and "PRI/Upgrade" in str(exc))


_PROBE_FILTER = _DropHttp2Probes()


class Listener:
    """One TCP port that can be closed (port refuses connections) and reopened on the same number."""

    def __init__(self, app: web.Application, port: int) -> None:
        self.app = app
        self.port = port
        self._runner: web.AppRunner | None = None
        self._site: web.SockSite | None = None

    @staticmethod
    def bind(port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        return sock

    async def open(self, sock: socket.socket | None = None) -> None:
        if self._site is not None:
            return
        sock = sock or self.bind(self.port)
        self.port = sock.getsockname()[1]
        if self._runner is None:
            self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
            await self._runner.setup()
        self._site = web.SockSite(self._runner, sock)
        await self._site.start()

    async def close(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None

    @property
    def is_open(self) -> bool:
        return self._site is not None

    async def shutdown(self) -> None:
        await self.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _server_info(dep: EmulatedDeployment, srv: ServerSim) -> dict[str, Any]:
    spec = srv.spec
    buckets = dep.deployment.buckets
    return {
        "model_path": spec.model_name,
        "tokenizer_path": spec.model_name,
        "served_model_name": spec.model_name,
        "host": HOST,
        "port": spec.port,
        "tp_size": spec.tp_size,
        "pp_size": spec.pp_size,
        "dp_size": spec.dp_size,
        "ep_size": spec.ep_size,
        "enable_dp_attention": spec.enable_dp_attention,
        "max_running_requests": spec.max_running_requests,
        "disaggregation_mode": {"server": "null"}.get(spec.role, spec.role),
        "speculative_algorithm": spec.speculative_algorithm,
        "speculative_num_draft_tokens": spec.speculative_num_draft_tokens or None,
        "disable_radix_cache": spec.disable_radix_cache,
        "enable_metrics": True,
        "bucket_time_to_first_token": buckets.get("ttft"),
        "bucket_inter_token_latency": buckets.get("itl") or buckets.get("tpot"),
        "bucket_e2e_request_latency": buckets.get("e2e"),
        "default_buckets": {k: list(v) for k, v in DEFAULT_BUCKETS.items()},
        "version": "0.5.23",
        "emulated": True,
        "internal_states": [
            {"dp_rank": r.index, "last_gen_throughput": dep.rank_gauges(srv, r)["sglang:gen_throughput"],
             "avg_spec_accept_length": r.last_accept or None}
            for r in srv.ranks
        ],
    }


def _loads(dep: EmulatedDeployment, srv: ServerSim, dp_rank: str | None) -> dict[str, Any]:
    """SGLang 0.5.23's GET /v1/loads (entrypoints/v1_loads.py, LoadSnapshot.to_dict): per DP rank, the core
    keys plus the disaggregation and queues sections, read off the scheduler."""
    out = []
    role = srv.spec.role
    for rank in srv.ranks:
        if dp_rank is not None and str(rank.index) != dp_rank:
            continue
        g = dep.rank_gauges(srv, rank)
        waiting = list(rank.waiting)
        out.append({
            "timestamp": time.time(), "dp_rank": rank.index,
            "num_running_reqs": int(g["sglang:num_running_reqs"]), "num_waiting_reqs": len(waiting),
            "num_waiting_uncached_tokens": sum(r.shape.uncached_tokens for r in waiting),
            "num_used_tokens": int(g["sglang:num_used_tokens"]), "num_total_tokens": rank.max_total_tokens,
            "num_active_tokens": int(g["sglang:decode_sum_seq_lens"]), "num_prealloc_ready_tokens": 0,
            "max_total_num_tokens": rank.max_total_tokens, "max_running_requests": rank.capacity,
            "token_usage": g["sglang:token_usage"], "gen_throughput": g["sglang:gen_throughput"],
            "cache_hit_rate": g["sglang:cache_hit_rate"], "utilization": g["sglang:utilization"],
            "total_prefill_uncached_tokens": 0, "total_prefill_busy_us": 0,
            "disaggregation": {
                "mode": {"server": "null"}.get(role, role),
                "prefill_bootstrap_queue_reqs": len(rank.bootstrap), "prefill_inflight_queue_reqs": len(rank.inflight),
                "decode_prealloc_queue_reqs": len(rank.prealloc), "decode_transfer_queue_reqs": len(rank.transfer),
                "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0},
            "queues": {"waiting": len(waiting), "grammar": 0, "paused": 0,
                       "retracted": int(g["sglang:num_retracted_reqs"]), "prealloc_ready": 0},
        })
    return {"timestamp": datetime.now(timezone.utc).isoformat(), "version": "0.5.23", "accelerator": None,
            "num_accelerators": max(srv.spec.tp_size * srv.spec.pp_size // max(len(srv.ranks), 1), 1),
            "loads": out}


def _model_info(srv: ServerSim) -> dict[str, Any]:
    """SGLang 0.5.23's /model_info (http_server.py `model_info`): the same keys."""
    name = srv.spec.model_name
    return {"model_path": name, "served_model_name": name, "tokenizer_path": name, "is_generation": True,
            "preferred_sampling_params": None, "weight_version": "default", "load_format": "auto",
            "reasoning_parser": None, "tool_call_parser": None,
            "disaggregation_mode": {"server": "null"}.get(srv.spec.role, srv.spec.role),
            "has_image_understanding": False, "has_audio_understanding": False, "model_type": "emulated",
            "architectures": ["EmulatedForCausalLM"]}


class PortUnavailable(OSError):
    """A planned port that cannot be bound (in use, or not allowed): `port` names it, `reason` says why."""

    def __init__(self, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {HOST}:{port}: {reason}")
        self.port = port
        self.reason = reason


def _bind_all(layout: Layout, base_port: int) -> list[socket.socket]:
    """Bind every planned port (base_port 0: ports the OS picks), in the layout's order; PortUnavailable
    names the first one that cannot be bound (none stays bound then)."""
    ports = [layout.control_port]
    for dl in layout.deployments:
        ports += [s.port for s in dl.servers] + [dl.npu_port, dl.router_port, dl.router_metrics_port]
    socks: list[socket.socket] = []
    try:
        for p in ports:
            port = 0 if base_port == 0 else p
            try:
                socks.append(Listener.bind(port))
            except (OSError, OverflowError) as err:  # OverflowError: a port outside 0-65535
                raise PortUnavailable(port, getattr(err, "strerror", None) or str(err)) from err
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def _layout_with(layout: Layout, socks: list[socket.socket]) -> Layout:
    """The planned layout with the ports actually bound (differs only for base_port 0)."""
    ports = iter(s.getsockname()[1] for s in socks)
    control = next(ports)
    deps = []
    for dl in layout.deployments:
        servers = tuple(dataclasses.replace(s, port=next(ports)) for s in dl.servers)
        deps.append(DeploymentLayout(dl.name, servers, next(ports), next(ports), next(ports), dl.chips))
    return Layout(layout.base_port, control, tuple(deps))


def _npu_app(dep: EmulatedDeployment, dl: DeploymentLayout) -> web.Application:
    app = web.Application()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=render_npu(dep, dl.chips), content_type="text/plain")

    app.router.add_get("/metrics", metrics)
    return app


class Emulator:
    def __init__(self, config: Config, base_port: int = 0, *, speed: float = 1.0, seed: int = 0,
                 incidents: Iterable[str | Incident] = (), request_log_dir: str | Path | None = None,
                 tick_seconds: float = 0.2, rates: dict[str, float] | None = None, synthetic: bool = True) -> None:
        """base_port 0: every listener gets a free port from the OS (see `layout`/`localized_config`).

        `synthetic` False: no built-in load, only the requests clients send (a `rates` entry still wins)."""
        self.config = config
        self.base_port = base_port
        self.speed = speed
        self.seed = seed
        self.request_log_dir = request_log_dir
        self.log_dir = str(request_log_dir) if request_log_dir is not None else None  # for the deployments, localize()
        self.tick_seconds = tick_seconds
        self.rates = dict(rates or {})
        if not synthetic:
            self.rates = {d.name: self.rates.get(d.name, 0.0) for d in config.deployments}
        self._t0 = time.monotonic()
        self._offset = 0.0  # emulated seconds added by advance()
        self._stopping = False
        self._clock_waiter = Waiter()
        self._unknown_paths: set[tuple[str, str]] = set()
        self._pending = list(incidents)
        self.layout: Layout = plan(config, base_port)
        self.deployments: dict[str, EmulatedDeployment] = {}
        self._server_listeners: list[tuple[EmulatedDeployment, ServerSim, Listener]] = []
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        logging.getLogger("aiohttp.server").addFilter(_PROBE_FILTER)  # idempotent: same object
        socks = _bind_all(self.layout, self.base_port)
        self.layout = _layout_with(self.layout, socks)
        wall = time.time()
        it = iter(socks)
        control = Listener(control_app(self), self.layout.control_port)
        await control.open(next(it))
        self._listeners.append(control)
        for dep_cfg, dl in zip(self.config.deployments, self.layout.deployments):
            dep = EmulatedDeployment(dep_cfg, dl, seed=self.seed, rate=self.rates.get(dep_cfg.name),
                                     wall_start=wall, request_log_dir=self.log_dir)
            self.deployments[dep_cfg.name] = dep
            for srv in dep.servers:
                lst = Listener(self._server_app(dep, srv), srv.spec.port)
                await lst.open(next(it))
                self._listeners.append(lst)
                self._server_listeners.append((dep, srv, lst))
            npu = Listener(_npu_app(dep, dl), dl.npu_port)
            await npu.open(next(it))
            self._listeners.append(npu)
            for _ in range(2):  # router ports: reserved, released for the real router
                next(it).close()
        for spec in self._pending:
            self.add_incident(spec)
        self._pending = []
        await self._sync_listeners()
        self._t0 = time.monotonic()
        self._task = asyncio.create_task(self._clock())
        log.info("emulator up: control %s, %d deployment(s)", self.layout.control_url, len(self.deployments))

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for lst in self._listeners:
            await lst.shutdown()
        self._listeners.clear()
        self._server_listeners.clear()
        for dep in self.deployments.values():
            dep.close()

    async def __aenter__(self) -> Emulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def localized_config(self, request_log_dir: str | None = None) -> Config:
        """The config with targets on this emulator's ports (valid after `start()`)."""
        if self.base_port:
            return localize(self.config, self.base_port, request_log_dir or self.log_dir)
        cfg = localize(self.config, 0, request_log_dir or self.log_dir)
        # base_port 0: the ports were picked by the OS, rewrite the planned ones.
        planned = plan(self.config, 0)
        mapping = {planned.control_port: self.layout.control_port}
        for a, b in zip(planned.deployments, self.layout.deployments):
            mapping.update({x.port: y.port for x, y in zip(a.servers, b.servers)})
            mapping.update({a.npu_port: b.npu_port, a.router_port: b.router_port,
                            a.router_metrics_port: b.router_metrics_port})
        deps = []
        for dep in cfg.deployments:
            targets = []
            for t in dep.targets:
                if t.url:
                    host_port, _, path = t.url.removeprefix("http://").partition("/")
                    port = mapping[int(host_port.rsplit(":", 1)[1])]
                    t = t.model_copy(update={"url": f"http://{HOST}:{port}/{path}"})
                targets.append(t)
            deps.append(dep.model_copy(update={"targets": targets}))
        return cfg.model_copy(update={"deployments": deps})

    @property
    def control_url(self) -> str:
        return self.layout.control_url

    # --- clock and incidents -------------------------------------------------------------------
    def target_now(self) -> float:
        """Where the emulated clock should be now."""
        return self._offset + (time.monotonic() - self._t0) * self.speed

    def sync(self) -> None:
        """Run every deployment's events up to now (cheap when nothing is due)."""
        target = self.target_now()
        for dep in self.deployments.values():
            dep.advance_to(target)

    def wall_seconds(self, emulated: float | None, longest: float) -> float:
        """Real seconds until `emulated` seconds from now have passed on the emulated clock (at most `longest`)."""
        if emulated is None or self.speed <= 0:
            return longest
        return min(max(emulated / self.speed, 0.0), longest)

    def _next_event_in(self) -> float | None:
        times = [t for t in (d.next_event_time() for d in self.deployments.values()) if t is not None]
        return min(times) - self.target_now() if times else None

    async def _clock(self) -> None:
        """Keep the clock current: wake for the next scheduled event (at most every tick), run it."""
        while True:
            self.sync()
            await self._sync_listeners()
            await self._clock_waiter.wait(self.wall_seconds(self._next_event_in(), self.tick_seconds) + 0.0005)

    def poke(self) -> None:
        """New events were scheduled (a request arrived): let the clock task recompute its sleep."""
        self._clock_waiter.wake()

    async def advance(self, seconds: float) -> None:
        """Move every deployment's clock by `seconds` of emulated time at once, then open/close ports.

        Bounded (MAX_ADVANCE_SECONDS) and run in steps that yield to the event loop, so a long jump
        neither blocks the other handlers nor outlives a stop."""
        if not (math.isfinite(seconds) and 0 <= seconds <= MAX_ADVANCE_SECONDS):
            raise ValueError(f"advance must be a finite number of seconds in [0, {MAX_ADVANCE_SECONDS:g}], "
                             f"got {seconds!r}")
        async with self._lock:
            left = seconds
            while left > 0 and not self._stopping:
                step = min(left, ADVANCE_STEP_SECONDS)
                self._offset += step
                left -= step
                self.sync()
                await asyncio.sleep(0)
            self.sync()
            await self._sync_listeners()

    async def _sync_listeners(self) -> None:
        for dep, srv, lst in self._server_listeners:
            down = dep.effects(srv.spec.role).down
            if down and lst.is_open:
                await lst.close()
            elif not down and not lst.is_open:
                try:
                    await lst.open()
                except OSError as err:  # port taken meanwhile: retry on the next tick
                    log.warning("cannot reopen %s on port %d: %s", srv.spec.name, lst.port, err)

    def add_incident(self, inc: str | Incident) -> Incident:
        if isinstance(inc, str):
            name = inc.split(":", 1)[0].split("/", 1)[0]
            if name not in self.deployments:
                raise ValueError(f"incident {inc!r}: unknown deployment {name!r}")
            inc = parse_spec(inc, self.deployments[name].now)
        if inc.deployment not in self.deployments:
            raise ValueError(f"unknown deployment {inc.deployment!r}")
        self.deployments[inc.deployment].add_incident(inc)
        return inc

    def clear_incidents(self, deployment: str | None = None) -> None:
        for name, dep in self.deployments.items():
            if deployment in (None, name):
                dep.clear_incidents()

    def state(self) -> dict[str, Any]:
        return {
            "speed": self.speed,
            "control_url": self.control_url,
            "deployments": {
                name: dep.state() | {"npu_url": self.layout.deployment(name).npu_url,
                                     "router_port": self.layout.deployment(name).router_port,
                                     "router_metrics_port": self.layout.deployment(name).router_metrics_port}
                for name, dep in self.deployments.items()
            },
        }

    # --- apps ----------------------------------------------------------------------------------
    def _server_app(self, dep: EmulatedDeployment, srv: ServerSim) -> web.Application:
        app = web.Application(middlewares=[count_http], client_max_size=64 * 1024**2)  # 128K-token prompts
        app[SERVER_KEY] = srv

        def guard(request: web.Request) -> None:
            # A connection opened before the port closed must not be answered either.
            if dep.effects(srv.spec.role).down:
                if request.transport is not None:
                    request.transport.close()
                raise web.HTTPServiceUnavailable()

        async def metrics(request: web.Request) -> web.Response:
            guard(request)
            if dep.effects(srv.spec.role).metrics_disabled:
                raise web.HTTPNotFound(text='{"detail":"Not Found"}', content_type="application/json")
            body, headers = render_server(dep, srv, request.headers.get("Accept"),
                                          request.headers.get("Accept-Encoding"))
            return web.Response(body=body, headers=headers)

        async def health(request: web.Request) -> web.Response:
            guard(request)
            return web.Response(status=200)

        async def server_info(request: web.Request) -> web.Response:
            guard(request)
            return web.json_response(_server_info(dep, srv))

        async def model_info(request: web.Request) -> web.Response:
            guard(request)
            return web.json_response(_model_info(srv))

        async def models(request: web.Request) -> web.Response:
            guard(request)
            name = srv.spec.model_name
            return web.json_response({"object": "list", "data": [
                {"id": name, "object": "model", "owned_by": "sglang", "root": name, "max_model_len": 131072}]})

        app.router.add_get("/metrics", metrics)
        app.router.add_get("/metrics/", metrics)
        for path in ("/health", "/health_generate", "/ping"):
            app.router.add_get(path, health)
        for path in ("/server_info", "/get_server_info"):
            app.router.add_get(path, server_info)
        for path in ("/model_info", "/get_model_info"):
            app.router.add_get(path, model_info)
        async def unknown(request: web.Request) -> web.Response:
            guard(request)
            # What a gateway probes that this emulator does not serve (smg 1.13 polls /loads, which SGLang
            # 0.5.23 does not have either): worth one line per path, not one per poll.
            key = (request.method, request.path)
            if key not in self._unknown_paths:
                self._unknown_paths.add(key)
                log.info("%s: %s %s is not emulated (404; said once)", srv.spec.name, *key)
            return web.json_response({"detail": "Not Found"}, status=404)

        async def loads(request: web.Request) -> web.Response:
            guard(request)
            self.sync()
            return web.json_response(_loads(dep, srv, request.query.get("dp_rank")))

        app.router.add_get("/v1/models", models)
        app.router.add_get("/v1/loads", loads)
        ServingEndpoints(self, dep, srv, guard).add_routes(app)
        app.router.add_route("*", "/{tail:.*}", unknown)
        return app


def run_emulator(config: Config, base_port: int, *, speed: float = 1.0, seed: int = 0,
                 incidents: Iterable[str] = (), request_log_dir: str | None = None,
                 ready: Any = None, synthetic: bool = True) -> None:
    """Run until SIGINT/SIGTERM (the CLI's `slo-monitor emulate`). `ready(emulator)` is called once up."""
    async def main() -> None:
        emu = Emulator(config, base_port, speed=speed, seed=seed, incidents=incidents,
                       request_log_dir=request_log_dir, synthetic=synthetic)
        await emu.start()
        stop = asyncio.Event()
        on_stop_signals(stop.set)
        try:
            if ready is not None:
                ready(emu)
            await stop.wait()
        finally:
            await emu.stop()

    asyncio.run(main())
