"""basic.*, confirm.*, tx.* and channel.flow handlers: consuming, acknowledging,
confirming. channel_methods.py says which method each of them handles.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError, ConnectionError_
from kanin.amqp.methods import build
from kanin.core import reply_to
from kanin.core.basic_get import GetAnswer
from kanin.core.confirms import ConfirmLedger
from kanin.core.consumer import Consumer
from kanin.core.permissions import check_permission
from kanin.core.publishing import route_and_enqueue
from kanin.core.queue_args import NACKED, REJECTED

if TYPE_CHECKING:
    from kanin.core.channel import Channel


def _queue_name(channel: Channel, name: str) -> str:
    """An empty queue name means the queue last declared on this channel."""
    if name:
        return name
    if not channel.last_queue_name:
        raise ChannelError(C.NOT_FOUND, "no previously declared queue")
    return channel.last_queue_name


def basic_qos(channel: Channel, method: commands.Basic.Qos) -> None:
    if method.prefetch_size:
        raise ConnectionError_(C.NOT_IMPLEMENTED, f"prefetch_size!=0 ({method.prefetch_size})")
    if method.global_:
        channel.global_prefetch = method.prefetch_count
    else:
        # RabbitMQ 3.10: a per-consumer qos also lifts an earlier channel-wide limit.
        channel.consumer_prefetch = method.prefetch_count
        channel.global_prefetch = 0
    channel.wake()  # a raised or lifted channel limit: its parked consumers may go on
    channel.send_method(build(commands.Basic.QosOk))


def basic_consume(channel: Channel, method: commands.Basic.Consume) -> None:
    if reply_to.is_pseudo_queue(method.queue):
        _consume_reply_to(channel, method)
        return
    name = _queue_name(channel, method.queue)
    check_permission(channel.services, "read", "queue", name)
    queue = channel.vhost.get_queue(name, channel.port)
    tag = _consumer_tag(channel, method)
    consumer = Consumer(
        tag,
        channel,
        queue,
        method.no_ack,
        method.exclusive,
        channel.consumer_prefetch,
        method.arguments or {},
    )
    queue.admit_consumer(consumer)  # a stream's rules come first, as in RabbitMQ
    if channel.global_prefetch and not queue.supports_global_qos:
        raise ConnectionError_(
            C.NOT_IMPLEMENTED,
            f"queue '{name}' in vhost '{channel.vhost.name}' does not support global qos",
        )
    if queue.has_exclusive_consumer() or (consumer.exclusive and queue.consumers):
        raise ChannelError(
            C.ACCESS_REFUSED, f"queue '{name}' in vhost '{channel.vhost.name}' in exclusive use"
        )
    # consume-ok goes out before any delivery: dispatch only runs on a later loop turn.
    if not method.nowait:
        channel.send_method(build(commands.Basic.ConsumeOk, consumer_tag=tag))
    channel.add_consumer(consumer)


def _consumer_tag(channel: Channel, method: commands.Basic.Consume) -> str:
    """The client's tag, or a server-made `amq.ctag-...`; reusing a tag on the channel
    closes the connection with 530, as in RabbitMQ."""
    tag = method.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
    if tag in channel.consumers or (channel.reply is not None and tag == channel.reply.tag):
        raise ConnectionError_(C.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
    return tag


def _consume_reply_to(channel: Channel, method: commands.Basic.Consume) -> None:
    replies = channel.services.replies
    replies.check_consume(channel, method.no_ack)
    tag = _consumer_tag(channel, method)
    replies.consume(channel, tag)
    if not method.nowait:
        channel.send_method(build(commands.Basic.ConsumeOk, consumer_tag=tag))


def basic_cancel(channel: Channel, method: commands.Basic.Cancel) -> None:
    channel.cancel_consumer(method.consumer_tag or "")
    if not method.nowait:
        channel.send_method(build(commands.Basic.CancelOk, consumer_tag=method.consumer_tag))


def basic_get(channel: Channel, method: commands.Basic.Get) -> None:
    name = _queue_name(channel, method.queue)
    check_permission(channel.services, "read", "queue", name)
    queue = channel.vhost.get_queue(name, channel.port)
    queue.touch()
    answer = GetAnswer(channel, queue, method.no_ack)
    if not queue.get(answer):
        # Its head is being read back: what the client sent next waits (core/basic_get.py).
        answer.release_input = channel.port.hold_input()


def basic_ack(channel: Channel, method: commands.Basic.Ack) -> None:
    _settle(channel, method.delivery_tag, method.multiple, None)


def basic_nack(channel: Channel, method: commands.Basic.Nack) -> None:
    _settle(channel, method.delivery_tag, method.multiple, method.requeue, NACKED)


def basic_reject(channel: Channel, method: commands.Basic.Reject) -> None:
    _settle(channel, method.delivery_tag or 0, False, method.requeue, REJECTED)


def _settle(
    channel: Channel, tag: int, multiple: bool, requeue: bool | None, how: str = NACKED
) -> None:
    records = channel.unacked.settle(tag, multiple)
    if channel.tx is not None:
        # As in RabbitMQ: the tag is checked now, the ack takes effect at commit, and a
        # rollback puts the deliveries back as unacked.
        channel.tx.append(("settle", (records, requeue, how)))
        return
    channel.apply_settled(records, requeue, how)


def basic_recover(channel: Channel, method: Any) -> None:
    if not method.requeue:
        raise ConnectionError_(C.NOT_IMPLEMENTED, "requeue=false")
    # recover-ok precedes the redeliveries, as RabbitMQ sends it: they are dispatched at once.
    if isinstance(method, commands.Basic.Recover):
        channel.send_method(build(commands.Basic.RecoverOk))
    channel.recover()


def confirm_select(channel: Channel, method: commands.Confirm.Select) -> None:
    if channel.tx is not None:
        raise ChannelError(C.PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
    if channel.confirms is None:
        channel.confirms = ConfirmLedger(
            channel.services.store, lambda: channel.port.request_flush_next_turn(channel)
        )
    if not method.nowait:
        channel.send_method(build(commands.Confirm.SelectOk))


def tx_select(channel: Channel, method: commands.Tx.Select) -> None:
    if channel.confirms is not None:
        raise ChannelError(C.PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
    if channel.tx is None:
        channel.tx = []
    channel.send_method(build(commands.Tx.SelectOk))


def tx_commit(channel: Channel, method: commands.Tx.Commit) -> None:
    if channel.tx is None:
        raise ChannelError(C.PRECONDITION_FAILED, "channel is not transactional")
    work, channel.tx = channel.tx, []
    for kind, args in work:
        if kind == "publish":
            route_and_enqueue(channel, *args)
        else:
            channel.apply_settled(*args)
    store = channel.services.store
    if store is None:
        channel.send_method(build(commands.Tx.CommitOk))
        return

    def committed(ok: bool) -> None:
        # The publishes and acks of this transaction are durable: only now commit-ok.
        if channel.closing:
            return
        if ok:
            channel.send_method(build(commands.Tx.CommitOk))
        else:
            channel.fail(ChannelError(C.INTERNAL_ERROR, "message store write failed", 90, 20))

    store.after_commit(committed)


def tx_rollback(channel: Channel, method: commands.Tx.Rollback) -> None:
    if channel.tx is None:
        raise ChannelError(C.PRECONDITION_FAILED, "channel is not transactional")
    work, channel.tx = channel.tx, []
    for kind, args in work:
        if kind == "settle":
            channel.unacked.restore(args[0])
    channel.send_method(build(commands.Tx.RollbackOk))


def channel_flow(channel: Channel, method: commands.Channel.Flow) -> None:
    if not method.active:
        raise ConnectionError_(C.NOT_IMPLEMENTED, "active=false")
    channel.send_method(build(commands.Channel.FlowOk, active=True))
