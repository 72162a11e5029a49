"""Who is asking: HTTP basic auth against kanin's users, and RabbitMQ's user tags.

The password check is the AMQP login's (UserStore.authenticate), and a loopback-only user
(`guest`) may use the API only from loopback, as on RabbitMQ. Tags, as RabbitMQ's
management plugin reads them (https://www.rabbitmq.com/management.html#permissions):
- management: the API at all, and the objects of the vhosts the user has permissions in;
- policymaker: as management, and manages the policies of the vhosts the user has
  permissions in (mgmt/policies.py);
- monitoring: as management, and reads everything: every vhost, connection and channel;
- administrator: everything.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kanin.core.permissions import Authorize, authorizer
from kanin.core.session.handshake import is_loopback
from kanin.mgmt.errors import ApiError, login_failed, not_authorised, not_found

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.broker import Broker
    from kanin.core.vhost import VirtualHost

MANAGEMENT_TAGS = frozenset({"management", "policymaker", "monitoring", "administrator"})


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) from an `Authorization: Basic ...` header; None if there is none
    or it is not basic auth."""
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, colon, password = decoded.partition(":")
    return (name, password) if colon else None


def authenticate(broker: Broker, header: str | None, remote: str | None) -> User:
    """The user the request speaks for; ApiError 401 as RabbitMQ answers it."""
    credentials = parse_basic(header)
    if credentials is None:
        raise login_failed()
    user = broker.users.authenticate(*credentials)
    if user is None:
        raise login_failed()
    if user.name in broker.config.loopback_users and not is_loopback(remote or ""):
        raise not_authorised("User can only log in via localhost")
    if not MANAGEMENT_TAGS.intersection(user.tags):
        raise not_authorised("Not management user")
    return user


def is_admin(user: User) -> bool:
    return "administrator" in user.tags


def is_monitor(user: User) -> bool:
    return is_admin(user) or "monitoring" in user.tags


def require_admin(user: User) -> None:
    if not is_admin(user):
        raise not_authorised("Not administrator user")


def require_monitor(user: User) -> None:
    if not is_monitor(user):
        raise not_authorised("Not monitor user")


def may_see(user: User, vhost_name: str) -> bool:
    """Reads: monitoring and administrator users see every vhost, others their own."""
    return is_monitor(user) or vhost_name in user.permissions


def visible_vhosts(broker: Broker, user: User) -> list[VirtualHost]:
    return [vhost for name, vhost in broker.vhosts.items() if may_see(user, name)]


def readable_vhost(broker: Broker, user: User, name: str) -> VirtualHost:
    """A vhost the user may read: 404 if there is none, 401 if it is not theirs."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        raise not_found()
    if not may_see(user, name):
        raise no_vhost_access()
    return vhost


def writable_vhost(broker: Broker, user: User, name: str) -> VirtualHost:
    """A vhost the user may change things in: even an administrator needs permissions
    there, as in RabbitMQ (changes go through the user's configure/write/read patterns)."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        raise ApiError(404, "not_found", "vhost_not_found")
    if name not in user.permissions:
        raise no_vhost_access()
    return vhost


def no_vhost_access() -> ApiError:
    return not_authorised("User not authorised to access virtual host")


@dataclass(frozen=True)
class Grantee:
    """A user acting in a vhost through the API: what core/permissions.py checks."""

    user: User
    vhost: VirtualHost


def authorize(user: User, vhost: VirtualHost) -> Authorize:
    """The user's permission check in the vhost, as the AMQP path applies it."""
    return authorizer(Grantee(user, vhost))
