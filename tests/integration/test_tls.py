"""AMQP over TLS (amqps) and HTTPS on a real embedded broker, with real clients (pika,
aio-pika) and certificates made by `openssl` (tests/tls_certs.py): publishing and
consuming, the EXTERNAL mechanism, client certificates refused, clients that do not speak
TLS, and the management API and metrics over HTTPS."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pyarrow as pa
import pytest
from pika.adapters.blocking_connection import BlockingConnection

import tls_certs
from helpers import wait_for
from kanin.config import BrokerConfig, UserSpec
from kanin.server.tls import amqps_context
from kanin.spark.client import connect as spark_connect
from kanin.spark.columns import ColumnLayout
from kanin.spark.offsets import OffsetRange
from kanin.spark.options import KaninOptions, Role, parse_options
from kanin.spark.publish import publish_batches
from kanin.spark.stream_read import read_range
from kanin.testing.embedded import EmbeddedBroker, running_broker
from mgmt_http import Api
from tls_certs import CLIENT_DN, Certificates

pytestmark = pytest.mark.kanin_only


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return tls_certs.make(tmp_path_factory.mktemp("certs"))


@contextmanager
def tls_broker(certs: Certificates, **overrides: Any) -> Iterator[EmbeddedBroker]:
    """A broker with amqps (client certificates asked for and verified by the CA) and the
    users guest, the client certificate's distinguished name, and its common name."""
    settings: dict[str, Any] = {
        "tls_cert": certs.server_cert,
        "tls_key": certs.server_key,
        "tls_ca": certs.ca,
        "tls_verify": "peer",
        "default_users": (
            UserSpec("guest", "guest"),
            UserSpec(CLIENT_DN, "not used by EXTERNAL"),
            UserSpec("tls-client", "not used by EXTERNAL"),
        ),
    }
    with running_broker(BrokerConfig(**{**settings, **overrides})) as broker:
        yield broker


def tls_params(broker: EmbeddedBroker, context: ssl.SSLContext, **overrides: Any) -> Any:
    options: dict[str, Any] = {
        "host": "localhost",  # the name the server certificate is for
        "port": broker.tls_port,
        "ssl_options": pika.SSLOptions(context, "localhost"),
        "credentials": pika.PlainCredentials("guest", "guest"),
        "connection_attempts": 1,
        "socket_timeout": 5,
        "blocked_connection_timeout": 5,
    }
    return pika.ConnectionParameters(**{**options, **overrides})


def external(broker: EmbeddedBroker, context: ssl.SSLContext) -> Any:
    return tls_params(broker, context, credentials=pika.credentials.ExternalCredentials())


def round_trip(connection: BlockingConnection, queue: str) -> None:
    """Publish (confirmed) and consume one message on a fresh exclusive queue."""
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(queue, exclusive=True)
    channel.basic_publish("", queue, b"over tls")
    got: list[bytes] = []
    channel.basic_consume(queue, lambda _ch, _m, _p, body: got.append(body), auto_ack=True)
    wait_for(connection, lambda: got == [b"over tls"], message=f"nothing consumed: {got}")


@pytest.fixture
def refusals(caplog: pytest.LogCaptureFixture) -> Callable[[str], str]:
    """Waits for the broker's warning about a failed TLS handshake that contains `text`
    (the broker logs on its own thread) and returns it."""
    caplog.set_level(logging.WARNING, logger="kanin.server.tls")

    def wait(text: str) -> str:
        for _ in range(1500):
            lines = [r.getMessage() for r in caplog.records if r.name == "kanin.server.tls"]
            found = [line for line in lines if text in line]
            if found:
                return found[0]
            time.sleep(0.01)
        raise AssertionError(f"no failed TLS handshake logged with {text!r}: {lines}")

    return wait


def users_connected(broker: EmbeddedBroker) -> list[tuple[str, str, str]]:
    """(user, mechanism, TLS protocol) of each open connection, read on the broker's loop."""
    return broker.call(
        lambda: sorted(
            (s.user.name, s.mechanism, s.opening.tls.protocol if s.opening.tls else "")
            for s in broker.server.connections
            if hasattr(s, "user")
        )
    )


def openssl_subject(certificate: Path) -> str:
    line = tls_certs.openssl(
        "x509", "-in", certificate, "-noout", "-subject", "-nameopt", "RFC2253"
    )
    return line.strip().removeprefix("subject=")


