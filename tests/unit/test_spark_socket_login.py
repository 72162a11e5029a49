"""The socket consumer's login and TLS settings come from the uri option, as aio-pika
reads them for the connector's other connections."""

from __future__ import annotations

import ssl

from kanin.spark.socket_conn import login, tls_context


def test_plain_login_takes_the_uri_s_user_and_password_decoded() -> None:
    assert login("amqp://al%40ice:p%3Ass@h/%2F") == ("PLAIN", "\0al@ice\0p:ss")
    assert login("amqp://h/") == ("PLAIN", "\0guest\0guest")


def test_auth_external_logs_in_by_the_client_certificate() -> None:
    assert login("amqps://h/?cafile=ca.pem&auth=EXTERNAL") == ("EXTERNAL", "")


def test_a_tls_context_verifies_the_server_by_default() -> None:
    context = tls_context("amqps://h/")
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
