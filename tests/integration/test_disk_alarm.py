"""The free-disk alarm: a commit round checks free space as soon as it has written, so a
small disk that fills between two polls still blocks publishers before it is full."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import pika
import pytest

from helpers import BrokerFactory
from kanin.server import disk

pytestmark = pytest.mark.kanin_only

LIMIT = 50 * 1000 * 1000


def test_a_commit_round_raises_the_disk_alarm_without_waiting_for_the_poll(
    broker_factory: BrokerFactory,
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    free = {"bytes": 100 * LIMIT}  # far above the limit: the poll then runs every 5 s
    calls: list[str] = []

    def disk_usage(path: Any) -> Any:
        calls.append(str(path))
        return shutil._ntuple_diskusage(1000 * LIMIT, 0, free["bytes"])  # type: ignore[attr-defined]

    monkeypatch.setattr(disk.shutil, "disk_usage", disk_usage)
    queue = unique("disk")
    with broker_factory(disk_free_limit_bytes=LIMIT) as broker:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        assert not broker.call(lambda: broker.server.broker.alarms.blocked)
        free["bytes"] = LIMIT // 2  # the disk fills up
        polls = len(calls)
        channel.basic_publish("", queue, b"x", pika.BasicProperties(delivery_mode=2))
        # The confirm means its round is over; that round looked at the disk.
        assert len(calls) > polls
        assert broker.call(lambda: broker.server.broker.alarms.blocked)
        free["bytes"] = 100 * LIMIT  # space again: the next check clears the alarm
        monitor = broker.server.disk
        assert monitor is not None
        broker.call(monitor.check)
        assert not broker.call(lambda: broker.server.broker.alarms.blocked)
        connection.close()  # read again, so its close-ok is answered
