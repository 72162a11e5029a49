"""Protocol errors: the only exceptions the codec and the broker core raise on bad input.

An AMQPError carries what goes into connection.close / channel.close: the reply code,
the reply text (prefixed with the code's name, as RabbitMQ writes it), and the class
and method ids of the method that caused it (0, 0 when none did).
"""

from __future__ import annotations

from kanin.amqp.constants import CONNECTION_ERROR_CODES, REPLY_NAMES


class AMQPError(Exception):
    def __init__(self, reply_code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        name = REPLY_NAMES.get(reply_code, "ERROR")
        self.reply_code = reply_code
        self.reply_text = f"{name} - {text}"
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(self.reply_text)

    def with_method(self, class_id: int, method_id: int) -> AMQPError:
        if not self.class_id and not self.method_id:
            self.class_id, self.method_id = class_id, method_id
        return self


class ChannelError(AMQPError):
    """Closes the channel it happened on; the connection lives on."""


class ConnectionError_(AMQPError):
    """Closes the whole connection."""


def error(reply_code: int, text: str, class_id: int = 0, method_id: int = 0) -> AMQPError:
    """The right kind of error for a reply code: hard codes close the connection."""
    if reply_code in CONNECTION_ERROR_CODES:
        return ConnectionError_(reply_code, text, class_id, method_id)
    return ChannelError(reply_code, text, class_id, method_id)


def erlang_binary(data: bytes, limit: int = 64) -> str:
    """Bytes as RabbitMQ prints them in reply texts: <<"text">> or <<0,20,...>>."""
    shown = data[:limit]
    suffix = ",..." if len(data) > limit else ""
    if shown and all(32 <= byte < 127 for byte in shown) and not suffix:
        text = shown.decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(byte) for byte in shown) + suffix + ">>"
