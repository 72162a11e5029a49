"""The management API's listener, on the broker's own event loop: no thread, no loop of
its own. The socket is made by the loop (create_server), as the AMQP listener's is, so
a busy port is reported the same way."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

from aiohttp import web

from kanin.mgmt.app import build_app
from kanin.mgmt.context import MgmtContext


class MgmtServer:
    def __init__(
        self,
        context: MgmtContext,
        build: Callable[[MgmtContext], web.Application] = build_app,
    ) -> None:
        """`build` makes the application served: the management API's by default, or
        another on the same terms (the Prometheus metrics', prometheus/app.py)."""
        self.context = context
        self._build = build
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None

    async def start(
        self, bind: str | None, port: int, tls: ssl.SSLContext | None = None
    ) -> list[tuple[str, int]]:
        """Listen, over HTTPS with `tls`; the (host, port) of every listening socket."""
        runner = web.AppRunner(self._build(self.context), access_log=None)
        await runner.setup()
        self._runner = runner
        assert runner.server is not None  # made by setup()
        self._server = await asyncio.get_running_loop().create_server(
            runner.server, host=bind, port=port, reuse_address=True, ssl=tls
        )
        return [_address(sock) for sock in self._server.sockets]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _address(sock: socket.socket) -> tuple[str, int]:
    name = sock.getsockname()
    return str(name[0]), int(name[1])
