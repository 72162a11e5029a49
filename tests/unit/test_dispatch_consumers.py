"""Which consumer gets each message, through real channels without sockets (core_harness):
consumers without capacity are set aside and come back when their channel has room again,
through every way room comes back (ack, nack, reject, recover, qos, a drained socket), and
cancel, channel close and queue deletion leave nothing behind."""

from __future__ import annotations

from pamqp import commands

from core_harness import Core, ack_all, cancel


def test_equal_consumers_take_turns() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel()
    for tag in ("a", "b", "c"):
        core.consume(channel, "q", tag)
    core.publish("q", *(b"m%d" % n for n in range(7)))
    assert [tag for tag, _ in core.take_deliveries()] == ["a", "b", "c", "a", "b", "c", "a"]


def test_a_full_consumer_is_skipped_and_rejoins_after_its_ack() -> None:
    core = Core()
    core.declare("q")
    limited, free = core.channel(prefetch=1), core.channel()
    core.consume(limited, "q", "limited")
    core.consume(free, "q", "free")
    core.publish("q", b"m0", b"m1", b"m2", b"m3")
    assert core.take_deliveries() == [
        ("limited", b"m0"),
        ("free", b"m1"),
        ("free", b"m2"),
        ("free", b"m3"),
    ]
    ack_all(limited)
    core.publish("q", b"m4", b"m5", b"m6")
    # Back at the end of the turns: after free, whose turn came while limited was full.
    assert core.take_deliveries() == [("free", b"m4"), ("limited", b"m5"), ("free", b"m6")]


def test_lower_priority_gets_messages_only_while_higher_ones_are_full() -> None:
    core = Core()
    core.declare("q")
    high1, high2, low = core.channel(prefetch=1), core.channel(prefetch=1), core.channel()
    core.consume(high1, "q", "high1", priority=10)
    core.consume(high2, "q", "high2", priority=10)
    core.consume(low, "q", "low", priority=-1)
    core.publish("q", b"m0", b"m1", b"m2", b"m3")
    assert core.take_deliveries() == [
        ("high1", b"m0"),
        ("high2", b"m1"),
        ("low", b"m2"),
        ("low", b"m3"),
    ]
    ack_all(high2)
    core.publish("q", b"m4", b"m5")
    assert core.take_deliveries() == [("high2", b"m4"), ("low", b"m5")]


def test_a_waiting_message_goes_to_the_consumer_that_acks() -> None:
    core = Core()
    core.declare("q")
    channels = [core.channel(prefetch=1) for _ in range(3)]
    for n, channel in enumerate(channels):
        core.consume(channel, "q", f"c{n}")
    core.publish("q", b"m0", b"m1", b"m2", b"waiting")
    assert len(core.take_deliveries()) == 3
    assert core.vhost.queues["q"].message_count == 1
    ack_all(channels[1])
    assert core.take_deliveries() == [("c1", b"waiting")]


def test_nack_reject_and_recover_give_room_back() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel(prefetch=1)
    core.consume(channel, "q", "c")
    core.publish("q", b"m0", b"m1", b"m2")
    assert core.take_deliveries() == [("c", b"m0")]
    channel.handle_method(commands.Basic.Reject(delivery_tag=1, requeue=False))
    assert core.take_deliveries() == [("c", b"m1")]
    channel.handle_method(commands.Basic.Nack(delivery_tag=2, requeue=False))
    assert core.take_deliveries() == [("c", b"m2")]
    channel.handle_method(commands.Basic.Recover(requeue=True))
    assert core.take_deliveries() == [("c", b"m2")]


def test_global_limit_wakes_consumers_on_every_queue_of_the_channel() -> None:
    core = Core()
    for name in ("q1", "q2", "q3"):
        core.declare(name)
    channel = core.channel(global_prefetch=1)
    for name in ("q1", "q2", "q3"):
        core.consume(channel, name, f"on-{name}")
    core.publish("q1", b"a")
    core.publish("q2", b"b")
    core.publish("q3", b"c")
    assert core.take_deliveries() == [("on-q1", b"a")]
    assert channel.parked  # the other two were found without room: set aside
    got = []
    for _ in range(2):
        ack_all(channel)
        got += core.take_deliveries()
    assert sorted(got) == [("on-q2", b"b"), ("on-q3", b"c")]
    ack_all(channel)
    assert core.take_deliveries() == []
    assert not channel.parked


def test_raising_the_global_limit_wakes_the_channels_consumers() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel(global_prefetch=1)
    core.consume(channel, "q", "a")
    core.consume(channel, "q", "b")
    core.publish("q", b"m0", b"m1", b"m2")
    assert core.take_deliveries() == [("a", b"m0")]
    channel.handle_method(commands.Basic.Qos(prefetch_count=3, global_=True))
    assert core.take_deliveries() == [("b", b"m1"), ("a", b"m2")]


def test_per_consumer_qos_lifts_the_global_limit_and_wakes_consumers() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel(global_prefetch=1)
    core.consume(channel, "q", "a")
    core.publish("q", b"m0", b"m1")
    assert core.take_deliveries() == [("a", b"m0")]
    channel.handle_method(commands.Basic.Qos(prefetch_count=5))  # global=false
    assert core.take_deliveries() == [("a", b"m1")]


