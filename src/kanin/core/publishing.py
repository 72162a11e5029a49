"""basic.publish: from an assembled message to queues, returns and confirms.

The straight path: check the exchange and permission, decode the properties,
route through the vhost, hand the message to each queue, then record the
confirm (sent coalesced at the end of the turn). An unroutable mandatory
message gets basic.return now, followed at once by its basic.ack, as in RabbitMQ.
In tx mode the publish is buffered and this path runs at tx.commit instead.
Direct reply-to's rewriting of reply_to and its delivery of replies are reply_to.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError, ConnectionError_
from kanin.amqp.frames import HeaderFrame, decode_properties
from kanin.amqp.methods import PublishArgs, build
from kanin.amqp.tables import encode_header
from kanin.core import reply_to
from kanin.core.confirms import ConfirmTicket
from kanin.core.exchanges import ABSORBED
from kanin.core.exchanges import STORED as EXCHANGE_STORED
from kanin.core.exchanges.routing import route, route_keys
from kanin.core.message import Message
from kanin.core.permissions import check_permission
from kanin.core.queue_args import parse_expiration
from kanin.core.queues import REFUSED, STORED

if TYPE_CHECKING:
    from kanin.core.channel import Channel
    from kanin.core.confirms import ConfirmLedger
    from kanin.core.queues import Queue
    from kanin.core.vhost import VirtualHost


def publish(channel: Channel, args: PublishArgs, header: HeaderFrame, body: bytes) -> None:
    if args.immediate:
        raise ConnectionError_(C.NOT_IMPLEMENTED, "immediate=true")
    vhost = channel.vhost
    user = channel.services.user
    # A channel's publishes mostly go to one exchange: the write check is asked again
    # only for another exchange, or once the user's permissions in the vhost were replaced.
    permission = user.permissions.get(vhost.name)
    checked = channel.write_checked
    if checked[0] is not permission or checked[1] != args.exchange or permission is None:
        check_permission(channel.services, "write", "exchange", args.exchange)
        channel.write_checked = (permission, args.exchange)
    exchange = vhost.exchanges.get(args.exchange)
    if exchange is None:
        raise vhost.exchange_not_found(args.exchange)
    if exchange.internal:
        raise ChannelError(
            C.ACCESS_REFUSED,
            f"cannot publish to internal exchange '{exchange.name}' in vhost '{vhost.name}'",
        )
    properties = decode_properties(header.payload)
    user_id = properties.user_id
    if user_id and user_id != user.name:
        raise ChannelError(
            C.PRECONDITION_FAILED,
            f"user_id property set to '{user_id}' but authenticated user was '{user.name}'",
        )
    header_payload = header.payload
    extra_keys = sender_selected_keys(properties.headers) if properties.headers else ()
    if properties.reply_to is not None and reply_to.is_pseudo_queue(properties.reply_to):
        properties.reply_to = reply_to.address_of(channel)
        header_payload = encode_header(header.body_size, properties)
    if properties.headers and "BCC" in properties.headers:
        # BCC routes but is never seen by consumers: strip it, as RabbitMQ does.
        properties.headers = {k: v for k, v in properties.headers.items() if k != "BCC"}
        header_payload = encode_header(header.body_size, properties)
    message = Message(
        args.exchange,
        args.routing_key,
        header_payload,
        body,
        properties,
        None if properties.expiration is None else parse_expiration(properties.expiration),
        extra_keys,
    )
    if channel.tx is not None:
        channel.tx.append(("publish", (message, args.mandatory)))
        return
    route_and_enqueue(channel, message, args.mandatory)


def route_and_enqueue(channel: Channel, message: Message, mandatory: bool) -> None:
    confirms = channel.confirms
    seq = confirms.next_seq() if confirms is not None else 0
    vhost = channel.vhost
    routed = refused = stored = False
    if message.routing_key.startswith(reply_to.REPLY_TO) and reply_to.is_addressed(
        message.exchange, message.routing_key
    ):
        routed = channel.services.replies.deliver(message)
    else:
        exchange = vhost.exchanges.get(message.exchange)
        if exchange is not None and exchange.intercepts:
            verdict = exchange.intercept(message)
            stored = bool(verdict & EXCHANGE_STORED)
            if verdict & ABSORBED:
                # A duplicate (or a message held for later): confirmed, never returned.
                message.shed_properties()
                _settle_confirm(channel, seq, refused=False, stored=stored)
                return
        if exchange is not None:
            queues = (
                route_keys(vhost.exchanges, exchange, message.routing_keys, message.headers)
                if message.cc_bcc
                else route(vhost.exchanges, exchange, message.routing_key, message.headers)
            )
            exchange.msg_published_in += 1
            exchange.msg_published_out += len(queues)
        else:
            queues = []
        ticket = (
            _hold_for_queues(confirms, seq, queues)
            if vhost.ticket_queues and confirms is not None
            else None
        )
        refused, stored_in_queue = _enqueue(queues, message, ticket)
        stored = stored or stored_in_queue
        if ticket is not None:  # routed, so never returned
            message.shed_properties()
            _settle_by_queues(channel, ticket, refused, stored)
            return
        routed = bool(queues)
    message.shed_properties()  # queues forward the header bytes; see Message
    if not routed:
        if mandatory:
            channel.counters.returned_unroutable += 1
            _return_unroutable(channel, message, seq)
            return
        channel.counters.dropped_unroutable += 1
    if confirms is not None:
        _settle_confirm(channel, seq, refused, stored)


def route_without_channel(vhost: VirtualHost, message: Message) -> tuple[bool, bool]:
    """A message from no channel (the management API's publish), routed and enqueued as
    route_and_enqueue does with no confirm to keep: (routed, stored). A message an
    exchange absorbs (held for later, a duplicate) counts as routed."""
    exchange = vhost.exchanges.get(message.exchange)
    if exchange is None:
        raise vhost.exchange_not_found(message.exchange)
    if exchange.intercepts:
        verdict = exchange.intercept(message)
        if verdict & ABSORBED:
            message.shed_properties()
            return True, bool(verdict & EXCHANGE_STORED)
    queues = route_keys(vhost.exchanges, exchange, message.routing_keys, message.headers)
    exchange.msg_published_in += 1
    exchange.msg_published_out += len(queues)
    _, stored = _enqueue(queues, message, None)
    message.shed_properties()
    return bool(queues), stored


def _enqueue(
    queues: list[Queue], message: Message, ticket: ConfirmTicket | None
) -> tuple[bool, bool]:
    """Hand `message` to each queue it was routed to (through `ticket` to the queues that
    settle confirms themselves); (a queue refused it, a queue stored it). A refusal is
    dead-lettered by the queue that refused."""
    refused = stored = False
    for queue in queues:
        queue.msg_published += 1
        if ticket is not None and queue.settles_confirms:
            result = queue.publish_with_ticket(message, ticket)
        else:
            result = queue.publish(message)
        if result == REFUSED:
            refused = True
            queue.reject_publish_dead_letter(message)
        elif result == STORED:
            stored = True
    return refused, stored


_ROUTING: Final = "routing"  # a confirm party: the publish is still being routed


def _hold_for_queues(ledger: ConfirmLedger, seq: int, queues: list[Queue]) -> ConfirmTicket | None:
    """A confirmed publish routed to queues that settle confirms themselves (end-to-end
    queues on a consumer's ack, streams once on disk) waits for each of them, and for this
    routing until it is over: a queue may settle its part at once (an auto-ack consumer, a
    TTL of 0) while others are still to come. The ticket those queues settle through; None
    if no queue settles confirms.

    Routed to one queue only, nothing else is to come: the confirm waits for that queue
    alone (the usual case, without the list, and without the set operations that taking
    _ROUTING off again costs per publish). Such a queue refusing the publish never
    settled it, and whether it stored it is known before it can settle (streams settle
    once on disk, later; end-to-end queues store nothing)."""
    if len(queues) == 1:  # the usual case, without building a list
        settling = queues if queues[0].settles_confirms else []
    else:
        settling = [queue for queue in queues if queue.settles_confirms]
    if not settling:
        return None
    if len(queues) == 1 or (len(settling) == 1 and settling[0].settles_later):
        # Nothing else is to come, or the one that settles cannot before this routing is
        # over (a stream, after its commit round): no routing party to take back.
        ledger.hold(seq, settling[0].as_party)  # one queue settles, in either case
        return ConfirmTicket(ledger, seq)
    ledger.hold(seq, (*settling, _ROUTING))
    return ConfirmTicket(ledger, seq, routing=True)


def _settle_by_queues(channel: Channel, ticket: ConfirmTicket, refused: bool, stored: bool) -> None:
    """Routing is over: a refusal nacks now; else the confirm also waits, as usual, for the
    disk if anything was stored, and for the queues that settle confirms."""
    ledger, seq = ticket.ledger, ticket.seq
    if refused:
        ledger.reject(seq)
    else:
        if stored:
            ledger.add_disk(seq)
        if ticket.routing:  # else it was routed to one queue, held without it
            ledger.done(seq, _ROUTING)
    channel.port.request_flush(channel)


def _settle_confirm(channel: Channel, seq: int, refused: bool, stored: bool) -> None:
    if channel.confirms is not None:
        if refused:
            channel.confirms.reject(seq)
        elif stored:
            # Persistent on a durable queue: confirmed once on disk, as RabbitMQ does.
            channel.confirms.hold(seq, disk=True)
        else:
            channel.confirms.confirm(seq)
        channel.port.request_flush(channel)


def _return_unroutable(channel: Channel, message: Message, seq: int) -> None:
    """basic.return 312 NO_ROUTE, and in confirm mode the ack right behind its content.

    RabbitMQ 3.10 confirms an unroutable publish as it handles it, so each return is
    followed by its own ack before anything about the next publish; clients that wait
    for one publish's outcome frame by frame (PHP's amqp extension) depend on it.
    """
    channel.send_content(
        build(
            commands.Basic.Return,
            reply_code=C.NO_ROUTE,
            reply_text="NO_ROUTE",
            exchange=message.exchange,
            routing_key=message.routing_key,
        ),
        message,
    )
    if channel.confirms is not None:
        channel.confirms.confirm(seq)
        channel.send_confirms()


def sender_selected_keys(headers: dict[str, Any] | None) -> tuple[str, ...]:
    """The CC and BCC routing keys of sender-selected distribution (RabbitMQ extension)."""
    if not headers:
        return ()
    keys: list[str] = []
    for name in ("CC", "BCC"):
        value = headers.get(name)
        if isinstance(value, list):
            keys.extend(v for v in value if isinstance(v, str))
    return tuple(keys)
