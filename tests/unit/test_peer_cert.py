"""The user name EXTERNAL takes from a client certificate, the mechanisms offered, and the TLS
settings a BrokerConfig accepts: pure parts, no sockets (tests/integration/test_tls.py has
the real connections)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from kanin.amqp import constants as C
from kanin.config import BrokerConfig, UserSpec
from kanin.core.session.peer_cert import (
    TlsPeer,
    common_name,
    distinguished_name,
    login_name,
)
from kanin.testing.session_pair import SessionPair

# As Python's ssl module gives a subject: RDNs in the certificate's order, most general first.
SUBJECT = (
    (("countryName", "SE"),),
    (("organizationName", "kanin tests"),),
    (("organizationalUnitName", "clients"),),
    (("commonName", "app-1"),),
)


def test_a_distinguished_name_lists_the_most_specific_part_first_with_short_names() -> None:
    assert distinguished_name(SUBJECT) == "CN=app-1,OU=clients,O=kanin tests,C=SE"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("a,b", "a\\,b"),
        ('say "hi"+<you>;', 'say \\"hi\\"\\+\\<you\\>\\;'),
        ("back\\slash", "back\\\\slash"),
        (" leading", "\\ leading"),
        ("#hash", "\\#hash"),
        ("trailing ", "trailing\\ "),
        (" ", "\\ "),
        ("in side", "in side"),
        ("nul\x00", "nul\\00"),
        ("åäö", "åäö"),
    ],
)
def test_special_characters_in_a_value_are_escaped_as_rfc_4514_asks(
    value: str, written: str
) -> None:
    assert distinguished_name(((("commonName", value),),)) == f"CN={written}"


def test_a_multi_valued_rdn_is_joined_with_plus_and_unknown_attributes_keep_their_name() -> None:
    subject = ((("organizationName", "o"),), (("commonName", "x"), ("userId", "7")))
    assert distinguished_name(subject) == "CN=x+UID=7,O=o"
    assert distinguished_name(((("emailAddress", "a@b"),),)) == "emailAddress=a@b"
    assert distinguished_name(((("2.5.4.97", "v"),),)) == "2.5.4.97=v"


def test_the_common_name_is_the_first_cn_or_none() -> None:
    assert common_name(SUBJECT) == "app-1"
    assert common_name(((("commonName", "one"),), (("commonName", "two"),))) == "one"
    assert common_name(((("organizationName", "o"),),)) is None


def test_the_login_name_follows_ssl_cert_login_from() -> None:
    peer = TlsPeer("TLSv1.3", "TLS_AES_256_GCM_SHA384", SUBJECT, SUBJECT)
    assert login_name(peer, "distinguished_name") == "CN=app-1,OU=clients,O=kanin tests,C=SE"
    assert login_name(peer, "common_name") == "app-1"


def test_there_is_no_login_name_without_a_verified_certificate() -> None:
    assert login_name(None, "common_name") is None
    assert login_name(TlsPeer("TLSv1.3", "TLS_AES_256_GCM_SHA384"), "common_name") is None


# -- BrokerConfig ----------------------------------------------------------------------------

PEM = {"tls_cert": Path("server.pem"), "tls_key": Path("server.key")}


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"tls_cert": Path("server.pem")}, "tls_cert and tls_key go together"),
        ({"tls_key": Path("server.key")}, "tls_cert and tls_key go together"),
        ({**PEM, "tls_port": 70000}, "tls_port must be 0..65535"),
        ({**PEM, "tls_verify": "verify_peer"}, "tls_verify must be 'none' or 'peer'"),
        ({**PEM, "tls_verify": "peer"}, "tls_verify 'peer' needs tls_ca"),
        ({**PEM, "tls_fail_if_no_peer_cert": True}, "needs tls_verify 'peer'"),
        ({**PEM, "tls_cert_login_from": "cn"}, "tls_cert_login_from must be one of"),
        ({"mgmt_tls": True}, "mgmt_tls needs tls_cert and tls_key"),
        ({"prometheus_tls": True}, "prometheus_tls needs tls_cert and tls_key"),
    ],
)
def test_tls_settings_that_cannot_work_are_refused(settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        BrokerConfig(**settings)


def test_tls_is_on_only_with_a_certificate_and_key() -> None:
    assert not BrokerConfig().tls
    config = BrokerConfig(**PEM, tls_ca=Path("ca.pem"), tls_verify="peer", mgmt_tls=True)
    assert config.tls
    assert config.tls_cert_login_from == "distinguished_name"  # RabbitMQ's default


# -- EXTERNAL in the handshake, on a socket-free session -------------------------------------

CLIENT = TlsPeer("TLSv1.3", "TLS_AES_256_GCM_SHA384", SUBJECT, SUBJECT)
CAPABILITIES = {"capabilities": {"authentication_failure_close": True}}


def _external(pair: SessionPair, tls: TlsPeer | None) -> commands.Connection.Start:
    """The header sent on a connection with that TLS; connection.start, then EXTERNAL chosen."""
    pair.session.opening.tls = tls
    pair.send(C.PROTOCOL_HEADER)
    start = pair.expect(0)
    pair.send_method(
        0,
        commands.Connection.StartOk(
            client_properties=CAPABILITIES, mechanism="EXTERNAL", response=""
        ),
    )
    assert isinstance(start, commands.Connection.Start)
    return start


def _users(*names: str) -> BrokerConfig:
    return BrokerConfig(default_users=tuple(UserSpec(name, "pw") for name in names))


def test_external_logs_in_the_user_the_certificate_names_without_a_password() -> None:
    pair = SessionPair(_users("CN=app-1,OU=clients,O=kanin tests,C=SE"))
    start = _external(pair, CLIENT)
    assert start.mechanisms.split() == ["PLAIN", "AMQPLAIN", "EXTERNAL"]
    assert isinstance(pair.expect(0), commands.Connection.Tune)
    assert pair.session.user.name == "CN=app-1,OU=clients,O=kanin tests,C=SE"


def test_external_by_common_name() -> None:
    config = replace(_users("app-1"), tls_cert_login_from="common_name")
    pair = SessionPair(config)
    _external(pair, CLIENT)
    assert isinstance(pair.expect(0), commands.Connection.Tune)
    assert pair.session.user.name == "app-1"


@pytest.mark.parametrize(
    ("login_from", "subject"),
    [
        ("distinguished_name", SUBJECT),  # no such user
        ("common_name", ((("organizationName", "no cn"),),)),  # no name at all
    ],
)
def test_external_without_a_user_of_that_name_is_403(login_from: str, subject: Any) -> None:
    pair = SessionPair(replace(_users("app-1"), tls_cert_login_from=login_from))
    _external(pair, TlsPeer("TLSv1.3", "TLS_AES_256_GCM_SHA384", subject, subject))
    close = pair.expect(0)
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == C.ACCESS_REFUSED
    assert "EXTERNAL" in close.reply_text


@pytest.mark.parametrize(
    "tls", [None, TlsPeer("TLSv1.3", "TLS_AES_256_GCM_SHA384")], ids=["plain", "no-certificate"]
)
def test_external_is_neither_offered_nor_accepted_without_a_verified_certificate(
    tls: TlsPeer | None,
) -> None:
    pair = SessionPair(_users("app-1"))
    start = _external(pair, tls)
    assert start.mechanisms.split() == ["PLAIN", "AMQPLAIN"]
    assert pair.frames() == []  # as for a mechanism never offered: the socket is closed
    assert pair.transport.closed
