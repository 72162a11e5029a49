"""The broker's work per message on the common path, without sockets or a client.

One publisher and one consumer session on one in-process broker (kanin.testing's
SessionPair, a fake clock): 16-byte transient publishes to the default exchange, 64 per
read as `kanin perf` writes them, to one queue whose one consumer has room, at
  a  auto-ack
  b  manual acks, prefetch 200, one multiple ack per 50 deliveries
  c  (b) + publisher confirms
  e  (c) on an end-to-end queue (x-confirm-on-ack: confirmed when the consumer acks)
Two figures per point:
- CPU microseconds per message (process time, best of --reps): what it costs, but the
  machine's other load inflates it;
- with --count, Python function calls and bytecodes executed per message (sys.settrace):
  exact and the same on a busy machine, so a change to the path can be judged in one run.
  Work in C (struct, bytes joins, dict operations) is not in the count.

    PYTHONPATH=src python bench/hotpath.py --count
    PYTHONPATH=/tmp/old/src python bench/hotpath.py --count   # an older tree, to compare
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from pamqp import body, commands, frame, header

from kanin.testing.session_pair import SessionPair

PUBLISHES_PER_READ = 64
ACK_EVERY = 50
PREFETCH = 200


def publish_bytes(routing_key: str, size: int) -> bytes:
    return (
        frame.marshal(commands.Basic.Publish(exchange="", routing_key=routing_key), 1)
        + frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), 1)
        + frame.marshal(body.ContentBody(b"x" * size), 1)
    )


def setup(point: str) -> tuple[SessionPair, SessionPair]:
    publisher = SessionPair()
    consumer = SessionPair(broker=publisher.broker, clock=publisher.clock)
    for pair in (publisher, consumer):
        pair.handshake()
        pair.open_channel(1)
    arguments = {"x-confirm-on-ack": True} if point == "e" else {}
    consumer.send_method(1, commands.Queue.Declare(queue="hotpath", arguments=arguments))
    manual = point in "bce"
    if manual:
        consumer.send_method(1, commands.Basic.Qos(prefetch_count=PREFETCH))
    consumer.send_method(1, commands.Basic.Consume(queue="hotpath", no_ack=not manual))
    if point in "ce":
        publisher.send_method(1, commands.Confirm.Select())
    publisher.frames()
    consumer.frames()
    return publisher, consumer


def drive(point: str, messages: int, around: Callable[[Callable[[], None]], None]) -> int:
    """Publish `messages` (in whole reads) and consume them; `around` runs the loop."""
    publisher, consumer = setup(point)
    chunk = publish_bytes("hotpath", 16) * PUBLISHES_PER_READ
    reads = messages // PUBLISHES_PER_READ
    channel = consumer.session.channels[1]
    manual = point in "bce"

    def loop() -> None:
        acked = 0
        for _ in range(reads):
            publisher.send(chunk)
            if manual:
                last = channel.unacked.peek_tag() - 1
                if last - acked >= ACK_EVERY:
                    consumer.send_method(1, commands.Basic.Ack(delivery_tag=last, multiple=True))
                    acked = last
            consumer.clock.run_soon()
            # What was written is dropped unread: decoding it is the client's work.
            for pair in (publisher, consumer):
                pair.transport.written.clear()
                pair._unread = 0

    around(loop)
    return reads * PUBLISHES_PER_READ


def cpu_us_per_message(point: str, messages: int) -> float:
    spent: list[float] = []

    def timed(loop: Callable[[], None]) -> None:
        start = time.process_time()
        loop()
        spent.append(time.process_time() - start)

    done = drive(point, messages, timed)
    return spent[0] * 1e6 / done


def counts_per_message(point: str, messages: int) -> tuple[float, float]:
    calls = opcodes = 0

    def tracer(frame_: FrameType, event: str, arg: Any) -> Any:
        nonlocal calls, opcodes
        frame_.f_trace_opcodes = True
        if event == "opcode":
            opcodes += 1
        elif event == "call":
            calls += 1
        return tracer

    def traced(loop: Callable[[], None]) -> None:
        sys.settrace(tracer)
        try:
            loop()
        finally:
            sys.settrace(None)

    done = drive(point, messages, traced)
    return calls / done, opcodes / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", default="abc")
    parser.add_argument("--messages", type=int, default=64_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--count", action="store_true", help="calls and bytecodes per message")
    args = parser.parse_args()
    for point in args.points:
        best = min(cpu_us_per_message(point, args.messages) for _ in range(args.reps))
        line = f"{point}: {best:6.2f} us/msg CPU (best of {args.reps})"
        if args.count:
            calls, opcodes = counts_per_message(point, 3_200)
            line += f", {calls:5.1f} Python calls/msg, {opcodes:7.1f} bytecodes/msg"
        print(line, flush=True)


if __name__ == "__main__":
    main()
