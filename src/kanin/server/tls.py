"""TLS for the broker's listeners, as RabbitMQ's ssl_options (https://www.rabbitmq.com/ssl.html):
the server's SSL contexts from the configuration, and what a connection over TLS tells
its session (kanin.core.session.peer_cert).

TLS 1.2 and 1.3 only. TLS 1.2 ciphers: ECDHE key exchange (forward secrecy) with AES-GCM
or ChaCha20-Poly1305 (authenticated encryption); TLS 1.3's are OpenSSL's, all of which are
both.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from kanin.config import BrokerConfig
from kanin.core.session.peer_cert import TlsPeer
from kanin.errors import StartupError

TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclass(frozen=True)
class ServerContexts:
    """The SSL contexts the listeners use: amqps verifies clients as configured; https (the
    management API and metrics, for browsers and scrapers) asks for no client certificate."""

    amqps: ssl.SSLContext | None = None
    https: ssl.SSLContext | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ServerContexts:
        """Loaded now, so a missing, unreadable or mismatched file stops start-up with a
        StartupError naming it, before anything else is touched."""
        if not config.tls:
            return cls()
        return cls(amqps=amqps_context(config), https=server_context(config))


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    assert config.tls_cert is not None and config.tls_key is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_COMPRESSION
    _load_cert_chain(context, config.tls_cert, config.tls_key)
    return context


def amqps_context(config: BrokerConfig) -> ssl.SSLContext:
    """verify none: no client certificate is asked for. verify peer: one is asked for and,
    if sent, must verify against the CA bundle; fail_if_no_peer_cert: it must be sent."""
    context = server_context(config)
    if config.tls_ca is not None:
        _read("TLS CA file", config.tls_ca)
        try:
            context.load_verify_locations(cafile=config.tls_ca)
        except ssl.SSLError as exc:
            problem = f"no PEM certificates in it ({exc})"
            raise StartupError(f"TLS CA file {config.tls_ca}: {problem}") from None
    if config.tls_verify == "peer":
        required = config.tls_fail_if_no_peer_cert
        context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    return context


def _read(what: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise StartupError(f"{what} {path}: cannot read it: {exc.strerror}") from None


def _load_cert_chain(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    if b"-----BEGIN CERTIFICATE-----" not in _read("TLS certificate file", cert):
        raise StartupError(f"TLS certificate file {cert}: no PEM certificate in it")
    if b"PRIVATE KEY-----" not in _read("TLS key file", key):
        raise StartupError(f"TLS key file {key}: no PEM private key in it")

    def encrypted() -> NoReturn:  # else OpenSSL would prompt on the terminal
        raise StartupError(f"TLS key file {key}: the key is encrypted; give it unencrypted")

    try:
        context.load_cert_chain(cert, key, password=encrypted)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise StartupError(
                f"TLS key file {key} does not match the certificate in {cert}"
            ) from None
        raise StartupError(f"cannot load TLS certificate {cert} with key {key}: {exc}") from None


def tls_peer(transport: asyncio.BaseTransport) -> TlsPeer | None:
    """A TLS connection's protocol, cipher and verified client certificate; None for a
    plain connection."""
    tls: Any = transport.get_extra_info("ssl_object")
    if tls is None:
        return None
    certificate = tls.getpeercert()  # empty unless the client sent one and it verified
    cipher = tls.cipher()
    return TlsPeer(
        protocol=str(tls.version() or ""),
        cipher=str(cipher[0]) if cipher else "",
        subject=certificate.get("subject") if certificate else None,
        issuer=certificate.get("issuer") if certificate else None,
    )
