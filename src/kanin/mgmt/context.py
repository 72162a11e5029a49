"""What every handler gets: the broker, and the few helpers all of them share."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from kanin.mgmt.auth import authenticate
from kanin.mgmt.errors import ApiError
from kanin.mgmt.rates import RateStore

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.broker import Broker


@dataclass
class MgmtContext:
    broker: Broker
    # (protocol, address, port) of every listener, for /api/overview
    listeners: list[tuple[str, str, int]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    # The server's own measures, where it takes them (None: not measured, not reported).
    read_rss: Callable[[], int | None] | None = None
    disk_free: Callable[[], int] | None = None
    # Message rates: sampled every few seconds while the management API runs (rates.py).
    rates: RateStore = field(default_factory=RateStore)

    async def saved(self) -> None:
        """Until the definitions as they are now are on disk: a change made through the API
        is answered, as an AMQP declare-ok is, only once it is durable. 500 if the save
        failed (the change stays, and is saved by a later attempt, as for AMQP)."""
        keeper = self.broker.definitions
        if keeper is None:
            return
        outcome: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        if keeper.when_saved(outcome.set_result):
            problem = await outcome
            if problem is not None:
                raise ApiError(500, "internal_server_error", problem)

    def unacked_by_queue(self) -> Counter[int]:
        """Deliveries awaiting their ack, per queue (by id): counted from the channels'
        ledgers when asked, so the delivery path pays nothing for the API."""
        counts: Counter[int] = Counter()
        for session in self.broker.connections:
            for channel in list(session.channels.values()):
                for record in channel.unacked.outstanding():
                    counts[id(record.queue)] += 1
        return counts


CONTEXT = web.AppKey("kanin_mgmt", MgmtContext)


def context_of(request: web.Request) -> MgmtContext:
    return request.app[CONTEXT]


def user_of(request: web.Request) -> User:
    """Whom the request speaks for. The auth middleware has already let it through; it is
    checked again here (a salted SHA-256, microseconds) rather than kept on the request,
    which aiohttp before 3.12 has no typed storage for."""
    return authenticate(
        request.app[CONTEXT].broker, request.headers.get("Authorization"), request.remote
    )
