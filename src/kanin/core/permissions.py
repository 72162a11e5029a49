"""Permission checks with RabbitMQ's refusal text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError

if TYPE_CHECKING:
    from kanin.core.ports import ConnectionPort


def check_permission(port: ConnectionPort, kind: str, resource: str, name: str) -> None:
    """kind: configure | write | read; resource: exchange | queue."""
    user, vhost = port.user, port.vhost
    permission = user.permissions.get(vhost.name)
    if permission is not None and permission.allows(kind, name):
        return
    # RabbitMQ 3.10 does not say which of the three permissions was missing.
    raise ChannelError(
        C.ACCESS_REFUSED,
        f"access to {resource} '{name}' in vhost '{vhost.name}' refused for user '{user.name}'",
    )
