"""HTTP control endpoint of the emulator: inject and clear incidents, read the state, move the clock.

    POST /control/incident  {"deployment": "d", "kind": "tpot_regression", "factor": 2, "duration_seconds": 300,
                             "role": "decode"?, "start_in_seconds": 0?}   -> 201 {"incident": {...}}
    POST /control/clear     {"deployment": "d"}? (all deployments without a body)
    GET  /control/state     clock, incidents, servers and ports of every deployment
    POST /control/advance   {"seconds": 60}  (moves the emulated clock at once; handy with --speed 0)

Every body is validated by a pydantic model: a wrong, missing, non-finite or unknown field is a 400 that
names it (`{"error": "factor: Input should be greater than 0", "errors": [...]}`), an unknown deployment
a 404. Nothing is silently replaced: an absent factor takes the kind's default, a given one is used or
refused. `advance` is bounded (MAX_ADVANCE_SECONDS) and yields to the event loop while it runs.

The app drives the emulator as `Controlled`, what it calls of it: server.py's `Emulator` builds this app,
so naming that class here would close an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictStr, ValidationError

from monitor.emulate.incidents import DEFAULT_FACTOR, KINDS, Incident


class _Clocked(Protocol):
    @property  # read-only: any deployment with an emulated clock (engine.EmulatedDeployment)
    def now(self) -> float: ...


class Controlled(Protocol):
    """What the control port calls of the emulator (server.Emulator)."""

    @property  # read-only, so a dict of EmulatedDeployment satisfies this Mapping of _Clocked
    def deployments(self) -> Mapping[str, _Clocked]: ...

    def sync(self) -> None: ...

    def add_incident(self, inc: Incident) -> Incident: ...

    def clear_incidents(self, deployment: str | None = None) -> None: ...

    def state(self) -> dict[str, Any]: ...

    async def advance(self, seconds: float) -> None: ...


MAX_ADVANCE_SECONDS = 86400.0  # one control call moves the clock at most a day
MAX_INCIDENT_SECONDS = 366 * 86400.0


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IncidentBody(_Body):
    deployment: StrictStr
    kind: Literal[KINDS]  # type: ignore[valid-type]
    factor: StrictFloat | None = Field(None, gt=0, allow_inf_nan=False)
    duration_seconds: StrictFloat | None = Field(None, ge=0, le=MAX_INCIDENT_SECONDS, allow_inf_nan=False)
    start_in_seconds: StrictFloat = Field(0.0, ge=0, le=MAX_INCIDENT_SECONDS, allow_inf_nan=False)
    role: Literal["server", "prefill", "decode"] | None = None
    ramp_seconds: StrictFloat = Field(0.0, ge=0, le=MAX_INCIDENT_SECONDS, allow_inf_nan=False)

    def incident(self, now: float) -> Incident:
        """The incident, starting `start_in_seconds` after `now`; Incident itself checks kind vs factor."""
        factor = DEFAULT_FACTOR.get(self.kind, 1.0) if self.factor is None else self.factor
        return Incident(self.deployment, self.kind, factor, now + self.start_in_seconds, self.duration_seconds,
                        self.role, ramp=self.ramp_seconds)


class ClearBody(_Body):
    deployment: StrictStr | None = None


class AdvanceBody(_Body):
    seconds: StrictFloat = Field(ge=0, le=MAX_ADVANCE_SECONDS, allow_inf_nan=False)


def _problem(err: ValidationError) -> web.Response:
    errors = [{"field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]} for e in err.errors()]
    text = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return web.json_response({"error": text, "errors": errors}, status=400)


async def _parse(request: web.Request, model: type[_Body]) -> Any:
    """The body as `model`; an empty body is `{}`. Raises a 400 response for anything else."""
    raw = await request.read()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as err:
        raise _HttpProblem(_problem(err)) from None


class _HttpProblem(Exception):
    def __init__(self, response: web.Response) -> None:
        self.response = response


def control_app(emulator: Controlled) -> web.Application:
    app = web.Application()

    async def incident(request: web.Request) -> web.Response:
        body: IncidentBody = await _parse(request, IncidentBody)
        if body.deployment not in emulator.deployments:
            return web.json_response({"error": f"unknown deployment {body.deployment!r}",
                                      "deployments": list(emulator.deployments)}, status=404)
        emulator.sync()
        try:
            inc = body.incident(emulator.deployments[body.deployment].now)
        except ValueError as err:
            return web.json_response({"error": f"factor: {err}", "errors": [{"field": "factor",
                                                                            "message": str(err)}]}, status=400)
        emulator.add_incident(inc)
        return web.json_response({"incident": inc.to_dict()}, status=201)

    async def clear(request: web.Request) -> web.Response:
        body: ClearBody = await _parse(request, ClearBody)
        if body.deployment is not None and body.deployment not in emulator.deployments:
            return web.json_response({"error": f"unknown deployment {body.deployment!r}",
                                      "deployments": list(emulator.deployments)}, status=404)
        emulator.sync()
        emulator.clear_incidents(body.deployment)
        return web.json_response({"cleared": body.deployment or "all"})

    async def state(_: web.Request) -> web.Response:
        emulator.sync()
        return web.json_response(emulator.state())

    async def advance(request: web.Request) -> web.Response:
        body: AdvanceBody = await _parse(request, AdvanceBody)
        await emulator.advance(body.seconds)
        return web.json_response(emulator.state())

    @web.middleware
    async def problems(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except _HttpProblem as p:
            return p.response

    app.middlewares.append(problems)
    app.router.add_post("/control/incident", incident)
    app.router.add_post("/control/clear", clear)
    app.router.add_get("/control/state", state)
    app.router.add_post("/control/advance", advance)
    return app
