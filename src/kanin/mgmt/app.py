"""The management API's aiohttp application: its routes, and the middleware every
request passes through: basic auth (auth.py), then the handler, with every error turned
into RabbitMQ's status code and JSON body (errors.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from kanin.mgmt import (
    access,
    bindings,
    connections,
    definitions,
    overview,
    policies,
    topology,
)
from kanin.mgmt.auth import authenticate
from kanin.mgmt.context import CONTEXT, MgmtContext
from kanin.mgmt.errors import ApiError, not_found
from kanin.mgmt.messages import get, publish

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        if exc.status == 401:
            log.warning("management API: %s %s refused: %s", request.method, request.path, exc)
        return exc.response()
    except web.HTTPNotFound:
        return not_found().response()
    except web.HTTPMethodNotAllowed:
        return ApiError(405, "Method Not Allowed", request.method).response()
    except web.HTTPException:
        raise
    except Exception:
        log.exception("management API: %s %s failed", request.method, request.path)
        return ApiError(500, "internal_server_error", "see the broker's log").response()


@web.middleware
async def basic_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Before the handler, and before a path is found to be unknown: who may not use the
    # API learns nothing about it (as on RabbitMQ).
    authenticate(request.app[CONTEXT].broker, request.headers.get("Authorization"), request.remote)
    return await handler(request)


def build_app(context: MgmtContext) -> web.Application:
    app = web.Application(middlewares=[errors_as_json, basic_auth])
    app[CONTEXT] = context
    for family in (overview, access, connections, topology, bindings, definitions, policies):
        family.add_routes(app)
    app.router.add_post("/api/exchanges/{vhost}/{name}/publish", publish)
    app.router.add_post("/api/queues/{vhost}/{name}/get", get)
    return app
