"""A blocking AMQP 0-9-1 connection on a plain socket, with one channel: what the
connector's hot paths (socket_read.py for reading, socket_publish.py for the sink) share.

The asyncio client spends most of its time per message on a task, a future and a
message object; here frames are cut out of the bytes read, and pamqp decodes the few
methods and content headers that matter. Heartbeats are turned off (tune-ok heartbeat 0):
a reader or a sink may sit still for as long as Spark is busy elsewhere, and the broker
must not take it for dead then.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from contextlib import suppress
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pamqp import commands, frame
from pamqp.common import FieldTable

from kanin.spark.client import CONNECT_TIMEOUT_S, KaninSparkError, vhost_name
from kanin.spark.options import QUEUE, URI, KaninOptions

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MAX = 131072
CHANNEL = 1
FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size
FRAME_END = b"\xce"
METHOD, HEADER, BODY = 1, 2, 3


def tls_context(uri: str) -> ssl.SSLContext:
    """For amqps://: the CA to trust and the client certificate come from the URI's query
    (cafile, certfile, keyfile), as aio-pika reads them for the connector's other
    connections; without a cafile, the system's CAs."""
    query = dict(parse_qsl(urlsplit(uri).query))
    context = ssl.create_default_context(cafile=query.get("cafile"))
    if query.get("certfile"):
        context.load_cert_chain(query["certfile"], query.get("keyfile"))
    return context


def login(uri: str) -> tuple[str, str]:
    """The SASL mechanism and response: EXTERNAL (the client certificate names the user)
    when the query says auth=external, else PLAIN with the URI's user and password."""
    parts = urlsplit(uri)
    if dict(parse_qsl(parts.query)).get("auth", "").lower() == "external":
        return "EXTERNAL", ""
    user, password = unquote(parts.username or "guest"), unquote(parts.password or "guest")
    return "PLAIN", f"\0{user}\0{password}"


