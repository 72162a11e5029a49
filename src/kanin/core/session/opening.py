"""The opening of a session: protocol header, start-ok, tune-ok, open (AMQP 0-9-1 §2.2.4).

Rules of this file:
- It only moves its session forward (HEADER -> START_OK -> TUNE_OK -> OPEN_WAIT -> OPEN)
  and sends the server's side of the handshake; a wrong step is an AMQPError, or a
  handshake.SilentClose where RabbitMQ closes the socket without a word, and the
  session turns it into connection.close or a dropped socket.
- The negotiation rules themselves are the pure functions of handshake.py.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.errors import ConnectionError_
from kanin.amqp.methods import build, class_and_method, encode_method
from kanin.core.ports import ChannelServices
from kanin.core.session import handshake
from kanin.core.session.peer_cert import TlsPeer, login_name
from kanin.core.session.state import State

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.session.session import Session

log = logging.getLogger("kanin.core.session")


class Opening:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._header = b""
        self.tls: TlsPeer | None = None  # set by the edge for a connection over TLS

    def read_protocol_header(self, data: bytes) -> bytes:
        """Consume the 8-byte protocol header from `data`; return what follows it."""
        needed = 8 - len(self._header)
        self._header += data[:needed]
        rest = data[needed:]
        accepted = C.ACCEPTED_PROTOCOL_HEADERS
        if len(self._header) < 8:
            if not any(header.startswith(self._header) for header in accepted):
                self._refuse_header()
            return b""
        if self._header not in accepted:
            self._refuse_header()
            return b""
        self.session.state = State.START_OK
        self.session.send(encode_method(0, handshake.connection_start(self._mechanisms())))
        return rest

    def _certificate_login(self) -> str | None:
        """The user name EXTERNAL offers, from a verified client certificate (or None)."""
        return login_name(self.tls, self.session.config.tls_cert_login_from)

    def _mechanisms(self) -> str:
        if self.tls is None or self.tls.subject is None:
            return handshake.MECHANISMS
        return f"{handshake.MECHANISMS} {handshake.EXTERNAL}"

    def _refuse_header(self) -> None:
        # The spec's answer to a protocol we do not speak: our header, then close.
        session = self.session
        session.transport.write(C.PROTOCOL_HEADER)
        session.state = State.CLOSED
        session.transport.close()

    def timed_out(self) -> None:
        session = self.session
        if session.state not in (State.OPEN, State.CLOSED):
            log.warning("closing AMQP connection %s: handshake timed out", session.name)
            session.state = State.CLOSED
            session.transport.close()

    def on_method(self, method: Any) -> None:
        state = self.session.state
        if state is State.START_OK and isinstance(method, commands.Connection.StartOk):
            self._on_start_ok(method)
        elif state is State.TUNE_OK and isinstance(method, commands.Connection.TuneOk):
            self._on_tune_ok(method)
        elif state is State.OPEN_WAIT and isinstance(method, commands.Connection.Open):
            self._on_open(method)
        else:
            raise ConnectionError_(
                C.COMMAND_INVALID,
                f"unexpected method {method.name} during connection handshake",
                *class_and_method(method.index),
            )

    def _on_start_ok(self, method: commands.Connection.StartOk) -> None:
        session, config = self.session, self.session.config
        session.client_properties = method.client_properties or {}
        session.client_capabilities = handshake.client_capabilities(session.client_properties)
        session.mechanism = method.mechanism
        user, refusal = self._authenticate(method.mechanism, method.response)
        if user is not None and user.name in config.loopback_users and not self._from_loopback():
            refusal = f"user {user.name!r} may only connect via localhost"
        if refusal:
            # Without authentication_failure_close the client gets no reason, as in RabbitMQ.
            if not session.client_capabilities.get("authentication_failure_close"):
                raise handshake.SilentClose(refusal)
            log.warning("closing AMQP connection %s: %s", session.name, refusal)
            raise handshake.login_refused(method.mechanism)
        assert user is not None
        session.user = user
        session.state = State.TUNE_OK
        tune = build(
            commands.Connection.Tune,
            channel_max=config.channel_max,
            frame_max=config.frame_max,
            heartbeat=config.heartbeat_s,
        )
        session.send(encode_method(0, tune))

    def _authenticate(self, mechanism: str, response: str | bytes) -> tuple[User | None, str]:
        """The user logging in, or None and why not. EXTERNAL needs no password: the TLS
        handshake verified the certificate the name comes from; the user must exist."""
        users = self.session.broker.users
        if mechanism == handshake.EXTERNAL and self.tls is not None and self.tls.subject:
            username = self._certificate_login()
            if username is None:
                return None, "login refused: the client certificate has no common name (CN)"
            user = users.users.get(username)
            return user, "" if user else f"login refused: no user {username!r} (client certificate)"
        username, password = handshake.parse_credentials(mechanism, response)
        user = users.authenticate(username, password)
        return user, "" if user else f"login refused for user {username!r}: bad credentials"

    def _from_loopback(self) -> bool:
        return handshake.is_loopback(str(self.session.peer[0]))

    def _on_tune_ok(self, method: commands.Connection.TuneOk) -> None:
        session = self.session
        session.channel_max, session.frame_max, session.heartbeat_s = handshake.negotiate_tune(
            session.config, method
        )
        session.reader.frame_max = session.frame_max
        session.state = State.OPEN_WAIT
        if session.heartbeat_s:
            session.start_heartbeat()

    def _on_open(self, method: commands.Connection.Open) -> None:
        session = self.session
        vhost = session.broker.vhosts.get(method.virtual_host)
        if vhost is None:
            raise ConnectionError_(C.NOT_ALLOWED, f"vhost {method.virtual_host} not found", 10, 40)
        user = session.user
        if vhost.name not in user.permissions:
            raise ConnectionError_(
                C.NOT_ALLOWED,
                f"access to vhost '{vhost.name}' refused for user '{user.name}'",
                10,
                40,
            )
        session.vhost = vhost
        session.channel_services = self._channel_services()
        session.state = State.OPEN
        log.info(
            "connection %s: user '%s' authenticated and granted access to vhost '%s'",
            session.name,
            user.name,
            vhost.name,
        )
        session.send(encode_method(0, build(commands.Connection.OpenOk)))

    def _channel_services(self) -> ChannelServices:
        """What every channel of this connection gets of the broker: the session is the one
        place that reaches into the broker for its channels, once, at connection.open."""
        session, broker = self.session, self.session.broker
        return ChannelServices(
            vhost=session.vhost,
            user=session.user,
            store=broker.store,
            replies=broker.replies,
            max_message_bytes=broker.config.max_message_size_bytes,
            consumer_timeout_ms=broker.config.consumer_timeout_ms,
        )
