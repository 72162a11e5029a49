"""Content assembly: basic.publish + content header + body frames -> one message.

Rules of this file:
- One assembler per channel; it is pure (no I/O) and knows three states:
  idle, waiting for the content header, collecting body frames.
- A frame out of order is 505 UNEXPECTED_FRAME on the connection, as in RabbitMQ.
- A body larger than announced is 501 FRAME_ERROR; a message larger than
  the configured maximum is refused with 406 at the header, before the body arrives.
- The body frames of unfinished messages are held until the last one arrives. The
  channels of one connection share an AssemblyLimit: their unfinished bodies together
  may not exceed it (506 RESOURCE_ERROR closes the connection), so a peer cannot make
  the broker hold 2,047 channels' worth of almost complete messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError, ConnectionError_
from kanin.amqp.frames import BodyFrame, HeaderFrame


class Content:
    """A completed content-bearing method: the method, header payload and body."""

    __slots__ = ("body", "header", "method")

    def __init__(self, method: Any, header: HeaderFrame, body: bytes) -> None:
        self.method = method
        self.header = header
        self.body = body


class AssemblyLimit:
    """The bytes of unfinished message bodies one connection's channels hold together.

    `on_change` hears every change (+ taken, - given back): the broker counts these
    bytes towards its memory alarm, so many connections together are bounded too.
    """

    def __init__(self, limit_bytes: int, on_change: Callable[[int], None] | None = None) -> None:
        self.limit_bytes = limit_bytes
        self.held_bytes = 0
        self._on_change = on_change

    def take(self, size: int) -> None:
        """Hold `size` more bytes, or refuse them (and the connection) past the limit."""
        if self.held_bytes + size > self.limit_bytes:
            raise ConnectionError_(
                C.RESOURCE_ERROR,
                f"unfinished messages on this connection would hold "
                f"{self.held_bytes + size} bytes, more than the limit of {self.limit_bytes}",
            )
        self.held_bytes += size
        if self._on_change is not None:
            self._on_change(size)

    def give_back(self, size: int) -> None:
        self.held_bytes -= size
        assert self.held_bytes >= 0, "gave back more than was taken"
        if self._on_change is not None:
            self._on_change(-size)


class ContentAssembler:
    def __init__(self, max_body_bytes: int, limit: AssemblyLimit | None = None) -> None:
        self.max_body_bytes = max_body_bytes
        # Without a shared limit (unit tests), one channel is bounded by the max body size.
        self._limit = limit or AssemblyLimit(max_body_bytes)
        self._method: Any = None
        self._header: HeaderFrame | None = None
        self._parts: list[bytes] = []
        self._received = 0
        self._held = 0  # bytes of _parts taken from the limit

    @property
    def idle(self) -> bool:
        return self._method is None

    def accepts_whole(self, body_size: int) -> bool:
        """A whole publish of this size may skip assembly: between messages, within limits."""
        return self._method is None and body_size <= self.max_body_bytes

    def expect_method(self) -> None:
        """A method frame arrived: valid only between messages."""
        if self._method is not None:
            self._reset()
            raise ConnectionError_(
                C.UNEXPECTED_FRAME,
                "expected content header for class 60, got non content header frame instead",
                60,
                40,
            )

    def start(self, method: Any) -> None:
        self.expect_method()
        self._method = method

    def on_header(self, frame: HeaderFrame) -> Content | None:
        if self._method is None or self._header is not None:
            raise ConnectionError_(
                C.UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
            )
        if frame.class_id != C.BASIC_CLASS_ID:
            raise ConnectionError_(
                C.UNEXPECTED_FRAME,
                f"expected content header for class 60, got one for class {frame.class_id} instead",
                60,
                40,
            )
        if frame.body_size > self.max_body_bytes:
            self._reset()
            raise ChannelError(
                C.PRECONDITION_FAILED,
                f"message size {frame.body_size} is larger than configured max size "
                f"{self.max_body_bytes}",
                60,
                40,
            )
        self._header = frame
        if frame.body_size == 0:
            return self._finish(b"")
        return None

    def on_body(self, frame: BodyFrame) -> Content | None:
        if self._header is None:
            raise ConnectionError_(
                C.UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
            )
        size = len(frame.payload)
        self._received += size
        if self._received > self._header.body_size:
            raise ConnectionError_(
                C.FRAME_ERROR,
                f"content body larger than announced: {self._received} > {self._header.body_size}",
            )
        if self._received == self._header.body_size:
            if not self._parts:
                return self._finish(frame.payload)
            self._parts.append(frame.payload)
            return self._finish(b"".join(self._parts))
        self._limit.take(size)
        self._held += size
        self._parts.append(frame.payload)
        return None

    def abandon(self) -> None:
        """The channel is gone: drop any unfinished message and give its bytes back."""
        self._reset()

    def _finish(self, body: bytes) -> Content:
        assert self._header is not None
        content = Content(self._method, self._header, body)
        self._reset()
        return content

    def _reset(self) -> None:
        self._method = None
        self._header = None
        self._parts = []
        self._received = 0
        if self._held:
            self._limit.give_back(self._held)
            self._held = 0