# -- clients over TLS --------------------------------------------------------------------


def test_pika_publishes_and_consumes_over_tls_with_a_password(certs: Certificates) -> None:
    with tls_broker(certs) as broker:
        context = certs.client_context(with_certificate=False)  # the server's is verified
        with pika.BlockingConnection(tls_params(broker, context)) as connection:
            round_trip(connection, "pika-tls")
            [(user, mechanism, protocol)] = users_connected(broker)
            assert (user, mechanism) == ("guest", "PLAIN")
            assert protocol in ("TLSv1.2", "TLSv1.3")
        # The plain port still serves beside it.
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as plain:
            round_trip(plain, "pika-plain")


def test_aio_pika_publishes_and_consumes_on_an_amqps_url(certs: Certificates) -> None:
    async def scenario(url: str) -> bytes:
        connection = await aio_pika.connect(url, ssl_context=certs.client_context(), timeout=10)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue("aio-tls", exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"amqps"), "aio-tls")
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        return message.body
        raise AssertionError("the iterator ended without a message")

    with tls_broker(certs) as broker:
        url = broker.amqps_url.replace("127.0.0.1", "localhost")
        assert asyncio.run(asyncio.wait_for(scenario(url), 20)) == b"amqps"


def test_tls_1_1_is_refused_by_the_broker(
    certs: Certificates, refusals: Callable[[str], str]
) -> None:
    context = certs.client_context(with_certificate=False)
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # else this client would not offer TLS 1.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    with tls_broker(certs) as broker:
        server_side = amqps_context(broker.server.config)
        assert server_side.minimum_version == ssl.TLSVersion.TLSv1_2
        assert all(  # TLS 1.2 ciphers: AEAD with forward secrecy only
            cipher["protocol"] == "TLSv1.3" or re.match("ECDHE-.*(GCM|CHACHA20)", cipher["name"])
            for cipher in server_side.get_ciphers()
        )
        # The broker hangs up (asyncio's TLS drops the protocol_version alert it would send:
        # the client sees the connection end).
        with (
            socket.create_connection(("127.0.0.1", broker.tls_port), timeout=10) as sock,
            pytest.raises(ssl.SSLError),
        ):
            context.wrap_socket(sock, server_hostname="localhost")
        line = refusals("TLS handshake with 127.0.0.1:")
        assert "unsupported protocol (the client offers no TLS version" in line


# -- EXTERNAL --------------------------------------------------------------------------------


def test_external_logs_in_by_the_certificates_distinguished_name(certs: Certificates) -> None:
    assert openssl_subject(certs.client_cert) == CLIENT_DN  # the form RabbitMQ documents
    with tls_broker(certs, mgmt_port=0) as broker:
        with pika.BlockingConnection(external(broker, certs.client_context())) as connection:
            round_trip(connection, "external-dn")
            assert [user[:2] for user in users_connected(broker)] == [(CLIENT_DN, "EXTERNAL")]
            [listed] = Api(broker.mgmt_url).get("/api/connections").json
        assert listed["user"] == CLIENT_DN
        assert listed["auth_mechanism"] == "EXTERNAL"
        assert listed["ssl"] is True
        assert listed["peer_cert_subject"] == CLIENT_DN
        assert listed["peer_cert_issuer"] == openssl_subject(certs.ca)


def test_external_logs_in_by_the_common_name_when_told_to(certs: Certificates) -> None:
    with tls_broker(certs, tls_cert_login_from="common_name") as broker:
        connection = pika.BlockingConnection(external(broker, certs.client_context()))
        round_trip(connection, "external-cn")
        assert [user[:2] for user in users_connected(broker)] == [("tls-client", "EXTERNAL")]
        connection.close()


def test_external_for_a_user_that_does_not_exist_is_access_refused(certs: Certificates) -> None:
    users = (UserSpec("guest", "guest"),)
    with tls_broker(certs, default_users=users) as broker:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="403"):
            pika.BlockingConnection(external(broker, certs.client_context()))
        with pika.BlockingConnection(tls_params(broker, certs.client_context())) as connection:
            round_trip(connection, "after-refusal")  # a password still works


