"""A channel: method dispatch, deliveries and the per-channel ledgers.

Rules of this file:
- A channel is OPEN until it or its peer starts closing; while CLOSING it ignores
  everything but channel.close / channel.close-ok, as the spec asks.
- Handlers live beside this file (handlers_*.py) and are looked up by method class in
  the table of channel_methods.py, the channel's whole method surface;
  they raise AMQPError, which the connection turns into channel.close or
  connection.close. They never write to the socket except through the port.
- What the channel uses of the broker comes in its constructor (ChannelServices), and
  direct reply-to is reply_to.py's: a channel only holds its reply consumer.
- Deliveries go out as soon as a queue dispatches; confirms are coalesced and go
  out at the end of the event-loop turn (see ConfirmLedger.drain), except that a
  returned publish's goes out right behind its basic.return (publishing.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, Protocol

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.assembler import Content, ContentAssembler
from kanin.amqp.errors import AMQPError, ChannelError, ConnectionError_
from kanin.amqp.frames import BodyFrame, HeaderFrame
from kanin.amqp.methods import (
    DeliveryEncoder,
    PublishArgs,
    build,
    class_and_method,
    close_for,
    encode_ack,
    encode_content,
    encode_method,
)
from kanin.core.ack_timeout import AckDeadlines, timed_out
from kanin.core.channel_methods import HANDLERS
from kanin.core.confirms import ConfirmLedger
from kanin.core.consumer import Consumer
from kanin.core.message import Entry, Message
from kanin.core.publishing import publish
from kanin.core.queue_args import RETURNED
from kanin.core.queues import Queue
from kanin.core.queues.returns import delivery_count_header
from kanin.core.reply_to import ReplyConsumer
from kanin.core.unacked import Unacked, UnackedLedger
from kanin.native import mypyc_attr

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kanin.core.ports import ChannelServices, ConnectionPort
    from kanin.core.scheduling import Cancellable

log = logging.getLogger(__name__)
# Final, so compiled it is a C static, not two name lookups per method frame.
_PUBLISH: Final = commands.Basic.Publish


class Delivered(Protocol):
    """A message as deliver_run sends it (a stream's StreamRecord is one)."""

    @property
    def exchange(self) -> str: ...
    @property
    def routing_key(self) -> str: ...
    @property
    def header(self) -> bytes: ...
    @property
    def body(self) -> bytes: ...


# An out-of-order publisher confirm waits for a multiple ack to cover it, and goes alone
# once it has waited one to two such periods (ConfirmLedger.age_held).
HOLD_ACKS_S = 0.01


# Tests subclass Channel (tests/core_harness.py); compiled, that needs this.
@mypyc_attr(allow_interpreted_subclasses=True)
class Channel:
    def __init__(self, channel_id: int, port: ConnectionPort, services: ChannelServices) -> None:
        self.id = channel_id
        self.port = port
        self.services = services
        self.vhost = services.vhost
        self.counters = services.vhost.counters  # the broker's running totals
        self.closing = False
        self.assembler = ContentAssembler(services.max_message_bytes, port.assembly_limit)
        self.unacked = UnackedLedger()
        self.consumers: dict[str, Consumer] = {}
        self.consumer_prefetch = 0  # basic.qos global=false: for consumers created later
        self.global_prefetch = 0  # basic.qos global=true: for the channel as a whole
        self.global_unacked = 0
        # Consumers parked by their queues while this channel could not deliver (global
        # prefetch reached, socket not writable): `wake` gives them back their turns.
        self.parked: dict[Consumer, None] = {}
        self.confirms: ConfirmLedger | None = None  # set by confirm.select
        self._held_timer: Cancellable | None = None  # held acks go out when it fires
        self.tx: list[tuple[str, Any]] | None = None  # buffered publishes/acks in tx mode
        self.last_queue_name = ""
        self.write_checked: tuple[Any, str] = (None, "")  # (permission, exchange): publishing.py
        self.reply: ReplyConsumer | None = None  # set and cleared by reply_to.ReplyRegistry
        self.deadlines = AckDeadlines(
            self.vhost.scheduler,
            self.unacked.outstanding,
            self.unacked.peek_tag,
            self._timeout_s,
            self._ack_timed_out,
        )

    # -- frames in ----------------------------------------------------------------

    def handle_method(self, method: Any) -> None:
        if self.closing:
            return
        if isinstance(method, _PUBLISH):
            self.assembler.start(method)
            return
        self.assembler.expect_method()
        handler = HANDLERS.get(type(method))
        if handler is None:
            raise ConnectionError_(
                C.COMMAND_INVALID, "unimplemented method", *class_and_method(method.index)
            )
        try:
            handler(self, method)
        except AMQPError as exc:
            raise exc.with_method(*class_and_method(method.index)) from None

    def handle_header(self, frame: HeaderFrame) -> None:
        if self.closing:
            return
        content = self.assembler.on_header(frame)
        if content is not None:
            self._publish(content)

    def handle_body(self, frame: BodyFrame) -> None:
        if self.closing:
            return
        content = self.assembler.on_body(frame)
        if content is not None:
            self._publish(content)

    def publish_whole(self, args: PublishArgs, header: HeaderFrame, body: bytes) -> None:
        """A publish whose frames arrived together, while the assembler is idle and the
        body within limits: the message the assembler would have built, without it.
        A channel error closes this channel; a connection error goes up."""
        try:
            publish(self, args, header, body)
        except ChannelError as exc:
            exc.with_method(60, 40)
            self.fail(exc)
            return
        except AMQPError as exc:
            raise exc.with_method(60, 40) from None
        self.counters.published += 1

    def _publish(self, content: Content) -> None:
        try:
            publish(self, PublishArgs.of(content.method), content.header, content.body)
        except AMQPError as exc:
            raise exc.with_method(60, 40) from None
        self.counters.published += 1

    # -- frames out ---------------------------------------------------------------

    def send_method(self, method: Any) -> None:
        self.port.send(encode_method(self.id, method))

    def send_definition_reply(self, method: Any) -> None:
        """The -ok of a declare, delete, bind or unbind: it says the change took effect,
        so it goes out only once the definitions are on disk, and what follows it on the
        connection waits behind it (replies keep their order)."""
        self.port.hold_until_saved()
        self.send_method(method)

    def send_content(self, method: Any, message: Message, header: bytes | None = None) -> None:
        """A method with content: the message's header bytes as published, or `header`."""
        parts = [encode_method(self.id, method)]
        if header is None:
            header = message.header_payload
        parts += encode_content(self.id, header, message.body, self.port.frame_max)
        self.port.send_parts(parts)

    def flush(self) -> None:
        """End of an event-loop turn: send the coalesced publisher confirms."""
        if self.confirms is None or self.closing:
            return
        self.send_confirms(final=False)

    def send_confirms(self, final: bool = True) -> None:
        """Send the acks and nacks resolved so far, coalesced (see ConfirmLedger.drain).
        Unless `final`, acks above a confirm still pending wait HOLD_ACKS_S to twice that
        for a multiple ack to cover them: out-of-order confirms (end-to-end queues) went
        out one frame each, most of a frame per message."""
        confirms = self.confirms
        assert confirms is not None
        nacks, acks = confirms.drain(hold_above=not final)
        for seq in nacks:
            self.send_method(
                build(commands.Basic.Nack, delivery_tag=seq, multiple=False, requeue=False)
            )
        for seq, multiple in acks:
            self.port.send(encode_ack(self.id, seq, multiple))
        self.counters.confirmed += confirms.acks_drained
        confirms.acks_drained = 0
        if confirms.holds_acks() and self._held_timer is None:
            self._held_timer = self.vhost.scheduler.call_later(HOLD_ACKS_S, self._held_due)

    def _held_due(self) -> None:
        """A holding period is over: the acks held through all of the previous one go
        out at the next flush, singly; the timer runs again while any are held."""
        self._held_timer = None
        if self.confirms is not None and not self.closing:
            self.confirms.age_held()
            self.port.request_flush(self)

    # -- deliveries ---------------------------------------------------------------

    def can_deliver(self) -> bool:
        return (
            not self.closing
            and self.port.writable
            and (self.global_prefetch == 0 or self.global_unacked < self.global_prefetch)
        )

    def deliver(self, consumer: Consumer, entry: Entry) -> None:
        tag = self.unacked.next_tag()
        if not consumer.no_ack:
            self.unacked.add(Unacked(tag, consumer.queue, entry, consumer))
            if self.deadlines.idle:
                self.deadlines.wake()
            consumer.unacked += 1
            self.global_unacked += 1
            self.counters.delivered_manual_ack += 1
            consumer.queue.msg_delivered += 1
            if entry.stored_id:
                consumer.queue.note_delivered(entry)
        else:
            self.counters.delivered_auto_ack += 1
            consumer.queue.msg_delivered_no_ack += 1
            consumer.queue.forget(entry)
        if entry.redelivered:
            self.counters.redelivered += 1
            consumer.queue.msg_redelivered += 1
        message = entry.message
        assert message is not None, "a queue hands out messages read back"
        # A message back after a return says how often (queues/returns.py); else the
        # publisher's header bytes go out as they came.
        header = (
            delivery_count_header(message, entry.returns)
            if entry.returns
            else message.header_payload
        )
        encoder = consumer.encoder
        if encoder is None:
            encoder = DeliveryEncoder(self.id, consumer.tag_bytes, self.port.frame_max)
            consumer.encoder = encoder
        parts: list[bytes] = []
        encoder.add(
            parts,
            tag,
            message.exchange,
            message.routing_key,
            header,
            message.body,
            entry.redelivered,
        )
        self.port.send_parts(parts)

    def deliver_run(self, consumer: Consumer, entry: Entry, messages: Sequence[Delivered]) -> None:
        """`messages`, in order, to `consumer`, whose queue never looks at a delivery's
        entry again (a stream's acks, requeues and rejects do not): they all hold `entry`.
        The frames are those `deliver` writes, encoded for the whole run at once. Only
        for consumers that ack (a stream refuses the others)."""
        assert not consumer.no_ack, "deliver_run tracks every delivery as unacked"
        queue, unacked = consumer.queue, self.unacked
        encoder = DeliveryEncoder(self.id, consumer.tag_bytes, self.port.frame_max)
        parts: list[bytes] = []
        for message in messages:
            tag = unacked.next_tag()
            unacked.add(Unacked(tag, queue, entry, consumer))
            encoder.add(
                parts, tag, message.exchange, message.routing_key, message.header, message.body
            )
        consumer.unacked += len(messages)
        self.global_unacked += len(messages)
        self.counters.delivered_manual_ack += len(messages)
        queue.msg_delivered += len(messages)
        if self.deadlines.idle:
            self.deadlines.wake()
        self.port.send(b"".join(parts))  # one piece: the flush's join passes it through

    # -- acknowledgements ---------------------------------------------------------

    def ack_timeout_ms(self, queue: Queue) -> int | None:
        """How long a delivery from `queue` may wait for its ack (core/ack_timeout.py)."""
        return queue.args.consumer_timeout_ms or self.services.consumer_timeout_ms

    def _timeout_s(self, record: Unacked) -> float:
        if record.consumer is not None:
            return record.consumer.ack_timeout_s
        timeout_ms = self.ack_timeout_ms(record.queue)
        return timeout_ms / 1000 if timeout_ms else 0.0

    def _ack_timed_out(self, record: Unacked) -> None:
        self.fail(timed_out(self.id, round(self._timeout_s(record) * 1000)))

    def apply_settled(
        self, records: list[Unacked], requeue: bool | None, how: str = RETURNED
    ) -> None:
        """ack (requeue=None), or nack/reject with or without requeue; `how` says which
        (queue_args.NACKED or REJECTED), for the queues that treat them apart."""
        if requeue:
            self._give_back(records, how)
            return
        self._release(records)
        if requeue is None:
            self.counters.acked += len(records)
            for record in records:
                record.queue.msg_acked += 1
                record.queue.forget(record.entry)
        else:
            for record in records:  # nack/reject without requeue: dead-lettered if there is a DLX
                record.queue.dead_letter([record.entry], "rejected")

    def _release(self, records: list[Unacked]) -> None:
        """Free the prefetch credit the settled deliveries held, and let queues dispatch."""
        if not records:
            return
        self.global_unacked -= _consumer_deliveries(records)
        queues = self._free_consumers(records)
        self.wake()  # under a global limit, these acks may have made room for the channel
        for queue in queues:
            if queue.consumers:
                queue.schedule_dispatch()

    def _free_consumers(self, records: list[Unacked]) -> list[Queue]:
        """Give each consumer back the per-consumer prefetch credit its settled deliveries
        held (the channel-wide count is the caller's); returns the queues concerned."""
        queues: dict[int, Queue] = {}
        for record in records:
            consumer = record.consumer
            if consumer is not None:
                consumer.unacked -= 1
                queues[id(consumer.queue)] = consumer.queue
                if consumer.parked and consumer not in self.parked and consumer.has_room():
                    # Parked for its own limit, which it is under now. If the channel
                    # cannot deliver yet, it waits for the channel with the others.
                    if self.can_deliver():
                        consumer.queue.unpark(consumer)
                    else:
                        self.parked[consumer] = None
        return list(queues.values())

    def wake(self) -> None:
        """If the channel can deliver again (acks under its global limit, a new qos, a socket
        that drained), give the consumers parked meanwhile their turns back, on whichever
        queue they consume from. The work is one step per consumer that was parked."""
        if not self.parked or not self.can_deliver():
            return
        parked, self.parked = self.parked, {}
        for consumer in parked:
            # One full on its own stays parked; its acks wake it (_release).
            if consumer.has_room():
                consumer.queue.unpark(consumer)

    @staticmethod
    def _requeue(records: list[Unacked]) -> None:
        """The channel closed with these unacked: each goes back to its queue."""
        by_queue: dict[int, tuple[Queue, list[Entry]]] = {}
        for record in records:
            by_queue.setdefault(id(record.queue), (record.queue, []))[1].append(record.entry)
        for queue, entries in by_queue.values():
            queue.requeue(entries)

    def recover(self) -> None:
        """basic.recover requeue=true: every unacked delivery goes back (see _give_back)."""
        self._give_back(self.unacked.take_all(), RETURNED)

    def _give_back(self, records: list[Unacked], how: str) -> None:
        """Requeue settled deliveries (basic.recover, nack/reject with requeue) as RabbitMQ
        3.10 does, so redeliveries come in its order: one consumer's deliveries at a time,
        by queue name then consumer tag (basic.get's first), each group back in its place
        in the queue and offered to consumers with room before the next group comes back.
        The consumer whose group it is has its credit back by then; the others still hold
        theirs, so a recovered consumer tends to get its own messages again. The channel-wide
        (global) prefetch credit comes back only after every group, as RabbitMQ tells the
        channel's limiter last. (RabbitMQ's rabbit_channel groups per {queue, consumer tag}
        and each group is one requeue the queue handles, dispatching, before the next.)"""
        for queue, group in _groups_in_requeue_order(records):
            self._free_consumers(group)
            queue.requeue([record.entry for record in group], how)
            queue.dispatch_now()
        self.global_unacked -= _consumer_deliveries(records)
        self.wake()

    # -- consumers ----------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers[consumer.tag] = consumer
        if not consumer.no_ack:
            self.deadlines.use(consumer.ack_timeout_s)
        consumer.queue.add_consumer(consumer)

    def cancel_consumer(self, tag: str) -> None:
        consumer = self.consumers.pop(tag, None)
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)
        elif self.reply is not None and tag == self.reply.tag:
            self.services.replies.cancel(self)

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        """The queue went away: tell the client, if it asked to be told."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        self.parked.pop(consumer, None)
        capabilities = self.port.client_capabilities
        if not self.closing and capabilities.get("consumer_cancel_notify"):
            self.send_method(build(commands.Basic.Cancel, consumer_tag=consumer.tag, nowait=True))

    # -- closing ------------------------------------------------------------------

    def shutdown(self) -> None:
        """The channel is gone (closed, errored, connection lost): give everything back."""
        self.closing = True
        self.deadlines.cancel()
        self.assembler.abandon()
        for consumer in list(self.consumers.values()):
            consumer.queue.remove_consumer(consumer)
        self.consumers.clear()
        self.parked.clear()
        self.services.replies.cancel(self)
        if self.confirms is not None:
            self.confirms.close()  # no confirm goes out on a closed channel
        if self._held_timer is not None:
            self._held_timer.cancel()
        uncommitted = [r for kind, args in (self.tx or []) if kind == "settle" for r in args[0]]
        self.tx = None
        self.unacked.restore(uncommitted)
        records = self.unacked.take_all()
        for record in records:
            if record.consumer is not None:
                record.consumer.unacked -= 1
        self.global_unacked = 0
        self._requeue(records)

    def fail(self, exc: ChannelError) -> None:
        """A channel error: send channel.close and wait for close-ok."""
        log.info(
            "channel error on connection %s, channel %d: %d %s",
            self.port.name,
            self.id,
            exc.reply_code,
            exc.reply_text,
        )
        self.send_method(close_for(commands.Channel.Close, exc))
        self.shutdown()


def _consumer_deliveries(records: list[Unacked]) -> int:
    """How many of these held channel-wide prefetch credit (basic.get's hold none)."""
    return sum(1 for record in records if record.consumer is not None)


def _groups_in_requeue_order(records: list[Unacked]) -> list[tuple[Queue, list[Unacked]]]:
    """The records by (queue, consumer), in delivery order within a group, the groups ordered
    as RabbitMQ orders them: queue name, then consumer tag, basic.get's (no tag) first."""
    groups: dict[tuple[int, str | None], tuple[Queue, list[Unacked]]] = {}
    for record in records:
        tag = record.consumer.tag if record.consumer is not None else None
        groups.setdefault((id(record.queue), tag), (record.queue, []))[1].append(record)
    return [
        groups[key]
        for key in sorted(groups, key=lambda k: (groups[k][0].name, k[1] is not None, k[1] or ""))
    ]
