"""Durable definitions and the messages in them, across saves that fail and restarts.

Real `kanin server` processes, killed with SIGKILL where a crash is the point. The
definitions save is made to fail by putting a directory where the broker writes its
temporary file (`definitions.tmp`): the write fails as on a full disk, for root too,
and removing the directory is the disk coming back.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pika
import pytest
from pamqp import commands, frame
from pika.adapters.blocking_connection import BlockingConnection
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from helpers import drain, run_server, start_kanin
from rawamqp import RawClient

pytestmark = pytest.mark.kanin_only

QUEUE = "orders"
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def connect(port: int) -> BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
    )


def publish_confirmed(port: int, queue: str, count: int) -> None:
    """Persistent, confirmed and mandatory: each one reached the queue and is on disk."""
    connection = connect(port)
    channel = connection.channel()
    channel.confirm_delivery()
    for n in range(count):
        channel.basic_publish("", queue, b"m%d" % n, PERSISTENT, mandatory=True)
    connection.close()


def queue_bodies(port: int, queue: str) -> list[bytes]:
    connection = connect(port)
    bodies = drain(connection.channel(), queue)
    connection.close()
    return bodies


def declare_durable(port: int, queue: str) -> None:
    connection = connect(port)
    connection.channel().queue_declare(queue, durable=True)
    connection.close()


def saved_queue_names(data_dir: Path) -> set[str]:
    document = json.loads((data_dir / "definitions.json").read_text())
    return {queue["name"] for queue in document["queues"]}


def kill(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait()


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def test_a_queue_declared_while_definitions_cannot_be_saved_keeps_its_messages(
    tmp_path: Path,
) -> None:
    log: list[str] = []
    process, port = start_kanin(tmp_path, log=log)
    try:
        blocker = tmp_path / "definitions.tmp"
        blocker.mkdir()  # the next definitions save fails
        connection = connect(port)
        try:
            connection.channel().queue_declare(QUEUE, durable=True)
            declared = True
        except ConnectionClosedByBroker as exc:  # the declare may fail, but then clearly
            assert exc.reply_code == 541
            assert "cannot save definitions" in exc.reply_text
            declared = False
        if declared:  # then the -ok says the definition is on disk
            assert QUEUE in saved_queue_names(tmp_path)
        blocker.rmdir()  # the disk is back
        # The declared queue stayed in memory; publishes to it are confirmed only once its
        # definition is on disk too.
        publish_confirmed(port, QUEUE, 100)
        errors = [line for line in log if " ERROR " in line and "cannot save definitions" in line]
        assert len(errors) == 1, "logged once per outage, not per retry:\n" + "".join(log)
    finally:
        kill(process)
    process, port = start_kanin(tmp_path, log=log)
    try:
        assert queue_bodies(port, QUEUE) == [b"m%d" % n for n in range(100)]
    finally:
        stop(process)


def test_publishes_are_not_confirmed_while_the_definitions_are_unsaved(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path)
    try:
        declare_durable(port, QUEUE)
        publish_confirmed(port, QUEUE, 1)
        blocker = tmp_path / "definitions.tmp"
        blocker.mkdir()
        connection = connect(port)
        channel = connection.channel()
        with pytest.raises(ConnectionClosedByBroker):
            channel.queue_declare("second", durable=True)
        connection = connect(port)
        channel = connection.channel()
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.NackError):  # no round succeeds while unsaved
            channel.basic_publish("", QUEUE, b"refused", PERSISTENT)
        blocker.rmdir()
        connection.close()
        publish_confirmed(port, "second", 3)  # the kept declare was saved by a retry
    finally:
        kill(process)
    process, port = start_kanin(tmp_path)
    try:
        assert queue_bodies(port, QUEUE) == [b"m0"]
        assert queue_bodies(port, "second") == [b"m0", b"m1", b"m2"]
    finally:
        stop(process)


def test_pipelined_declares_are_answered_in_order_and_durable(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path)
    try:
        with RawClient.connect("127.0.0.1", port) as raw:
            raw.handshake()
            raw.open_channel(1)
            names = [f"q{n}" for n in range(300)]
            for name in names:  # all sent before the first answer is read
                raw.send_method(1, commands.Queue.Declare(queue=name, durable=True))
            answered = [raw.expect(commands.Queue.DeclareOk, 1).queue for _ in names]
            assert answered == names
            kill(process)  # right after the last declare-ok: each one is on disk
    finally:
        kill(process)
    assert saved_queue_names(tmp_path) == set(names)


def test_recovery_keeps_messages_of_queues_the_definitions_do_not_name(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path)
    declare_durable(port, QUEUE)
    publish_confirmed(port, QUEUE, 10)
    stop(process)
    definitions = tmp_path / "definitions.json"
    document = json.loads(definitions.read_text())
    document["queues"] = []  # the definitions lost the queue, the store still has its messages
    definitions.write_text(json.dumps(document))

    log: list[str] = []
    process, port = start_kanin(tmp_path, log=log)
    try:
        kept = [line for line in log if " ERROR " in line and "kept 10 messages" in line]
        assert len(kept) == 1, "".join(log)
        assert repr(QUEUE) in kept[0]
        assert "'/'" in kept[0]
        listing = json.loads((tmp_path / "unknown-queue-messages.json").read_text())
        assert [(q["vhost"], q["queue"], len(q["message_ids"])) for q in listing["queues"]] == [
            ("/", QUEUE, 10)
        ]
        declare_durable(port, QUEUE)  # what README tells the operator to do
    finally:
        kill(process)
    process, port = start_kanin(tmp_path)
    try:
        assert queue_bodies(port, QUEUE) == [b"m%d" % n for n in range(10)]
        assert not (tmp_path / "unknown-queue-messages.json").exists()
    finally:
        stop(process)


def test_a_saved_stream_queue_type_is_dropped_and_the_queue_kept(tmp_path: Path) -> None:
    """Earlier kanin accepted x-queue-type stream and made a classic queue; kanin now refuses
    that type, but must still start on such definitions and keep the queue's messages."""
    process, port = start_kanin(tmp_path)
    declare_durable(port, QUEUE)
    publish_confirmed(port, QUEUE, 3)
    stop(process)
    definitions = tmp_path / "definitions.json"
    document = json.loads(definitions.read_text())
    (queue,) = document["queues"]
    queue["arguments"]["x-queue-type"] = "stream"
    definitions.write_text(json.dumps(document))

    log: list[str] = []
    process, port = start_kanin(tmp_path, log=log)
    try:
        errors = [line for line in log if " ERROR " in line and "x-queue-type" in line]
        assert len(errors) == 1, "".join(log)
        assert repr(QUEUE) in errors[0] and "'stream'" in errors[0]
        connection = connect(port)
        with pytest.raises(ChannelClosedByBroker) as info:
            connection.channel().queue_declare(
                QUEUE, durable=True, arguments={"x-queue-type": "stream"}
            )
        assert info.value.reply_code == 406
        assert "inequivalent arg 'x-queue-type'" in info.value.reply_text
        connection.close()
        assert queue_bodies(port, QUEUE) == [b"m0", b"m1", b"m2"]
    finally:
        stop(process)


