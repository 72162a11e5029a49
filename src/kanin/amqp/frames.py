"""Frame parsing: feed bytes, get whole frames back.

Rules of this file:
- `FrameReader.feed` takes any slice of the byte stream (one byte or many frames)
  and returns every frame completed by it; partial frames stay buffered.
- Malformed input raises AMQPError with the reply code RabbitMQ 3.10 sends:
  501 FRAME_ERROR for framing and undecodable arguments, 505 UNEXPECTED_FRAME
  for a heartbeat on a channel, 503 COMMAND_INVALID for an unknown method.
  Nothing else escapes.
- Content header properties are kept as raw bytes: a message is delivered with
  the same header bytes it was published with, and properties are decoded only
  when routing or the broker needs them.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from typing import Any, Final

from kanin.amqp import constants as C
from kanin.amqp import methods
from kanin.amqp.errors import AMQPError, ConnectionError_, erlang_binary
from kanin.amqp.properties import decode_properties as decode_properties

_FRAME_HEAD: Final = struct.Struct(">BHI")
_HEADER_FIXED: Final = struct.Struct(">HHQ")
# A content header frame's head and fixed fields in one unpack: type, channel, size,
# class id, weight, body size.
_HEADER_FRAME_HEAD: Final = struct.Struct(">BHIHHQ")


class MethodFrame:
    __slots__ = ("channel", "method")

    def __init__(self, channel: int, method: Any) -> None:
        self.channel = channel
        self.method = method

    def __repr__(self) -> str:
        return f"MethodFrame({self.channel}, {self.method.name})"


class HeaderFrame:
    """A content header. `payload` is the whole frame payload, class id to properties."""

    __slots__ = ("body_size", "channel", "class_id", "payload")

    def __init__(self, channel: int, class_id: int, body_size: int, payload: bytes) -> None:
        self.channel = channel
        self.class_id = class_id
        self.body_size = body_size
        self.payload = payload

    def __repr__(self) -> str:
        return f"HeaderFrame({self.channel}, body_size={self.body_size})"


class BodyFrame:
    __slots__ = ("channel", "payload")

    def __init__(self, channel: int, payload: bytes) -> None:
        self.channel = channel
        self.payload = payload

    def __repr__(self) -> str:
        return f"BodyFrame({self.channel}, {len(self.payload)} bytes)"


class HeartbeatFrame:
    __slots__ = ("channel",)

    def __init__(self, channel: int) -> None:
        self.channel = channel

    def __repr__(self) -> str:
        return f"HeartbeatFrame({self.channel})"


class PublishFrames:
    """basic.publish, its content header and its one body frame, read together.

    Most publishes arrive whole in one read. Handing them over as one item saves the
    per-frame dispatch and the assembler's state changes on the hottest path; a reader
    makes them only when asked to (`whole_publishes`), and only when every frame is
    complete and well-formed, so anything unusual takes the frame-by-frame path.
    """

    __slots__ = ("args", "body", "channel", "header")

    def __init__(
        self, channel: int, args: methods.PublishArgs, header: HeaderFrame, body: bytes
    ) -> None:
        self.channel = channel
        self.args = args
        self.header = header
        self.body = body

    def expand(self) -> list[MethodFrame | HeaderFrame | BodyFrame]:
        """The frames this stands for, as the frame-by-frame path would see them."""
        frames: list[MethodFrame | HeaderFrame | BodyFrame] = [
            MethodFrame(self.channel, self.args.as_method()),
            self.header,
        ]
        if self.header.body_size:
            frames.append(BodyFrame(self.channel, self.body))
        return frames

    def __repr__(self) -> str:
        return f"PublishFrames({self.channel}, {len(self.body)} bytes)"


Frame = MethodFrame | HeaderFrame | BodyFrame | HeartbeatFrame | PublishFrames


def byte_count(parts: list[bytes]) -> int:
    """The bytes in `parts`: a loop compiled with this module, where sum(map(len, parts))
    would go through the interpreter's generic calls for every part."""
    size = 0
    for part in parts:
        size += len(part)
    return size


def frame_error(text: str) -> AMQPError:
    return ConnectionError_(C.FRAME_ERROR, text)