def test_external_is_not_offered_to_a_client_without_a_certificate(certs: Certificates) -> None:
    with tls_broker(certs) as broker:
        without = certs.client_context(with_certificate=False)
        with pytest.raises(pika.exceptions.AuthenticationError, match="EXTERNAL"):
            pika.BlockingConnection(external(broker, without))
        # Nor over the plain port.
        plain = pika.ConnectionParameters(
            "127.0.0.1", broker.port, credentials=pika.credentials.ExternalCredentials()
        )
        with pytest.raises(pika.exceptions.AuthenticationError, match="EXTERNAL"):
            pika.BlockingConnection(plain)


# -- certificates refused, clients that do not speak TLS -------------------------------------


def test_a_client_certificate_from_an_unknown_ca_is_refused(
    certs: Certificates, refusals: Callable[[str], str]
) -> None:
    with tls_broker(certs) as broker:
        good = pika.BlockingConnection(external(broker, certs.client_context()))
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(tls_params(broker, certs.rogue_client_context()))
        round_trip(good, "still-served")  # the refusal did not disturb it
        assert "client certificate refused: unable to get local issuer" in refusals("refused")
        # The refused client never became a connection (guest would have logged in).
        assert [user[:2] for user in users_connected(broker)] == [(CLIENT_DN, "EXTERNAL")]
        good.close()


def test_fail_if_no_peer_cert_refuses_a_client_without_one(
    certs: Certificates, refusals: Callable[[str], str]
) -> None:
    with tls_broker(certs, tls_fail_if_no_peer_cert=True) as broker:
        without = certs.client_context(with_certificate=False)
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(tls_params(broker, without))
        refusals("a client certificate is required")
        with pika.BlockingConnection(tls_params(broker, certs.client_context())) as connection:
            round_trip(connection, "with-certificate")


def test_without_verify_peer_no_certificate_is_asked_for(certs: Certificates) -> None:
    with tls_broker(certs, tls_verify="none", tls_ca=None) as broker:
        # The client's certificate is not even asked for: EXTERNAL is not offered.
        with pytest.raises(pika.exceptions.AuthenticationError, match="EXTERNAL"):
            pika.BlockingConnection(external(broker, certs.client_context()))
        with pika.BlockingConnection(tls_params(broker, certs.rogue_client_context())) as conn:
            round_trip(conn, "no-verify")


@pytest.mark.parametrize(
    ("sent", "logged"),
    [
        (b"AMQP\x00\x00\x09\x01", "not TLS: a plain AMQP client on the amqps port?"),
        (b"\x16\x03\x01\x00\x05hello", "TLS handshake with 127.0.0.1:"),
        (b"GET / HTTP/1.1\r\n\r\n", "plain HTTP on the amqps port"),
        (b"", "no handshake in time"),
    ],
    ids=["amqp-header", "broken-hello", "http", "nothing"],
)
def test_a_client_not_speaking_tls_is_dropped_logged_and_disturbs_nobody(
    certs: Certificates, sent: bytes, logged: str, refusals: Callable[[str], str]
) -> None:
    with tls_broker(certs, handshake_timeout_s=1.0) as broker:
        good = pika.BlockingConnection(tls_params(broker, certs.client_context()))
        with socket.create_connection(("127.0.0.1", broker.tls_port), timeout=10) as sock:
            port = sock.getsockname()[1]
            sock.sendall(sent)  # nothing: the TLS handshake times out (handshake_timeout_s)
            while sock.recv(4096):  # whatever comes back (an alert), then the broker hangs up
                pass
        assert f":{port} failed" in refusals(logged)  # about this client
        round_trip(good, "undisturbed")
        good.close()
        with pika.BlockingConnection(tls_params(broker, certs.client_context())) as again:
            round_trip(again, "next-client")


def test_pika_without_tls_on_the_tls_port_fails_and_the_broker_serves_on(
    certs: Certificates,
) -> None:
    with tls_broker(certs) as broker:
        plain = pika.ConnectionParameters(
            "127.0.0.1", broker.tls_port, connection_attempts=1, socket_timeout=5
        )
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(plain)
        with pika.BlockingConnection(tls_params(broker, certs.client_context())) as connection:
            round_trip(connection, "served-on")


# -- HTTPS -----------------------------------------------------------------------------------


