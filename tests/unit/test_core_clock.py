"""The core reads time only from its scheduler: on a fake one, wall-clock stamps are exact."""

from __future__ import annotations

import datetime

from core_harness import Core


def test_x_death_time_is_the_schedulers_wall_clock() -> None:
    core = Core()
    core.declare("dead")
    dead_letter_args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
    core.declare("timed", **{"x-message-ttl": 1000, **dead_letter_args})
    core.publish("timed", b"x")
    core.clock.advance(1.5)  # expires at 1.0: the wall clock then reads WALL_START + 1.0
    entry = core.vhost.queues["dead"].take()
    assert entry is not None and entry.message is not None
    death = entry.message.headers["x-death"][0]
    assert death["reason"] == "expired"
    expected = datetime.datetime(2023, 11, 14, 22, 13, 21, tzinfo=datetime.UTC)  # WALL_START + 1 s
    assert death["time"] == expected