class FrameReader:
    """Splits a byte stream into frames no larger than `frame_max` (0 = no limit).

    What has been read and not parsed yet is kept as `bytes` (`_data` from `_at` on), not
    in a bytearray: compiled, indexing and slicing bytes are native operations and a
    bytearray's are generic calls, on the path every publish takes. Bytes that cannot yet
    make a whole frame wait in `_partial`, a bytearray (appending to it costs no copy of
    what is there, so a peer sending a large frame a byte at a time costs linear time);
    they become bytes once the first frame in them is whole.
    """

    def __init__(self, frame_max: int, whole_publishes: bool = False) -> None:
        self.frame_max = frame_max
        self.whole_publishes = whole_publishes  # yield PublishFrames where possible
        self._data = b""
        self._at = 0
        self._partial = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        """Every frame `data` completes, as a list (an error loses the frames before it)."""
        return list(self.frames(data))

    @property
    def buffered(self) -> int:
        """Bytes read but not yet parsed into frames."""
        return len(self._data) - self._at + len(self._partial)

    def append(self, data: bytes) -> None:
        """Buffer `data` to be parsed by a later `frames` call."""
        if not data:
            return
        if self._at < len(self._data):  # unparsed bytes go first
            self._partial += self._data[self._at :]
        elif not self._partial:
            self._data, self._at = bytes(data), 0
            return
        self._data, self._at = b"", 0
        self._partial += data

    def _first_frame_ready(self) -> bool:
        """Whether `_partial` holds a whole first frame, or a header that must be refused
        (too large): then it becomes `_data`."""
        partial = self._partial
        if len(partial) < C.FRAME_HEADER_SIZE:
            return False
        head: tuple[int, int, int] = _FRAME_HEAD.unpack_from(partial, 0)
        size = head[2]
        if len(partial) <= C.FRAME_HEADER_SIZE + size and not (
            self.frame_max and size > self.frame_max
        ):
            return False
        self._data, self._at = bytes(partial), 0
        partial.clear()
        return True

    def frames(self, data: bytes = b"", limit: int = 0) -> Generator[Frame, None, None]:
        """The frames `data` completes, one at a time; at most `limit` of them (0 = all).

        The caller acts on each frame before the next is parsed, so the frames that
        precede a malformed one in the same read still take effect, as in RabbitMQ.
        Frames left over by `limit` stay buffered for the next call. Nothing may be
        appended while a generator from here is open.
        """
        self.append(data)
        if self._partial and not self._first_frame_ready():
            return
        buffer = self._data
        offset = self._at
        end = len(buffer)
        remaining = limit or -1
        frame_max = self.frame_max
        incomplete = False  # stopped at a frame not all here yet
        try:
            while remaining:
                if end - offset < C.FRAME_HEADER_SIZE:
                    incomplete = True
                    break
                head: tuple[int, int, int] = _FRAME_HEAD.unpack_from(buffer, offset)
                frame_type, channel, size = head
                # Checked from the header alone, so a huge announced size is refused at once.
                # As in RabbitMQ, a payload of up to frame_max is tolerated inbound.
                if frame_max and size > frame_max:
                    raise frame_error(
                        f"type {frame_type}, all octets = <<>>: "
                        f"{{frame_too_large,{size},{frame_max - C.FRAME_OVERHEAD}}}"
                    )
                payload_at = offset + C.FRAME_HEADER_SIZE
                frame_end = payload_at + size
                if frame_end >= end:
                    incomplete = True
                    break
                if (
                    frame_type == C.FRAME_METHOD
                    and self.whole_publishes
                    and (remaining >= 3 or remaining < 0)
                    and size >= 4
                    and buffer[payload_at + 3] == _PUBLISH_METHOD
                    and buffer[payload_at + 1] == C.BASIC_CLASS_ID
                    and buffer[payload_at] == 0
                    and buffer[payload_at + 2] == 0
                ):
                    whole = self._whole_publish(buffer, offset, frame_end, channel)
                    if whole is not None:
                        publish, offset = whole
                        remaining -= 3
                        yield publish
                        continue
                payload = buffer[payload_at:frame_end]
                if buffer[frame_end] != C.FRAME_END:
                    raise frame_error(
                        f"type {frame_type}, all octets = {erlang_binary(payload)}: "
                        f"{{invalid_frame_end_marker,{buffer[frame_end]}}}"
                    )
                frame = decode_frame(frame_type, channel, payload)
                offset = frame_end + 1
                remaining -= 1
                yield frame
        finally:
            if incomplete:
                # A frame not all here waits in _partial, rather than keep the read alive.
                self._partial += buffer[offset:]
            if incomplete or offset >= end:
                self._data, self._at = b"", 0
            else:
                self._at = offset

    def _whole_publish(
        self, buffer: bytes, offset: int, method_end: int, channel: int
    ) -> tuple[PublishFrames, int] | None:
        """The publish at `offset` with its header and body, if all are here and sound;
        else None, and the frame-by-frame path deals with them (and their errors).
        Written out in one function, with the struct fields typed (so compiled, they are
        compared as machine integers): this runs for every publish."""
        end = len(buffer)
        if buffer[method_end] != C.FRAME_END:
            return None
        header_at = method_end + 1
        if end - header_at < _HEADER_FRAME_HEAD.size:
            return None
        head: tuple[int, int, int, int, int, int] = _HEADER_FRAME_HEAD.unpack_from(
            buffer, header_at
        )
        found_type, found_channel, header_size, class_id, _weight, body_size = head
        header_end = header_at + C.FRAME_HEADER_SIZE + header_size
        frame_max = self.frame_max
        if (
            found_type != C.FRAME_HEADER
            or found_channel != channel
            or header_size < _HEADER_FIXED.size + 2
            or (frame_max and header_size > frame_max)
            or header_end >= end
            or buffer[header_end] != C.FRAME_END
            or class_id != C.BASIC_CLASS_ID
        ):
            return None
        body = b""
        next_offset = header_end + 1
        if body_size:  # in one frame, complete: else not all here yet, or in several frames
            if end - next_offset < C.FRAME_HEADER_SIZE:
                return None
            body_head: tuple[int, int, int] = _FRAME_HEAD.unpack_from(buffer, next_offset)
            found_type, found_channel, size = body_head
            body_end = next_offset + C.FRAME_HEADER_SIZE + size
            if (
                found_type != C.FRAME_BODY
                or found_channel != channel
                or size != body_size
                or (frame_max and size > frame_max)
                or body_end >= end
                or buffer[body_end] != C.FRAME_END
            ):
                return None
            body = buffer[next_offset + C.FRAME_HEADER_SIZE : body_end]
            next_offset = body_end + 1
        try:
            args = methods.decode_publish_at(buffer, offset + C.FRAME_HEADER_SIZE, method_end)
        except ValueError:
            return None  # decoded again frame by frame, which says what is wrong
        header_frame = HeaderFrame(
            channel, class_id, body_size, buffer[header_at + C.FRAME_HEADER_SIZE : header_end]
        )
        return PublishFrames(channel, args, header_frame, body), next_offset


