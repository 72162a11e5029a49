"""`kanin server` with TLS, as a real process (uvloop, as in production): amqps beside the
plain port, EXTERNAL, HTTPS management, and the start-up errors for certificate files and
TLS options, each one line naming the file, option or port."""

from __future__ import annotations

import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

import tls_certs
from helpers import one_line_error, run_server, start_kanin, start_kanin_on_free_port
from mgmt_http import Api
from tls_certs import CLIENT_DN, Certificates

pytestmark = pytest.mark.kanin_only


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return tls_certs.make(tmp_path_factory.mktemp("certs"))


PERMIT = {"configure": ".*", "write": ".*", "read": ".*"}


def tls_flags(certs: Certificates, *extra: str, port: int = 0) -> list[str]:
    return [
        *("--tls-port", str(port), "--tls-cert", str(certs.server_cert)),
        *("--tls-key", str(certs.server_key), *extra),
    ]


def logged_port(log: list[str], pattern: str) -> int:
    """The port of the first log line matching `pattern` (the broker logs its listeners
    one after the other, just after the plain AMQP one start_kanin waited for)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in list(log):
            if match := re.search(pattern + r" on 127\.0\.0\.1 port (\d+)", line):
                return int(match.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no log line matches {pattern!r}:\n{''.join(log)}")


@pytest.fixture
def tls_process(tmp_path: Path, certs: Certificates) -> Iterator[tuple[int, int, list[str]]]:
    """A broker process with amqps (client certificates verified, EXTERNAL by common name)
    and HTTPS management: (amqps port, management port, its log)."""
    log: list[str] = []
    flags = tls_flags(certs, "--tls-ca", str(certs.ca), "--tls-verify", "peer")
    flags += ["--tls-cert-login-from", "common_name", "--mgmt-tls"]
    # --mgmt-port 0 turns the API off: a free port instead
    process, _, https = start_kanin_on_free_port(tmp_path / "data", "--mgmt-port", *flags, log=log)
    try:
        amqps = logged_port(log, r"listening for AMQP over TLS \(amqps\)")
        assert logged_port(log, r"listening for the management API over HTTPS") == https
        yield amqps, https, log
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_a_broker_process_serves_amqps_external_and_https(
    tls_process: tuple[int, int, list[str]], certs: Certificates
) -> None:
    amqps, https, log = tls_process
    api = Api(f"https://localhost:{https}", tls=certs.client_context(with_certificate=False))
    # The user EXTERNAL logs in as (by common name) is made through the HTTPS API.
    assert api.request("PUT", "/api/users/tls-client", {"password": "", "tags": ""}).status == 201
    assert api.request("PUT", "/api/permissions/%2F/tls-client", PERMIT).status == 201
    params = pika.ConnectionParameters(
        "localhost",
        amqps,
        ssl_options=pika.SSLOptions(certs.client_context(), "localhost"),
        credentials=pika.credentials.ExternalCredentials(),
        connection_attempts=1,
        socket_timeout=5,
    )
    # A client that does not speak TLS on the amqps port first: the broker drops it.
    with socket.create_connection(("127.0.0.1", amqps), timeout=10) as plain:
        plain.sendall(b"AMQP\x00\x00\x09\x01")
        while plain.recv(4096):
            pass
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.queue_declare("cli-tls", exclusive=True)
        channel.basic_publish("", "cli-tls", b"over uvloop")
        _method, _properties, body = channel.basic_get("cli-tls", auto_ack=True)
        assert body == b"over uvloop"
        [listed] = api.get("/api/connections").json
        assert (listed["user"], listed["auth_mechanism"], listed["ssl"]) == (
            "tls-client",
            "EXTERNAL",
            True,
        )
        assert listed["peer_cert_subject"] == CLIENT_DN
    assert "Traceback" not in "".join(log)


# -- start-up errors -------------------------------------------------------------------------


def test_a_missing_certificate_file_is_named(tmp_path: Path, certs: Certificates) -> None:
    missing = tmp_path / "no-such.pem"
    flags = ["--tls-cert", str(missing), "--tls-key", str(certs.server_key)]
    line = one_line_error(run_server(tmp_path / "data", *flags))
    assert f"TLS certificate file {missing}: cannot read it: No such file" in line
    assert not (tmp_path / "data").exists()  # refused before anything was touched


@pytest.mark.parametrize(
    ("cert", "key", "ca", "problem"),
    [
        ("directory", "server_key", None, "TLS certificate file {cert}: cannot read it"),
        ("server_key", "server_key", None, "TLS certificate file {cert}: no PEM certificate"),
        ("server_cert", "server_cert", None, "TLS key file {key}: no PEM private key"),
        ("server_cert", "client_key", None, "TLS key file {key} does not match the certificate"),
        ("server_cert", "encrypted", None, "TLS key file {key}: the key is encrypted"),
        ("server_cert", "server_key", "server_key", "TLS CA file {ca}: no PEM certificates"),
        ("server_cert", "server_key", "missing", "TLS CA file {ca}: cannot read it"),
    ],
)
def test_a_certificate_or_key_that_cannot_be_used_is_named(
    tmp_path: Path, certs: Certificates, cert: str, key: str, ca: str | None, problem: str
) -> None:
    encrypted = tmp_path / "encrypted.key"
    tls_certs.openssl(
        *("pkey", "-in", certs.server_key, "-aes256", "-passout", "pass:x", "-out", encrypted)
    )
    files = {
        "directory": tmp_path,
        "encrypted": encrypted,
        "missing": tmp_path / "missing.pem",
        **{name: getattr(certs, name) for name in ("server_cert", "server_key", "client_key")},
    }
    flags = ["--tls-cert", str(files[cert]), "--tls-key", str(files[key])]
    if ca is not None:
        flags += ["--tls-ca", str(files[ca])]
    line = one_line_error(run_server(tmp_path / "data", *flags))  # stdin closed: no prompt
    assert problem.format(cert=files[cert], key=files[key], ca=files.get(ca or "")) in line


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--tls-cert", "server.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-key", "server.key"], "--tls-cert and --tls-key go together"),
        (["--tls-verify", "peer"], "--tls-verify peer needs --tls-ca"),
        (["--tls-fail-if-no-peer-cert"], "--tls-fail-if-no-peer-cert needs --tls-verify peer"),
        (["--mgmt-tls"], "--mgmt-tls needs --tls-cert and --tls-key"),
        (["--prometheus-tls"], "--prometheus-tls needs --tls-cert and --tls-key"),
        (["--tls-port", "70000"], "--tls-port must be 0..65535, got 70000"),
    ],
)
def test_tls_options_that_need_others_are_usage_errors(
    tmp_path: Path, flags: list[str], problem: str
) -> None:
    assert problem in one_line_error(run_server(tmp_path, *flags))


def test_a_busy_tls_port_is_a_clear_error_naming_it(tmp_path: Path, certs: Certificates) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        result = run_server(tmp_path, *tls_flags(certs, port=busy))
    assert result.returncode == 1
    assert f"kanin: cannot start: [Errno 98] AMQP TLS port {busy}" in result.stderr
    assert "address already in use" in result.stderr.lower()


def test_without_a_certificate_nothing_listens_on_the_tls_port(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        log: list[str] = []
        process, port = start_kanin(tmp_path, "--tls-port", str(busy), log=log)
        try:
            with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as conn:
                assert conn.is_open
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
    assert not any("TLS" in line for line in log)


def test_tls_settings_come_from_the_config_file_too(tmp_path: Path, certs: Certificates) -> None:
    config = tmp_path / "kanin.toml"
    config.write_text(f'tls_cert = "{certs.server_cert}"\ntls_verify = "peer"\n')
    line = one_line_error(run_server(tmp_path / "data", "--config", str(config)))
    assert "--tls-cert and --tls-key go together" in line
    assert "kanin.toml" in line  # where the value came from
    config.write_text(config.read_text() + f'tls_key = "{certs.server_key}"\n')
    assert "--tls-verify peer needs --tls-ca" in one_line_error(
        run_server(tmp_path / "data", "--config", str(config))
    )
