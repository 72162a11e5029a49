"""The management web UI: static HTML, CSS and JavaScript (the ui/ folder, shipped as
package data) served at `/` and `/ui/...` without authentication, as RabbitMQ serves its
UI. The files hold no broker data: the pages ask the API (/api/...) with the credentials
the user gave the login form, kept in the browser's sessionStorage for the tab's life."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

UI_DIR = Path(__file__).resolve().parent / "ui"
# The pages are small and change with kanin's version: the browser asks each time
# whether its copy is current (a 304 when it is), so an upgrade shows at once.
NO_CACHE = {"Cache-Control": "no-cache"}


def is_public(path: str) -> bool:
    return path == "/" or path.startswith("/ui/")


def asked_by_script(request: web.Request) -> bool:
    """The UI's own requests say so, as scripts conventionally do."""
    return request.headers.get("X-Requested-With") == "XMLHttpRequest"


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(UI_DIR / "index.html", headers=NO_CACHE)


async def ui_file(request: web.Request) -> web.FileResponse:
    name = request.match_info["file"]
    path = UI_DIR / name
    # Only the folder's own files, by plain name: no "..", no subfolders.
    if "/" in name or name.startswith(".") or not path.is_file():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers=NO_CACHE)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/ui/{file}", ui_file)
