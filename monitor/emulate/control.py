"""HTTP control endpoint of the emulator: inject and clear incidents, read the state, move the clock.

    POST /control/incident  {"deployment": "d", "kind": "tpot_regression", "factor": 2, "duration_seconds": 300,
                             "role": "decode"?, "start_in_seconds": 0?}   -> 201 {"incident": {...}}
    POST /control/clear     {"deployment": "d"}? (all deployments without a body)
    GET  /control/state     clock, incidents, servers and ports of every deployment
    POST /control/advance   {"seconds": 60}  (moves the emulated clock at once; handy with --speed 0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from monitor.emulate.incidents import from_request

if TYPE_CHECKING:
    from monitor.emulate.server import Emulator


async def _json(request: web.Request) -> Any:
    if not request.can_read_body:
        return {}
    try:
        return await request.json()
    except ValueError as err:
        raise web.HTTPBadRequest(text=f"body is not JSON: {err}") from None


def control_app(emulator: Emulator) -> web.Application:
    app = web.Application()

    async def incident(request: web.Request) -> web.Response:
        body = await _json(request)
        name = body.get("deployment") if isinstance(body, dict) else None
        if name not in emulator.deployments:
            return web.json_response({"error": f"unknown deployment {name!r}",
                                      "deployments": list(emulator.deployments)}, status=404)
        try:
            inc = from_request(body, emulator.deployments[name].now)
        except (ValueError, TypeError) as err:
            return web.json_response({"error": str(err)}, status=400)
        emulator.add_incident(inc)
        return web.json_response({"incident": inc.to_dict()}, status=201)

    async def clear(request: web.Request) -> web.Response:
        body = await _json(request)
        name = body.get("deployment") if isinstance(body, dict) else None
        if name is not None and name not in emulator.deployments:
            return web.json_response({"error": f"unknown deployment {name!r}"}, status=404)
        emulator.clear_incidents(name)
        return web.json_response({"cleared": name or "all"})

    async def state(_: web.Request) -> web.Response:
        return web.json_response(emulator.state())

    async def advance(request: web.Request) -> web.Response:
        body = await _json(request)
        try:
            seconds = float(body.get("seconds", 0))
        except (TypeError, ValueError, AttributeError):
            return web.json_response({"error": 'expected {"seconds": N}'}, status=400)
        await emulator.advance(seconds)
        return web.json_response(emulator.state())

    app.router.add_post("/control/incident", incident)
    app.router.add_post("/control/clear", clear)
    app.router.add_get("/control/state", state)
    app.router.add_post("/control/advance", advance)
    return app