class SocketConnection:
    """One connection and its channel 1, opened by `open_channel()`."""

    def __init__(self, options: KaninOptions, idle_timeout_s: float | None, purpose: str) -> None:
        self.options = options
        self.purpose = purpose  # in the connection's name, as the broker lists it
        self.idle_timeout_s = idle_timeout_s
        self._socket: socket.socket | None = None
        self._buffer = bytearray()
        self._at = 0  # where the first frame not yet handed out starts in _buffer
        self._sending = threading.Lock()
        self.frame_max = FRAME_MAX

    # -- opening ------------------------------------------------------------------------

    def open_channel(self) -> None:
        self._socket = self._connect()
        self._socket.sendall(PROTOCOL_HEADER)
        self._expect(commands.Connection.Start)
        user = unquote(urlsplit(self.options.uri).username or "guest")
        properties: FieldTable = {
            "connection_name": f"kanin.spark {self.purpose}",
            "product": "kanin.spark",
        }
        mechanism, response = login(self.options.uri)
        self.send(0, commands.Connection.StartOk(properties, mechanism, response))
        try:
            tune = self._expect(commands.Connection.Tune, refused_user=user)
        except ConnectionError:  # how a broker refuses a login to most clients
            raise KaninSparkError(
                f"the broker at {self.options.safe_uri} refused user {user!r}: check the "
                f"user name and password in option {URI!r}"
            ) from None
        self.frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        self.send(0, commands.Connection.TuneOk(tune.channel_max, self.frame_max, 0))
        self.send(0, commands.Connection.Open(vhost_name(self.options.uri)))
        self._expect(commands.Connection.OpenOk)
        self.call(commands.Channel.Open(), commands.Channel.OpenOk)

    def _connect(self) -> socket.socket:
        parts = urlsplit(self.options.uri)
        secure = parts.scheme == "amqps"
        host = parts.hostname or "localhost"
        port = parts.port or (5671 if secure else 5672)
        try:
            connection = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError as error:
            raise KaninSparkError(
                f"cannot connect to {self.options.safe_uri} (option {URI!r}): {error!r}"
            ) from None
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if secure:
            context = tls_context(self.options.uri)
            connection = context.wrap_socket(connection, server_hostname=host)
        connection.settimeout(self.idle_timeout_s)  # None: wait as long as it takes
        return connection

    def set_idle_timeout(self, seconds: float | None) -> None:
        """How long a read may wait from now on (the handshake had the connect timeout)."""
        self.idle_timeout_s = seconds
        if self._socket is not None:
            self._socket.settimeout(seconds)

    def call(self, method: Any, reply: type) -> Any:
        self.send(CHANNEL, method)
        return self._expect(reply)

    def _expect(self, kind: type, refused_user: str | None = None) -> Any:
        """The next method frame, which must be a `kind`; a close from the broker raises."""
        while True:
            for _channel, value in self.frames():
                if isinstance(value, kind):
                    return value
                self.refuse(value, refused_user)

    def refuse(self, value: Any, refused_user: str | None = None) -> None:
        """Raise for a close from the broker, naming what the user can fix; ignore the rest."""
        if isinstance(value, commands.Connection.Close | commands.Channel.Close):
            reason = f"{value.reply_code} {value.reply_text}"
            if refused_user is not None and value.reply_code == 403:
                raise KaninSparkError(
                    f"the broker at {self.options.safe_uri} refused user {refused_user!r}: "
                    f"check the user name and password in option {URI!r} ({reason})"
                )
            if value.reply_code == 404:
                raise self.not_found(reason)
            raise KaninSparkError(f"the broker closed the {self.purpose} connection: {reason}")

    def not_found(self, reason: str) -> KaninSparkError:
        return KaninSparkError(
            f"no queue {self.options.queue!r} (option {QUEUE!r}) in virtual host "
            f"{vhost_name(self.options.uri)!r} at {self.options.safe_uri}"
        )

    # -- frames -------------------------------------------------------------------------

    def frames(self) -> Iterator[tuple[int, Any]]:
        """The complete frames buffered, after one more read from the socket if there are
        none: methods and content headers decoded, bodies as their bytes, heartbeats
        skipped. A frame counts as consumed before it is handed out, so a caller may
        stop at any frame and the next call goes on after it."""
        for kind, channel, payload in self.raw_frames():
            if kind == BODY:
                yield channel, payload
            else:
                yield channel, decoded(kind, channel, payload)

    def raw_frames(self) -> Iterator[tuple[int, int, bytes]]:
        """As frames(), each frame as its type, channel and undecoded payload."""
        buffer = self._buffer
        del buffer[: self._at]
        self._at = 0
        if self._next_frame_size() is None:
            self._read()
        while (size := self._next_frame_size()) is not None:
            at = self._at
            kind, channel, _size = FRAME_HEAD.unpack_from(buffer, at)
            self._at = at + size + 8
            if kind in (METHOD, HEADER, BODY):
                yield kind, channel, bytes(buffer[at + 7 : at + 7 + size])

    def _next_frame_size(self) -> int | None:
        """The payload size of the next frame if all of it is buffered."""
        buffer, at = self._buffer, self._at
        if len(buffer) - at < 8:
            return None
        size: int = FRAME_HEAD.unpack_from(buffer, at)[2]
        return size if len(buffer) - at >= size + 8 else None

    def _read(self) -> None:
        connection = self._socket
        if connection is None:
            raise ConnectionError("the connection is closed")
        try:
            chunk = connection.recv(1 << 18)
        except TimeoutError:
            raise TimeoutError(
                f"nothing from the broker for {self.idle_timeout_s} s ({self.purpose} of "
                f"{self.options.queue or self.options.exchange!r})"
            ) from None
        if not chunk:
            raise ConnectionError(f"the broker closed the connection ({self.options.safe_uri})")
        self._buffer += chunk

    def send(self, channel: int, method: Any) -> None:
        self.send_bytes(frame.marshal(method, channel))

    def send_bytes(self, data: bytes) -> None:
        connection = self._socket
        if connection is None:
            raise ConnectionError("the connection is closed")
        with self._sending:  # acks may come from another thread than the reader's
            connection.sendall(data)

    # -- closing ------------------------------------------------------------------------

    def abort(self) -> None:
        """Drop the connection at once, from any thread (a reader blocked in recv wakes
        with an error); the broker requeues whatever was delivered and not acked."""
        connection, self._socket = self._socket, None
        if connection is not None:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def close(self) -> None:
        """connection.close, then wait (briefly) for close-ok: never a cancel, which some
        clients answer by rejecting what they hold, and a stream answers a reject by
        closing the connection with an error."""
        connection = self._socket
        if connection is None:
            return
        try:
            connection.settimeout(5.0)
            self.send(0, commands.Connection.Close(200, "done", 0, 0))
            while True:
                if any(isinstance(v, commands.Connection.CloseOk) for _c, v in self.frames()):
                    break
        except (OSError, ConnectionError, TimeoutError, KaninSparkError):
            pass  # closing anyway
        finally:
            self._socket = None
            connection.close()


def decoded(kind: int, channel: int, payload: bytes) -> Any:
    """A method or content header frame's payload decoded by pamqp."""
    whole = FRAME_HEAD.pack(kind, channel, len(payload)) + payload + FRAME_END
    return frame.unmarshal(whole)[2]
