"""Publisher confirms that other connections resolve (consumers' acks on an end-to-end
queue) go out once the event loop has read every connection readable in that pass: one
frame for all of them, not one per consumer's ack. Two sessions on one broker and a fake
clock; the socket layer's data_received is called by hand, as the loop calls it for each
readable connection before it runs its call_soon callbacks."""

from __future__ import annotations

from pamqp import commands, frame

from kanin.testing.session_pair import SessionPair


def end_to_end_publisher() -> SessionPair:
    pair = SessionPair()
    pair.handshake()
    pair.open_channel(1)
    pair.send_method(1, commands.Confirm.Select())
    arguments = {"x-confirm-on-ack": True}
    pair.send_method(1, commands.Queue.Declare(queue="e2e", arguments=arguments))
    pair.frames()
    return pair


def consumer_of(publisher: SessionPair, tag: str) -> SessionPair:
    pair = SessionPair(broker=publisher.broker, clock=publisher.clock)
    pair.handshake()
    pair.open_channel(1)
    pair.send_method(1, commands.Basic.Qos(prefetch_count=1))
    pair.send_method(1, commands.Basic.Consume(queue="e2e", consumer_tag=tag))
    pair.frames()
    return pair


def test_acks_read_in_one_loop_pass_confirm_in_one_frame() -> None:
    publisher = end_to_end_publisher()
    consumers = [consumer_of(publisher, "first"), consumer_of(publisher, "second")]
    publisher.publish(1, b"one", "e2e")
    publisher.publish(1, b"two", "e2e")
    assert publisher.methods() == [], "nothing is confirmed before a consumer acks"
    for consumer in consumers:  # prefetch 1: one message each
        [(_, deliver)] = consumer.methods()
        assert isinstance(deliver, commands.Basic.Deliver) and deliver.delivery_tag == 1
    written = len(publisher.transport.written)
    for consumer in consumers:
        consumer.session.data_received(frame.marshal(commands.Basic.Ack(delivery_tag=1), 1))
    assert len(publisher.transport.written) == written, "not while acks may still be read"
    [(number, ack)] = publisher.methods()  # the loop's callbacks run: the frame goes out
    assert number == 1 and isinstance(ack, commands.Basic.Ack)
    assert (ack.delivery_tag, ack.multiple) == (2, True)
