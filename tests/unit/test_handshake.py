"""The pure negotiation rules of the handshake: SASL parsing, tune limits, loopback."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, encode

from kanin import __version__
from kanin.amqp.errors import AMQPError
from kanin.config import BrokerConfig
from kanin.core.session import handshake


def amqplain(login: str, password: str) -> bytes:
    table = encode.field_table({"LOGIN": login, "PASSWORD": password})
    return table[4:]  # AMQPLAIN drops the table's length prefix


def test_plain_credentials() -> None:
    assert handshake.parse_credentials("PLAIN", "\x00guest\x00secret") == ("guest", "secret")
    assert handshake.parse_credentials("PLAIN", b"authz\x00bob\x00pw") == ("bob", "pw")


def test_plain_malformed_is_403() -> None:
    with pytest.raises(AMQPError) as info:
        handshake.parse_credentials("PLAIN", "no-separators")
    assert info.value.reply_code == 403


def test_amqplain_credentials() -> None:
    assert handshake.parse_credentials("AMQPLAIN", amqplain("alice", "pw")) == ("alice", "pw")


def test_amqplain_garbage_is_403() -> None:
    with pytest.raises(AMQPError) as info:
        handshake.parse_credentials("AMQPLAIN", struct.pack(">B", 200) + b"junk")
    assert info.value.reply_code == 403


def test_unknown_mechanism_closes_silently() -> None:
    with pytest.raises(handshake.SilentClose, match="unknown authentication mechanism 'X'"):
        handshake.parse_credentials("X", "")


def test_server_properties_advertise_rabbitmq_capabilities() -> None:
    start = handshake.connection_start()
    capabilities = start.server_properties["capabilities"]
    for name in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ):
        assert capabilities[name] is True
    assert start.mechanisms.split() == ["PLAIN", "AMQPLAIN"]
    assert start.locales == "en_US"


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ((0, 0, 0), (2047, 131072, 0)),
        ((10, 4096, 30), (10, 4096, 30)),
        ((2047, 131072, 60), (2047, 131072, 60)),
    ],
)
def test_tune_negotiation(client: tuple[int, int, int], expected: tuple[int, int, int]) -> None:
    channel_max, frame_max, heartbeat = client
    ok = commands.Connection.TuneOk(
        channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
    )
    assert handshake.negotiate_tune(BrokerConfig(), ok) == expected


def test_tune_frame_max_above_server_is_530() -> None:
    ok = commands.Connection.TuneOk(channel_max=0, frame_max=131073, heartbeat=0)
    with pytest.raises(AMQPError) as info:
        handshake.negotiate_tune(BrokerConfig(), ok)
    assert info.value.reply_code == 530


def test_tune_frame_max_below_minimum_closes_silently() -> None:
    ok = commands.Connection.TuneOk(channel_max=0, frame_max=1000, heartbeat=0)
    with pytest.raises(handshake.SilentClose):
        handshake.negotiate_tune(BrokerConfig(), ok)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("192.168.1.5", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("not-an-address", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    # guest may only connect from loopback; this is the rule that decides it.
    assert handshake.is_loopback(host) is loopback


def test_server_properties_claim_rabbitmq_semantics_and_name_kanin() -> None:
    properties = handshake.connection_start().server_properties
    # What clients key RabbitMQ semantics on (kombu: product RabbitMQ, version 3.3 to 4.0).
    assert (properties["product"], properties["version"]) == ("RabbitMQ", "3.10.8")
    # kanin deliberately reports RabbitMQ as its product; these say which broker it is.
    assert properties["kanin_version"] == __version__
    assert properties["platform"].startswith(f"kanin {__version__} on Python ")
    assert properties["information"].startswith(f"kanin {__version__}, ")
    assert properties["cluster_name"].startswith("kanin@")