def test_the_management_api_and_metrics_answer_over_https(certs: Certificates) -> None:
    https = certs.client_context(with_certificate=False)
    with tls_broker(
        certs, mgmt_port=0, mgmt_tls=True, prometheus_port=0, prometheus_tls=True
    ) as broker:
        assert broker.mgmt_url.startswith("https://")
        api = Api(broker.mgmt_url.replace("127.0.0.1", "localhost"), tls=https)
        overview = api.get("/api/overview")
        assert overview.status == 200
        listeners = {(entry["protocol"], entry["port"]) for entry in overview.json["listeners"]}
        assert listeners == {
            ("amqp", broker.port),
            ("amqp/ssl", broker.tls_port),
            ("https", broker.mgmt_port),
            ("https/prometheus", broker.prometheus_port),
        }
        assert api.as_user("guest", "wrong").get("/api/whoami").status == 401
        metrics_url = broker.prometheus_url.replace("127.0.0.1", "localhost") + "/metrics"
        with urllib.request.urlopen(metrics_url, timeout=10, context=https) as response:
            assert response.status == 200
            assert b"rabbitmq_connections" in response.read()
        # A client that does not trust the CA is refused by its own verification.
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(metrics_url, timeout=10, context=ssl.create_default_context())


def test_plain_http_stays_the_default_for_the_management_api(certs: Certificates) -> None:
    with tls_broker(certs, mgmt_port=0) as broker:
        assert broker.mgmt_url.startswith("http://")
        assert Api(broker.mgmt_url).get("/api/overview").status == 200


# -- the Spark connector's client (aio-pika on an amqps:// URI) ------------------------------


def test_the_spark_connector_connects_to_an_amqps_uri(certs: Certificates) -> None:
    with tls_broker(certs) as broker:
        query = f"cafile={certs.ca}&certfile={certs.client_cert}&keyfile={certs.client_key}"
        options = KaninOptions(uri=f"amqps://localhost:{broker.tls_port}/?{query}&auth=external")

        async def scenario() -> list[tuple[str, str, str]]:
            connection = await spark_connect(options, "tls test")
            async with connection:
                channel = await connection.channel()
                await channel.declare_queue("spark-tls", exclusive=True)
                return users_connected(broker)  # the broker's loop is on another thread

        [(user, mechanism, _protocol)] = asyncio.run(asyncio.wait_for(scenario(), 20))
        assert (user, mechanism) == (CLIENT_DN, "EXTERNAL")


def numbered_ids(_keys: object, first: int, rows: int) -> list[str]:
    return [f"t:{n}" for n in range(first, first + rows)]


def test_the_spark_socket_reader_and_sink_work_over_amqps(certs: Certificates) -> None:
    """socket_conn.py's TLS path, used by every stream-range read on executors, queue mode
    and the sink: rows published with confirms, then a range of them read from the stream
    with a password and with EXTERNAL, all over amqps with the CA from the URI's query (the
    TLS port speaks nothing else)."""
    with tls_broker(certs) as broker:
        plain = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = plain.channel()
        channel.queue_declare("spark-tls-st", durable=True, arguments={"x-queue-type": "stream"})
        trust = f"cafile={certs.ca}"
        mine = f"{trust}&certfile={certs.client_cert}&keyfile={certs.client_key}"
        secure = f"amqps://guest:guest@localhost:{broker.tls_port}/%2F"
        write = parse_options({"uri": f"{secure}?{trust}", "queue": "spark-tls-st"}, Role.WRITE)
        bodies = [b"m%d" % n for n in range(3000)]
        batches = [
            pa.RecordBatch.from_pydict({"body": bodies[n : n + 1000]}) for n in (0, 1000, 2000)
        ]
        assert publish_batches(write, ColumnLayout(body=0), batches, numbered_ids) == 3000

        external = f"amqps://localhost:{broker.tls_port}/?{mine}&auth=external"
        for uri in (f"{secure}?{trust}", external):
            read = parse_options({"uri": uri, "queue": "spark-tls-st"}, Role.READ)
            got = list(read_range(read, OffsetRange(1000, 2500)))
            assert [row[8] for row in got] == list(range(1000, 2500))  # the offset column
            assert [row[0] for row in got] == [b"m%d" % n for n in range(1000, 2500)]
        plain.close()
