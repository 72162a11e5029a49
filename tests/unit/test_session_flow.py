"""Flow, heartbeats and definitions-save gates of a session, on a fake clock."""

from __future__ import annotations

from collections.abc import Callable

from pamqp import commands, heartbeat

from kanin.amqp import constants as C
from kanin.core.session.session import FRAMES_PER_TURN
from kanin.core.session.state import State
from kanin.testing.session_pair import SessionPair

BLOCKED_CAPABLE = {"connection.blocked": True}


def publisher(capabilities: dict[str, bool] | None = None, beat: int = 0) -> SessionPair:
    """An open connection that has published once to queue q on channel 1."""
    pair = SessionPair()
    pair.handshake(capabilities=capabilities, heartbeat=beat)
    pair.open_channel(1)
    pair.send_method(1, commands.Queue.Declare(queue="q"))
    pair.frames()
    pair.publish(1, b"m", routing_key="q")
    return pair


# -- heartbeats ---------------------------------------------------------------------------


def test_a_silent_peer_is_dead_after_two_intervals() -> None:
    pair = SessionPair()
    pair.handshake(heartbeat=10)
    # Checked every half interval; connection.open was its last word, seen at 5 s.
    pair.advance(24)
    assert not pair.transport.aborted
    pair.advance(1)
    assert pair.transport.aborted
    assert pair.session.state is State.CLOSED


def test_we_send_heartbeats_when_we_have_nothing_else_to_say() -> None:
    pair = SessionPair()
    pair.handshake(heartbeat=10)
    pair.advance(5)  # open-ok went out since the heartbeat started: no need yet
    assert pair.frames() == []
    pair.advance(5)
    assert [type(value) for _, value in pair.frames()] == [heartbeat.Heartbeat]


def test_a_peer_that_keeps_talking_stays() -> None:
    pair = SessionPair()
    pair.handshake(heartbeat=10)
    for _ in range(20):
        pair.advance(5)
        pair.send_frame(0, heartbeat.Heartbeat())
    assert not pair.transport.aborted
    assert pair.session.state is State.OPEN


def test_a_peer_we_do_not_read_is_not_declared_dead() -> None:
    pair = SessionPair()
    pair.handshake(heartbeat=10)
    pair.session.pause_writing()  # the peer does not read what we write
    assert not pair.transport.reading
    pair.advance(100)
    assert not pair.transport.aborted
    pair.session.resume_writing()
    assert pair.transport.reading
    pair.advance(25)  # read again, and still silent: now it is dead
    assert pair.transport.aborted


def test_a_blocked_publisher_is_not_declared_dead() -> None:
    pair = publisher(BLOCKED_CAPABLE, beat=10)
    pair.broker.alarms.set("memory", True)
    assert not pair.transport.reading
    pair.advance(200)
    assert not pair.transport.aborted


# -- flow -----------------------------------------------------------------------------------


def test_a_memory_alarm_blocks_a_publisher_and_stops_reading_it() -> None:
    pair = publisher(BLOCKED_CAPABLE)
    pair.broker.alarms.set("memory", True)
    blocked = pair.expect(0)
    assert isinstance(blocked, commands.Connection.Blocked)
    assert "memory" in blocked.reason
    assert not pair.transport.reading
    pair.broker.alarms.set("memory", False)
    assert isinstance(pair.expect(0), commands.Connection.Unblocked)
    assert pair.transport.reading


def test_without_the_capability_a_publisher_is_blocked_silently() -> None:
    pair = publisher()
    pair.broker.alarms.set("memory", True)
    assert pair.frames() == []
    assert not pair.transport.reading
    pair.broker.alarms.set("memory", False)
    assert pair.transport.reading


def test_a_connection_that_never_published_is_not_blocked() -> None:
    pair = SessionPair()
    pair.handshake(capabilities=BLOCKED_CAPABLE)
    pair.broker.alarms.set("memory", True)
    assert pair.frames() == []
    assert pair.transport.reading


def test_publishing_during_an_alarm_blocks_at_once() -> None:
    pair = SessionPair()
    pair.handshake(capabilities=BLOCKED_CAPABLE)
    pair.open_channel(1)
    pair.broker.alarms.set("memory", True)
    pair.publish(1, b"m", routing_key="nowhere")
    assert isinstance(pair.expect(0), commands.Connection.Blocked)
    assert not pair.transport.reading


# -- definitions-save gates -------------------------------------------------------------


class Sink:
    """A definitions keeper whose saves land when the test says so."""

    def __init__(self) -> None:
        self.unsaved = False
        self.waiting: list[Callable[[str | None], None]] = []

    def changed(self) -> None:
        self.unsaved = True

    def when_saved(self, callback: Callable[[str | None], None]) -> bool:
        if not self.unsaved:
            return False
        self.waiting.append(callback)
        return True

    def land(self, problem: str | None = None) -> None:
        self.unsaved = False
        waiting, self.waiting = self.waiting, []
        for callback in waiting:
            callback(problem)


def gated() -> tuple[SessionPair, Sink]:
    pair = SessionPair()
    sink = Sink()
    pair.broker.definitions = sink
    pair.handshake()
    pair.open_channel(1)
    return pair, sink


def test_a_durable_declare_ok_waits_for_the_save_and_so_does_what_follows() -> None:
    pair, sink = gated()
    pair.send_method(1, commands.Queue.Declare(queue="kept", durable=True))
    pair.send_method(1, commands.Basic.Qos(prefetch_count=5))
    assert pair.frames() == []
    sink.land()
    pair.clock.run_soon()
    replies = [type(method) for _, method in pair.methods()]
    assert replies == [commands.Queue.DeclareOk, commands.Basic.QosOk]


def test_a_failed_save_closes_the_connection_with_541_instead() -> None:
    pair, sink = gated()
    pair.send_method(1, commands.Queue.Declare(queue="kept", durable=True))
    assert pair.frames() == []
    sink.land("disk full")
    pair.clock.run_soon()
    close = pair.expect(0)  # and no declare-ok before it
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == C.INTERNAL_ERROR
    assert "disk full" in close.reply_text


def test_nothing_is_held_when_nothing_is_unsaved() -> None:
    pair, _ = gated()
    pair.send_method(1, commands.Queue.Declare(queue="passing", durable=False))
    assert isinstance(pair.expect(1), commands.Queue.DeclareOk)


# -- reading ----------------------------------------------------------------------------


def queued(pair: SessionPair) -> int:
    return pair.broker.vhosts["/"].queues["q"].message_count


def test_while_the_peer_does_not_read_what_it_sends_waits() -> None:
    pair = publisher()
    pair.session.pause_writing()
    pair.publish(1, b"m", routing_key="q")
    assert queued(pair) == 1  # only the first publish
    pair.session.resume_writing()
    pair.clock.run_soon()
    assert queued(pair) == 2


def test_a_long_read_is_acted_on_a_slice_per_loop_turn() -> None:
    pair = publisher()
    one = SessionPair.publish_bytes(1, b"m", routing_key="q")
    pair.session.data_received(one * 300)
    # A whole publish is its three frames: 85 of them, then other connections get a turn.
    assert queued(pair) == 1 + FRAMES_PER_TURN // 3
    pair.clock.run_soon()
    assert queued(pair) == 1 + 300
