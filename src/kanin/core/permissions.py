"""Permission checks with RabbitMQ's refusal text.

Where RabbitMQ checks, and in which order, matters to clients: a declare refused for
a permission must not have been refused for something else first, nor the other way
round. The handlers and the vhost follow rabbit_channel (3.10) step by step; the
vhost, which knows nothing of users, gets the check as an `Authorize` callback.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError

if TYPE_CHECKING:
    from kanin.core.ports import ConnectionPort

# (kind, resource, name): raises ChannelError 403 unless the user may.
Authorize = Callable[[str, str, str], None]

# RabbitMQ checks (and names, in its refusal) the default exchange as `amq.default`.
DEFAULT_EXCHANGE_NAME = "amq.default"


def check_permission(port: ConnectionPort, kind: str, resource: str, name: str) -> None:
    """kind: configure | write | read; resource: exchange | queue."""
    user, vhost = port.user, port.vhost
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


def authorizer(port: ConnectionPort) -> Authorize:
    """The permission check of one connection, for code that has no connection."""
    return partial(check_permission, port)
