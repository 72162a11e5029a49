"""The management API's aiohttp application: its routes, and the middleware every
request passes through: basic auth (auth.py), then the handler, with every error turned
into RabbitMQ's status code and JSON body (errors.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from kanin.mgmt import (
    access,
    bindings,
    connections,
    definitions,
    overview,
    policies,
    topology,
    web_ui,
)
from kanin.mgmt.auth import authenticate
from kanin.mgmt.context import CONTEXT, MgmtContext
from kanin.mgmt.errors import ApiError, not_found
from kanin.mgmt.messages import get, publish
from kanin.mgmt.rates import keep_sampling

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        if exc.status == 401:
            log.warning("management API: %s %s refused: %s", request.method, request.path, exc)
        return exc.response(prompt=not web_ui.asked_by_script(request))
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
    # API learns nothing about it (as on RabbitMQ). The web UI's files hold no data: the
    # login form is among them.
    if web_ui.is_public(request.path):
        return await handler(request)
    authenticate(request.app[CONTEXT].broker, request.headers.get("Authorization"), request.remote)
    return await handler(request)


async def sampling_rates(app: web.Application) -> AsyncIterator[None]:
    """The message rates are sampled while the API runs, on the broker's loop."""
    task = asyncio.get_running_loop().create_task(keep_sampling(app[CONTEXT]))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def build_app(context: MgmtContext) -> web.Application:
    app = web.Application(middlewares=[errors_as_json, basic_auth])
    app[CONTEXT] = context
    app.cleanup_ctx.append(sampling_rates)
    families = (overview, access, connections, topology, bindings, definitions, policies, web_ui)
    for family in families:
        family.add_routes(app)
    app.router.add_post("/api/exchanges/{vhost}/{name}/publish", publish)
    app.router.add_post("/api/queues/{vhost}/{name}/get", get)
    return app