# basic.publish's method id (class 60, method 40), as the frame-reading loop tests it.
_PUBLISH_METHOD: Final = methods.PUBLISH_INDEX & 0xFF
assert methods.PUBLISH_INDEX == (C.BASIC_CLASS_ID << 16) | _PUBLISH_METHOD


def unexpected_frame(frame_type: int, payload: bytes) -> AMQPError:
    return ConnectionError_(
        C.UNEXPECTED_FRAME, f"type {frame_type}, all octets = {erlang_binary(payload)}"
    )


def decode_frame(frame_type: int, channel: int, payload: bytes) -> Frame:
    if frame_type == C.FRAME_METHOD:
        if len(payload) < 4:
            raise frame_error(f"type 1, all octets = {erlang_binary(payload)}: unknown_frame")
        return MethodFrame(channel, methods.decode_method(payload))
    if frame_type == C.FRAME_HEADER:
        return decode_header(channel, payload)
    if frame_type == C.FRAME_BODY:
        return BodyFrame(channel, payload)
    if frame_type == C.FRAME_HEARTBEAT:
        if channel != 0:
            raise unexpected_frame(frame_type, payload)
        return HeartbeatFrame(channel)
    raise frame_error(f"type {frame_type}, all octets = {erlang_binary(payload)}: unknown_frame")


def decode_header(channel: int, payload: bytes) -> HeaderFrame:
    if len(payload) < _HEADER_FIXED.size + 2:
        raise frame_error("content header frame too short")
    class_id, _weight, body_size = _HEADER_FIXED.unpack_from(payload)
    return HeaderFrame(channel, class_id, body_size, payload)
