"""exchange.* and queue.* handlers: translate methods to vhost operations and reply.

channel_methods.py says which method each of them handles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError
from kanin.amqp.methods import build
from kanin.core.exchanges import Destination
from kanin.core.permissions import authorizer, check_permission

if TYPE_CHECKING:
    from kanin.core.channel import Channel


def exchange_declare(channel: Channel, method: commands.Exchange.Declare) -> None:
    channel.vhost.declare_exchange(
        method.exchange,
        method.exchange_type,
        passive=method.passive,
        durable=method.durable,
        auto_delete=method.auto_delete,
        internal=method.internal,
        arguments=method.arguments or {},
        authorize=None if method.passive else authorizer(channel.services),
    )
    if not method.nowait:
        channel.send_definition_reply(build(commands.Exchange.DeclareOk))


def exchange_delete(channel: Channel, method: commands.Exchange.Delete) -> None:
    channel.vhost.delete_exchange(
        method.exchange, method.if_unused, authorize=authorizer(channel.services)
    )
    if not method.nowait:
        channel.send_definition_reply(build(commands.Exchange.DeleteOk))


def exchange_bind(
    channel: Channel, method: commands.Exchange.Bind | commands.Exchange.Unbind
) -> None:
    vhost = channel.vhost
    check_permission(channel.services, "write", "exchange", method.destination)
    if method.destination == "" or method.source == "":
        raise ChannelError(C.ACCESS_REFUSED, "operation not permitted on the default exchange")
    check_permission(channel.services, "read", "exchange", method.source)
    binding = isinstance(method, commands.Exchange.Bind)
    destination: Destination | None
    if binding:
        destination = vhost.get_exchange(method.destination)
    else:
        destination = vhost.exchanges.get(method.destination)
    if binding and destination is not None:
        vhost.bind(method.source, destination, method.routing_key, method.arguments or {})
    elif destination is not None:
        vhost.unbind(method.source, destination, method.routing_key, method.arguments or {})
    if not method.nowait:
        channel.send_definition_reply(
            build(commands.Exchange.BindOk) if binding else build(commands.Exchange.UnbindOk)
        )


def queue_declare(channel: Channel, method: commands.Queue.Declare) -> None:
    vhost, port = channel.vhost, channel.port
    reply_declare_ok = channel.services.replies.declare_ok(method.queue, method.passive)
    if reply_declare_ok is not None:
        channel.send_method(reply_declare_ok)
        return
    if method.passive:
        queue = vhost.get_queue(method.queue, port)
        queue.touch()  # a passive declare counts as use for x-expires, as in RabbitMQ
    else:
        queue = vhost.declare_queue(
            method.queue,
            port,
            passive=False,
            durable=method.durable,
            exclusive=method.exclusive,
            auto_delete=method.auto_delete,
            arguments=method.arguments or {},
            authorize=authorizer(channel.services),
        )
    if queue.exclusive_owner is port:
        port.exclusive_queues.add(queue)
    channel.last_queue_name = queue.name
    if not method.nowait:
        channel.send_definition_reply(
            build(
                commands.Queue.DeclareOk,
                queue=queue.name,
                message_count=queue.message_count,
                consumer_count=len(queue.consumers),
            )
        )


def queue_bind(channel: Channel, method: commands.Queue.Bind | commands.Queue.Unbind) -> None:
    vhost, port = channel.vhost, channel.port
    name = method.queue or channel.last_queue_name
    check_permission(channel.services, "write", "queue", name)
    if method.exchange == "":
        raise ChannelError(C.ACCESS_REFUSED, "operation not permitted on the default exchange")
    check_permission(channel.services, "read", "exchange", method.exchange)
    arguments = method.arguments or {}
    if isinstance(method, commands.Queue.Bind):
        vhost.get_exchange(method.exchange)  # RabbitMQ reports a missing exchange first
        vhost.bind(method.exchange, vhost.get_queue(name, port), method.routing_key, arguments)
        if not method.nowait:
            channel.send_definition_reply(build(commands.Queue.BindOk))
        return
    # RabbitMQ 3.x: unbinding from a missing queue or exchange, or a missing binding, is ok;
    # only touching an existing binding of another connection's exclusive queue is refused.
    queue = vhost.queues.get(name)
    if queue is not None and vhost.has_binding(
        method.exchange, queue, method.routing_key, arguments
    ):
        vhost.check_exclusive(queue, port)
        vhost.unbind(method.exchange, queue, method.routing_key, arguments)
    channel.send_definition_reply(build(commands.Queue.UnbindOk))


def queue_purge(channel: Channel, method: commands.Queue.Purge) -> None:
    name = method.queue or channel.last_queue_name
    check_permission(channel.services, "read", "queue", name)
    queue = channel.vhost.get_queue(name, channel.port)
    queue.check_purgeable()
    count = queue.purge()
    if not method.nowait:
        channel.send_method(build(commands.Queue.PurgeOk, message_count=count))


def queue_delete(channel: Channel, method: commands.Queue.Delete) -> None:
    vhost = channel.vhost
    name = method.queue or channel.last_queue_name
    check_permission(channel.services, "configure", "queue", name)
    queue = vhost.queues.get(name)
    if queue is None:
        # RabbitMQ 3.x answers delete-ok for a queue that does not exist.
        count = 0
    else:
        vhost.check_exclusive(queue, channel.port)
        count = vhost.delete_queue(queue, method.if_unused, method.if_empty)
    if not method.nowait:
        channel.send_definition_reply(build(commands.Queue.DeleteOk, message_count=count))