def test_a_consumer_full_on_its_own_and_on_its_channel_waits_for_both() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel(prefetch=1)
    channel.handle_method(commands.Basic.Qos(prefetch_count=2, global_=True))
    core.consume(channel, "q", "a")  # per-consumer limit 1, channel limit 2
    other = core.channel(prefetch=1)
    core.consume(other, "q", "other")
    core.publish("q", b"m0", b"m1", b"m2")
    assert core.take_deliveries() == [("a", b"m0"), ("other", b"m1")]
    core.publish("q", b"m3")
    assert core.take_deliveries() == []
    ack_all(channel)
    assert core.take_deliveries() == [("a", b"m2")]
    ack_all(other)
    assert core.take_deliveries() == [("other", b"m3")]


def test_a_full_socket_sets_consumers_aside_until_it_drains() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel()
    core.consume(channel, "q", "a")
    core.port.writable = False
    core.publish("q", b"m0", b"m1")
    assert core.take_deliveries() == []
    assert channel.parked
    core.port.resume_writing()
    assert core.take_deliveries() == [("a", b"m0"), ("a", b"m1")]


def test_no_ack_consumers_are_never_full() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel(prefetch=1)
    core.consume(channel, "q", "a", no_ack=True)
    core.publish("q", *(b"m%d" % n for n in range(5)))
    assert len(core.take_deliveries()) == 5


def test_cancelling_a_set_aside_consumer_forgets_it() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel(global_prefetch=1)
    core.consume(channel, "q", "a")
    core.consume(channel, "q", "b")
    core.publish("q", b"m0", b"m1")
    assert core.take_deliveries() == [("a", b"m0")]
    assert channel.parked
    cancel(channel, "a")
    cancel(channel, "b")
    assert not channel.parked
    assert not core.vhost.queues["q"].consumers
    ack_all(channel)  # a's delivery, settled after its cancel
    assert core.take_deliveries() == []
    third = core.channel()
    core.consume(third, "q", "c")
    assert core.take_deliveries() == [("c", b"m1")]


def test_cancelling_an_enabled_consumer_passes_its_turns_on() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel()
    for tag in ("a", "b", "c"):
        core.consume(channel, "q", tag)
    cancel(channel, "b")
    core.publish("q", b"m0", b"m1", b"m2")
    assert [tag for tag, _ in core.take_deliveries()] == ["a", "c", "a"]


def test_closing_a_channel_requeues_to_the_others() -> None:
    core = Core()
    core.declare("q")
    closing, staying = core.channel(prefetch=1), core.channel(prefetch=2)
    core.consume(closing, "q", "closing")
    core.consume(staying, "q", "staying")
    core.publish("q", b"m0", b"m1", b"m2", b"m3")
    assert [tag for tag, _ in core.take_deliveries()] == ["closing", "staying", "staying"]
    closing.shutdown()
    assert not closing.parked
    ack_all(staying)
    assert core.take_deliveries() == [("staying", b"m0"), ("staying", b"m3")]


def test_deleting_the_queue_forgets_its_set_aside_consumers() -> None:
    core = Core()
    queue = core.declare("q")
    channel = core.channel(global_prefetch=1)
    core.consume(channel, "q", "a")
    core.consume(channel, "q", "b")
    core.publish("q", b"m0", b"m1")
    core.run()
    assert channel.parked
    core.vhost.delete_queue(queue, if_unused=False, if_empty=False)
    assert not channel.parked and not channel.consumers
    assert not queue.consumers


def test_exclusive_consumer_is_forgotten_on_cancel() -> None:
    core = Core()
    queue = core.declare("q")
    channel = core.channel()
    core.consume(channel, "q", "x", exclusive=True)
    assert queue.has_exclusive_consumer()
    cancel(channel, "x")
    assert not queue.has_exclusive_consumer()
    core.consume(channel, "q", "y")
    assert not queue.has_exclusive_consumer()


def test_single_active_consumer_waits_for_room_on_its_channel() -> None:
    core = Core()
    core.declare("q", **{"x-single-active-consumer": True})
    active = core.channel(global_prefetch=1)
    waiting = core.channel()
    core.consume(active, "q", "active")
    core.consume(waiting, "q", "waiting")
    core.publish("q", b"m0", b"m1")
    assert core.take_deliveries() == [("active", b"m0")]
    ack_all(active)
    assert core.take_deliveries() == [("active", b"m1")]
    active.handle_method(commands.Basic.Qos(prefetch_count=0, global_=True))
    core.publish("q", b"m2")
    assert core.take_deliveries() == [("active", b"m2")]


def test_single_active_consumer_hands_over_after_settling() -> None:
    core = Core()
    core.declare("q", **{"x-single-active-consumer": True})
    first, second = core.channel(prefetch=1), core.channel()
    core.consume(first, "q", "first")
    core.consume(second, "q", "second")
    core.publish("q", b"m0", b"m1")
    assert core.take_deliveries() == [("first", b"m0")]
    cancel(first, "first")
    assert core.take_deliveries() == []  # m0 is first's to settle before second takes over
    first.handle_method(commands.Basic.Nack(delivery_tag=1, requeue=True))
    assert core.take_deliveries() == [("second", b"m0"), ("second", b"m1")]


def test_basic_get_ignores_consumers_and_their_limits() -> None:
    core = Core()
    core.declare("q")
    channel = core.channel(global_prefetch=1)
    core.consume(channel, "q", "a")
    core.publish("q", b"m0", b"m1")
    assert core.take_deliveries() == [("a", b"m0")]
    getter = core.channel()
    getter.handle_method(commands.Basic.Get(queue="q", no_ack=True))
    assert core.vhost.queues["q"].message_count == 0
    ack_all(channel)
    assert core.take_deliveries() == []
