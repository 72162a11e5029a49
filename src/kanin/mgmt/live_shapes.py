"""JSON shapes of what lives only while clients are connected (connections, channels,
consumers), field for field as RabbitMQ 3.10's management API writes them; counters it
keeps from its VM (reductions, garbage collection) and rates are left out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kanin.core.session.peer_cert import TlsPeer, distinguished_name
from kanin.core.session.state import State
from kanin.mgmt.shapes import NODE, jsonable

if TYPE_CHECKING:
    from kanin.core.broker import Broker
    from kanin.core.channel import Channel
    from kanin.core.consumer import Consumer
    from kanin.core.session.session import Session


def open_sessions(broker: Broker) -> Iterator[Session]:
    """Connections past connection.open, oldest first (what RabbitMQ lists)."""
    sessions = [s for s in broker.connections if s.state in (State.OPEN, State.CLOSING)]
    return iter(sorted(sessions, key=lambda session: (session.connected_at_ms, session.name)))


def connection_shape(session: Session) -> dict[str, Any]:
    peer_host, peer_port = str(session.peer[0]), int(session.peer[1])
    host, port = str(session.local[0]), int(session.local[1])
    properties = session.client_properties
    return {
        "name": session.name,
        "node": NODE,
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "state": "blocked" if session.blocked else "running",
        "user": session.user.name,
        "user_who_performed_action": session.user.name,
        "vhost": session.vhost.name,
        "host": host,
        "port": port,
        "peer_host": peer_host,
        "peer_port": peer_port,
        **tls_fields(session.opening.tls),
        "auth_mechanism": session.mechanism,
        "channel_max": session.channel_max,
        "frame_max": session.frame_max,
        "timeout": session.heartbeat_s,
        "channels": len(session.channels),
        "connected_at": session.connected_at_ms,
        "client_properties": jsonable(properties),
        "user_provided_name": jsonable(properties.get("connection_name")),
        "recv_oct": session.bytes_received,
        "send_oct": session.bytes_sent,
    }


def tls_fields(tls: TlsPeer | None) -> dict[str, Any]:
    """A connection's TLS as RabbitMQ lists it (protocol as "tlsv1.3"; the cipher by
    OpenSSL's name); null for a plain connection, and for the certificate without one."""
    subject = tls.subject if tls is not None else None
    issuer = tls.issuer if tls is not None else None
    return {
        "ssl": tls is not None,
        "ssl_protocol": tls.protocol.lower() if tls is not None else None,
        "ssl_cipher": tls.cipher if tls is not None else None,
        "peer_cert_subject": distinguished_name(subject) if subject else None,
        "peer_cert_issuer": distinguished_name(issuer) if issuer else None,
    }


def channel_name(session: Session, channel: Channel) -> str:
    return f"{session.name} ({channel.id})"


def channel_shape(session: Session, channel: Channel) -> dict[str, Any]:
    confirms = channel.confirms
    return {
        "name": channel_name(session, channel),
        "node": NODE,
        "number": channel.id,
        "user": session.user.name,
        "user_who_performed_action": session.user.name,
        "vhost": session.vhost.name,
        "state": "closing" if channel.closing else "running",
        "connection_details": {
            "name": session.name,
            "peer_host": str(session.peer[0]),
            "peer_port": int(session.peer[1]),
        },
        "consumer_count": len(channel.consumers),
        "prefetch_count": channel.consumer_prefetch,
        "global_prefetch_count": channel.global_prefetch,
        "confirm": confirms is not None,
        "transactional": channel.tx is not None,
        "messages_unacknowledged": len(channel.unacked),
        "messages_unconfirmed": confirms.pending_count if confirms is not None else 0,
        "messages_uncommitted": _uncommitted(channel, "publish"),
        "acks_uncommitted": _uncommitted(channel, "settle"),
    }


def _uncommitted(channel: Channel, kind: str) -> int:
    return sum(1 for what, _ in channel.tx or () if what == kind)


def consumer_shape(session: Session, channel: Channel, consumer: Consumer) -> dict[str, Any]:
    return {
        "consumer_tag": consumer.tag,
        "queue": {"name": consumer.queue.name, "vhost": consumer.queue.vhost},
        "channel_details": {
            "name": channel_name(session, channel),
            "number": channel.id,
            "connection_name": session.name,
            "node": NODE,
            "peer_host": str(session.peer[0]),
            "peer_port": int(session.peer[1]),
            "user": session.user.name,
        },
        "ack_required": not consumer.no_ack,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch,
        "arguments": jsonable(consumer.arguments),
        **_activity(consumer),
    }


def _activity(consumer: Consumer) -> dict[str, Any]:
    """With x-single-active-consumer only the earliest registered consumer receives."""
    queue = consumer.queue
    if not queue.args.single_active_consumer:
        return {"active": True, "activity_status": "up"}
    active = next(iter(queue.consumers), None) is consumer
    return {"active": active, "activity_status": "single_active" if active else "waiting"}
