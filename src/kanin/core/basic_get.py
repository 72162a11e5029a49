"""basic.get's answer: get-ok with the next message, or get-empty.

A queue answers a get at once when its next message is in memory (or it has none), and on
a later loop turn when that message is paged out and being read back from the store
(Queue.get). Then the connection holds its peer's input until the answer is sent
(ConnectionPort.hold_input): the get-ok or get-empty precedes the reply to anything the
client sent after the get, and those requests (an ack, a purge, another get) act on the
queue as the get left it, as if it had been answered at once. The delivery tag is the
channel's next when the answer goes out, so tags stay in order on the wire. Should the
channel close first (the connection was lost), the message taken for it goes back to the
queue, as an unacked delivery would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pamqp import commands

from kanin.amqp.methods import build
from kanin.core.queue_args import UNSENT
from kanin.core.queues.returns import delivery_count_header
from kanin.core.unacked import Unacked

if TYPE_CHECKING:
    from kanin.core.channel import Channel
    from kanin.core.message import Entry
    from kanin.core.queues import Queue


class GetAnswer:
    """What a queue calls with the entry a basic.get takes (None: the queue was empty)."""

    def __init__(self, channel: Channel, queue: Queue, no_ack: bool) -> None:
        self._channel = channel
        self._queue = queue
        self._no_ack = no_ack
        # Set when the answer comes later: the connection's input waits until it is called.
        self.release_input: Callable[[], None] | None = None

    def __call__(self, entry: Entry | None) -> None:
        if self._channel.closing:
            if entry is not None:
                self._queue.requeue([entry], UNSENT)  # never delivered: not a return
        elif entry is None:
            self._channel.counters.got_empty += 1
            self._channel.send_method(build(commands.Basic.GetEmpty))
        else:
            self._send(entry)
        if self.release_input is not None:
            self.release_input()

    def _send(self, entry: Entry) -> None:
        channel, queue = self._channel, self._queue
        tag = channel.unacked.next_tag()
        _count_get(channel, queue, entry, self._no_ack)
        if self._no_ack:
            queue.forget(entry)
        else:
            channel.unacked.add(Unacked(tag, queue, entry, None))
            timeout_ms = channel.ack_timeout_ms(queue)
            if timeout_ms:
                channel.deadlines.use(timeout_ms / 1000)
                if channel.deadlines.idle:
                    channel.deadlines.wake()
            queue.note_delivered(entry)
        message = entry.message
        assert message is not None, "a queue hands out messages read back"
        method = build(
            commands.Basic.GetOk,
            delivery_tag=tag,
            redelivered=entry.redelivered,
            exchange=message.exchange,
            routing_key=message.routing_key,
            message_count=queue.message_count,
        )
        # A get from a queue that counts deliveries always says the count, 0 the first time.
        header = (
            delivery_count_header(message, entry.returns) if queue.args.returns.counts else None
        )
        channel.send_content(method, message, header)


def _count_get(channel: Channel, queue: Queue, entry: Entry, no_ack: bool) -> None:
    """The running totals behind the management API's get and redeliver rates."""
    counters = channel.counters
    if no_ack:
        counters.got_auto_ack += 1
        queue.msg_got_no_ack += 1
    else:
        counters.got_manual_ack += 1
        queue.msg_got += 1
    if entry.redelivered:
        counters.redelivered += 1
        queue.msg_redelivered += 1
