"""The metrics' aiohttp application: GET /metrics and /metrics/per-object, in the text
exposition format, without authentication (as rabbitmq_prometheus serves them)."""

from __future__ import annotations

from aiohttp import web

from kanin.mgmt.context import CONTEXT, MgmtContext
from kanin.prometheus.collect import collect
from kanin.prometheus.text import CONTENT_TYPE, render


async def metrics(request: web.Request) -> web.Response:
    return _answer(request, per_object=False)


async def metrics_per_object(request: web.Request) -> web.Response:
    return _answer(request, per_object=True)


def _answer(request: web.Request, per_object: bool) -> web.Response:
    text = render(collect(request.app[CONTEXT], per_object))
    return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})


def build_metrics_app(context: MgmtContext) -> web.Application:
    app = web.Application()
    app[CONTEXT] = context
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/per-object", metrics_per_object)
    return app