def test_a_missing_definitions_file_next_to_messages_stops_start_up(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path)
    declare_durable(port, QUEUE)
    publish_confirmed(port, QUEUE, 5)
    kill(process)
    (tmp_path / "definitions.json").unlink()

    refused = run_server(tmp_path)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert str(tmp_path / "definitions.json") in lines[0]
    assert "--force-recovery" in lines[0]
    assert not (tmp_path / "definitions.json").exists()  # nothing written

    log: list[str] = []
    process, port = start_kanin(tmp_path, "--force-recovery", log=log)
    try:
        assert any(" ERROR " in line and "kept 5 messages" in line for line in log), "".join(log)
        declare_durable(port, QUEUE)
    finally:
        stop(process)
    process, port = start_kanin(tmp_path)  # the definitions exist again: no flag needed
    try:
        assert queue_bodies(port, QUEUE) == [b"m%d" % n for n in range(5)]
    finally:
        stop(process)


def test_a_missing_definitions_file_with_no_messages_starts(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path)
    declare_durable(port, QUEUE)
    publish_confirmed(port, QUEUE, 2)
    assert queue_bodies(port, QUEUE) == [b"m0", b"m1"]  # consumed: the store holds nothing
    stop(process)
    (tmp_path / "definitions.json").unlink()
    process, port = start_kanin(tmp_path)
    stop(process)


def test_pipelined_declares_that_cannot_be_saved_get_the_connection_close(
    tmp_path: Path,
) -> None:
    """Declares sent in one write while the save fails: the client hears connection.close
    541, never a silent drop (the -oks and whatever follows them are held, not the close)."""
    process, port = start_kanin(tmp_path)
    try:
        (tmp_path / "definitions.tmp").mkdir()  # every definitions save fails
        with RawClient.connect("127.0.0.1", port) as client:
            client.handshake()
            client.open_channel(1)
            declares = [
                commands.Queue.Declare(queue=name, durable=True) for name in ("first", "second")
            ]
            client.send_raw(b"".join(frame.marshal(d, 1) for d in declares))
            close = client.expect_connection_close()
            assert close.reply_code == 541
            assert "cannot save definitions" in close.reply_text
    finally:
        kill(process)
