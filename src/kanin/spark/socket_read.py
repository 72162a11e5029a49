"""A blocking AMQP 0-9-1 consumer on a plain socket: the hot path of reading.

A stream-mode read on an executor is one consumer from one offset to another, and queue
mode one consumer in the driver-side source process: no other channel, no publishing.
The asyncio client spends most of its time per delivery on a task, a future and a
message object; here frames are cut out of the bytes read and each delivery kept as its
decoded method, content header and body (pamqp decodes them), several times faster.
Heartbeats are turned off (tune-ok heartbeat 0): a reader may sit still for as long as
Spark is busy elsewhere, and the broker must not take it for dead then.
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
from pamqp.header import ContentHeader

from kanin.spark.client import CONNECT_TIMEOUT_S, KaninSparkError, vhost_name
from kanin.spark.options import QUEUE, URI, KaninOptions

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MAX = 131072
CHANNEL = 1
_FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size
_METHOD, _HEADER, _BODY = 1, 2, 3


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


class Delivery:
    """One message as it came: the deliver method, its content header, its body."""

    __slots__ = ("body", "deliver", "properties")

    def __init__(self, deliver: commands.Basic.Deliver, properties: Any, body: bytes) -> None:
        self.deliver = deliver
        self.properties = properties
        self.body = body


class SocketConsumer:
    """One connection, one channel, one consumer; `deliveries()` yields what comes, a
    chunk read from the socket at a time."""

    def __init__(self, options: KaninOptions, idle_timeout_s: float | None, purpose: str) -> None:
        self.options = options
        self.purpose = purpose  # in the connection's name, as the broker lists it
        self.idle_timeout_s = idle_timeout_s
        self._socket: socket.socket | None = None
        self._buffer = bytearray()
        self._at = 0  # where the first frame not yet handed out starts in _buffer
        self._sending = threading.Lock()
        self._frame_max = FRAME_MAX

    # -- opening ------------------------------------------------------------------------

    def open(self, prefetch: int, arguments: dict[str, Any]) -> None:
        self._socket = self._connect()
        self._socket.sendall(PROTOCOL_HEADER)
        self._expect(commands.Connection.Start)
        user = unquote(urlsplit(self.options.uri).username or "guest")
        properties: FieldTable = {
            "connection_name": f"kanin.spark {self.purpose}",
            "product": "kanin.spark",
        }
        mechanism, response = login(self.options.uri)
        self._send(0, commands.Connection.StartOk(properties, mechanism, response))
        try:
            tune = self._expect(commands.Connection.Tune, refused_user=user)
        except ConnectionError:  # how a broker refuses a login to most clients
            raise KaninSparkError(
                f"the broker at {self.options.safe_uri} refused user {user!r}: check the "
                f"user name and password in option {URI!r}"
            ) from None
        self._frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        self._send(0, commands.Connection.TuneOk(tune.channel_max, self._frame_max, 0))
        self._send(0, commands.Connection.Open(vhost_name(self.options.uri)))
        self._expect(commands.Connection.OpenOk)
        self._call(commands.Channel.Open(), commands.Channel.OpenOk)
        self._call(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk)
        queue = self.options.queue or ""
        self._call(commands.Queue.Declare(queue=queue, passive=True), commands.Queue.DeclareOk)
        consume = commands.Basic.Consume(queue=queue, arguments=arguments)
        self._call(consume, commands.Basic.ConsumeOk)

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

    def _call(self, method: Any, reply: type) -> Any:
        self._send(CHANNEL, method)
        return self._expect(reply)

    def _expect(self, kind: type, refused_user: str | None = None) -> Any:
        """The next method frame, which must be a `kind`; a close from the broker raises."""
        while True:
            for _channel, value in self._frames():
                if isinstance(value, kind):
                    return value
                self._refuse(value, refused_user)

    def _refuse(self, value: Any, refused_user: str | None) -> None:
        if isinstance(value, commands.Connection.Close | commands.Channel.Close):
            reason = f"{value.reply_code} {value.reply_text}"
            if refused_user is not None and value.reply_code == 403:
                raise KaninSparkError(
                    f"the broker at {self.options.safe_uri} refused user {refused_user!r}: "
                    f"check the user name and password in option {URI!r} ({reason})"
                )
            if value.reply_code == 404:
                raise KaninSparkError(
                    f"no queue {self.options.queue!r} (option {QUEUE!r}) in virtual host "
                    f"{vhost_name(self.options.uri)!r} at {self.options.safe_uri}"
                )
            raise KaninSparkError(f"the broker closed the {self.purpose} connection: {reason}")

    # -- reading ------------------------------------------------------------------------

    def deliveries(self) -> Iterator[list[Delivery]]:
        """What the broker sent, a list per read from the socket (never an empty one)."""
        deliver: commands.Basic.Deliver | None = None
        properties: Any = None
        size = 0
        parts: list[bytes] = []
        got: list[Delivery] = []
        while True:
            for _channel, value in self._frames():
                if isinstance(value, commands.Basic.Deliver):
                    deliver, parts = value, []
                elif isinstance(value, ContentHeader):
                    properties, size = value.properties, value.body_size
                    if size == 0 and deliver is not None:
                        got.append(Delivery(deliver, properties, b""))
                        deliver = None
                elif isinstance(value, bytes):  # a body frame's payload
                    parts.append(value)
                    if deliver is not None and sum(map(len, parts)) >= size:
                        body = parts[0] if len(parts) == 1 else b"".join(parts)
                        got.append(Delivery(deliver, properties, body))
                        deliver = None
                else:
                    self._refuse(value, None)
            if got:
                yield got
                got = []

    def ack(self, delivery: Delivery) -> None:
        """Ack every delivery up to this one (credit for the next ones)."""
        self._send(CHANNEL, commands.Basic.Ack(delivery.deliver.delivery_tag or 0, multiple=True))

    def _frames(self) -> Iterator[tuple[int, Any]]:
        """The complete frames buffered, after one more read from the socket if there are
        none: methods and content headers decoded, bodies as their bytes, heartbeats
        skipped. A frame counts as consumed before it is handed out, so a caller may
        stop at any frame and the next call goes on after it."""
        buffer = self._buffer
        del buffer[: self._at]
        self._at = 0
        if self._next_frame_size() is None:
            self._read()
        while (size := self._next_frame_size()) is not None:
            at = self._at
            kind, channel, _size = _FRAME_HEAD.unpack_from(buffer, at)
            self._at = at + size + 8
            if kind == _BODY:
                yield channel, bytes(buffer[at + 7 : at + 7 + size])
            elif kind in (_METHOD, _HEADER):
                yield channel, frame.unmarshal(bytes(buffer[at : at + size + 8]))[2]

    def _next_frame_size(self) -> int | None:
        """The payload size of the next frame if all of it is buffered."""
        buffer, at = self._buffer, self._at
        if len(buffer) - at < 8:
            return None
        size: int = _FRAME_HEAD.unpack_from(buffer, at)[2]
        return size if len(buffer) - at >= size + 8 else None

    def _read(self) -> None:
        assert self._socket is not None
        try:
            chunk = self._socket.recv(1 << 18)
        except TimeoutError:
            raise TimeoutError(
                f"nothing from the broker for {self.idle_timeout_s} s while reading "
                f"{self.options.queue!r}"
            ) from None
        if not chunk:
            raise ConnectionError(f"the broker closed the connection ({self.options.safe_uri})")
        self._buffer += chunk

    def _send(self, channel: int, method: Any) -> None:
        connection = self._socket
        if connection is None:
            raise ConnectionError("the connection is closed")
        with self._sending:  # acks may come from another thread than the reader's
            connection.sendall(frame.marshal(method, channel))

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
        connection, self._socket = self._socket, None
        if connection is None:
            return
        try:
            self._socket = connection
            connection.settimeout(5.0)
            self._send(0, commands.Connection.Close(200, "done", 0, 0))
            while True:
                if any(isinstance(v, commands.Connection.CloseOk) for _c, v in self._frames()):
                    break
        except (OSError, ConnectionError, TimeoutError, KaninSparkError):
            pass  # closing anyway
        finally:
            self._socket = None
            connection.close()
