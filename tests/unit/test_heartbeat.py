"""Heartbeat rules without sockets or sleeping: a fake loop whose clock we move by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kanin.core.session.heartbeat import Heartbeat


class FakeTimer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in [t for t in self.timers if t.when <= self.now and not t.cancelled]:
            self.timers.remove(timer)
            timer.callback()


class Peer:
    """Byte counters and what the heartbeat asked of the connection."""

    def __init__(self) -> None:
        self.bytes_in = 0
        self.bytes_out = 0
        self.heartbeats_sent = 0
        self.dead = False

    def counters(self) -> tuple[int, int]:
        return self.bytes_in, self.bytes_out

    def send(self) -> None:
        self.heartbeats_sent += 1
        self.bytes_out += 8

    def die(self) -> None:
        self.dead = True


def make(interval_s: int = 10) -> tuple[FakeLoop, Peer, Heartbeat]:
    loop, peer = FakeLoop(), Peer()
    beat = Heartbeat(loop, interval_s, peer.counters, peer.send, peer.die)  # type: ignore[arg-type]
    beat.start()
    return loop, peer, beat


def test_idle_connection_sends_a_heartbeat_every_half_interval() -> None:
    loop, peer, _ = make()
    peer_talks(loop, peer, seconds=30)
    assert peer.heartbeats_sent == 6
    assert not peer.dead


def peer_talks(loop: FakeLoop, peer: Peer, seconds: int) -> None:
    for _ in range(seconds):
        peer.bytes_in += 8
        loop.advance(1)


def test_outgoing_traffic_replaces_heartbeats() -> None:
    loop, peer, _ = make()
    for _ in range(30):
        peer.bytes_in += 1
        peer.bytes_out += 100  # deliveries flowing: no heartbeat frames needed
        loop.advance(1)
    assert peer.heartbeats_sent == 0


def test_silent_peer_is_dead_after_two_intervals() -> None:
    loop, peer, _ = make(interval_s=10)
    loop.advance(15)
    assert not peer.dead
    loop.advance(5)
    assert peer.dead
    assert not [t for t in loop.timers if not t.cancelled]  # no tick after death


def test_any_incoming_bytes_keep_the_peer_alive() -> None:
    loop, peer, _ = make(interval_s=10)
    peer_talks(loop, peer, seconds=100)
    assert not peer.dead


def test_stop_cancels_the_timer() -> None:
    loop, peer, beat = make()
    beat.stop()
    loop.advance(100)
    assert peer.heartbeats_sent == 0 and not peer.dead


def test_only_one_timer_is_pending_at_a_time() -> None:
    loop, peer, _ = make()
    peer_talks(loop, peer, seconds=60)
    pending: list[Any] = [t for t in loop.timers if not t.cancelled]
    assert len(pending) == 1
