"""Connection negotiation rules: server properties, SASL, tune limits. Pure functions."""

from __future__ import annotations

import ipaddress
import platform
import struct
from typing import Any

from pamqp import commands, decode

from kanin import __version__
from kanin.amqp import constants as C
from kanin.amqp.errors import AMQPError, ConnectionError_
from kanin.amqp.methods import build
from kanin.amqp.tables import check_table_depth
from kanin.config import BrokerConfig

MECHANISMS = "PLAIN AMQPLAIN"
# Offered as well to a client whose TLS certificate verified, as RabbitMQ does with the
# rabbitmq_auth_mechanism_ssl plugin; last, so a client taking the first mechanism it knows
# keeps logging in with a password.
EXTERNAL = "EXTERNAL"

CAPABILITIES: dict[str, Any] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}


class SilentClose(Exception):
    """A handshake failure RabbitMQ answers by closing the socket without connection.close."""


# The RabbitMQ release whose behaviour kanin reproduces, and reports as its version.
RABBITMQ_VERSION = "3.10.8"


def server_properties() -> dict[str, Any]:
    """connection.start's server properties. Clients choose RabbitMQ semantics by `product`
    and `version`: kombu (so Celery) sends basic.qos with global=true only to "RabbitMQ"
    3.3-3.x, since a per-consumer limit set later does not reach an existing consumer there;
    to any other product it sends global=false and expects raising the prefetch to work for
    its running consumer, so a worker holding as many ETA tasks as its prefetch would stop
    taking tasks. kanin implements basic.qos as RabbitMQ 3.10 does (per-consumer for
    global=false, see https://www.rabbitmq.com/consumer-prefetch.html) and other clients
    rely on that, so rather than bend those semantics it says what it is compatible with:
    product RabbitMQ, version 3.10.8. It stays identifiable: platform, information,
    cluster_name and kanin_version name kanin."""
    return {
        "capabilities": CAPABILITIES,
        "cluster_name": f"kanin@{platform.node()}",
        "product": "RabbitMQ",
        "version": RABBITMQ_VERSION,
        "platform": f"kanin {__version__} on Python {platform.python_version()}",
        "copyright": "The kanin authors",
        "information": (
            f"kanin {__version__}, an AMQP 0-9-1 broker that behaves as RabbitMQ "
            f"{RABBITMQ_VERSION}. Licensed under the Apache License 2.0"
        ),
        "kanin_version": __version__,
    }


def connection_start(mechanisms: str = MECHANISMS) -> commands.Connection.Start:
    properties = server_properties()
    return build(
        commands.Connection.Start,
        version_major=0,
        version_minor=9,
        server_properties=properties,
        mechanisms=mechanisms,
        locales="en_US",
    )


def parse_credentials(mechanism: str, response: str | bytes) -> tuple[str, str]:
    """(username, password) from a SASL response, or a 403/503 AMQPError."""
    raw = response.encode() if isinstance(response, str) else response
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            raise ConnectionError_(C.ACCESS_REFUSED, "Invalid PLAIN authentication response")
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        # AMQPLAIN sends a field table without its 4-byte length prefix.
        try:
            table_bytes = struct.pack(">I", len(raw)) + raw
            check_table_depth(table_bytes)
            _, table = decode.field_table(table_bytes)
        except Exception as exc:  # pamqp raises several kinds on bad input
            raise ConnectionError_(C.ACCESS_REFUSED, "Invalid AMQPLAIN response") from exc
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        if not isinstance(login, str | bytes) or not isinstance(password, str | bytes):
            raise ConnectionError_(C.ACCESS_REFUSED, "AMQPLAIN response lacks LOGIN or PASSWORD")
        return _text(login), _text(password)
    if mechanism == EXTERNAL:  # known, but offered only over TLS with a client certificate
        raise SilentClose("invalid authentication mechanism 'EXTERNAL': no client certificate")
    raise SilentClose(f"unknown authentication mechanism '{mechanism}'")


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def login_refused(mechanism: str) -> AMQPError:
    return ConnectionError_(
        C.ACCESS_REFUSED,
        f"Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile.",
    )


def negotiate_tune(config: BrokerConfig, ok: commands.Connection.TuneOk) -> tuple[int, int, int]:
    """(channel_max, frame_max, heartbeat) agreed from the client's tune-ok."""
    channel_max = ok.channel_max or config.channel_max
    if config.channel_max and channel_max > config.channel_max:
        raise ConnectionError_(
            C.NOT_ALLOWED,
            f"negotiated channel_max = {channel_max} is higher than the maximum "
            f"allowed value ({config.channel_max})",
        )
    frame_max = ok.frame_max or config.frame_max
    if config.frame_max and frame_max > config.frame_max:
        raise ConnectionError_(
            C.NOT_ALLOWED, f"frame_max={frame_max} > {config.frame_max} max size"
        )
    if frame_max and frame_max < C.FRAME_MIN_SIZE:
        raise SilentClose(f"frame_max={frame_max} < {C.FRAME_MIN_SIZE} min size")
    return channel_max, frame_max, ok.heartbeat


def client_capabilities(client_properties: dict[str, Any] | None) -> dict[str, Any]:
    capabilities = (client_properties or {}).get("capabilities")
    return capabilities if isinstance(capabilities, dict) else {}


def is_loopback(host: str) -> bool:
    """Is a peer address loopback (127.0.0.0/8, ::1, or IPv4-mapped 127.x)?"""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
