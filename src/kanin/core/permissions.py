"""Permission checks with RabbitMQ's refusal text.

Where RabbitMQ checks, and in which order, matters to clients: a declare refused for
a permission must not have been refused for something else first, nor the other way
round. The handlers and the vhost follow rabbit_channel (3.10) step by step; the
vhost, which knows nothing of users, gets the check as an `Authorize` callback.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.vhost import VirtualHost

# (kind, resource, name): raises ChannelError 403 unless the user may.
Authorize = Callable[[str, str, str], None]

# RabbitMQ checks (and names, in its refusal) the default exchange as `amq.default`.
DEFAULT_EXCHANGE_NAME = "amq.default"


class Grantee(Protocol):
    """Who asks: a user, in the vhost its connection opened (a channel's ChannelServices)."""

    @property
    def user(self) -> User: ...

    @property
    def vhost(self) -> VirtualHost: ...


def check_permission(who: Grantee, kind: str, resource: str, name: str) -> None:
    """kind: configure | write | read; resource: exchange | queue."""
    user, vhost = who.user, who.vhost
    if resource == "exchange" and name == "":
        name = DEFAULT_EXCHANGE_NAME
    permission = user.permissions.get(vhost.name)
    if permission is not None and permission.allows(kind, name):
        return
    # RabbitMQ 3.10 does not say which of the three permissions was missing.
    raise ChannelError(
        C.ACCESS_REFUSED,
        f"access to {resource} '{name}' in vhost '{vhost.name}' refused for user '{user.name}'",
    )


def authorizer(who: Grantee) -> Authorize:
    """The permission check of one user in one vhost, for code that knows no users."""
    return partial(check_permission, who)
