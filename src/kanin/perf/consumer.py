"""One consuming channel: reads the stamp of each delivery, acks as configured.

Manual acks are queued on the connection's `out` list and leave with the next write;
with --multi-ack-every N one basic.ack(multiple) covers N deliveries, and a timer
flushes the remainder so a slow tail is never left unacknowledged.
"""

from __future__ import annotations

import time

from pamqp import commands

from kanin.perf import wire
from kanin.perf.client import ChannelHandler, Connection
from kanin.perf.histogram import Histogram
from kanin.perf.options import PerfOptions
from kanin.perf.tally import Counters, Receipts


class Consumer(ChannelHandler):
    def __init__(
        self,
        conn: Connection,
        number: int,
        queue: str,
        options: PerfOptions,
        run_id: int,
        counters: Counters,
        receipts: Receipts,
        latency: Histogram,
    ) -> None:
        super().__init__(conn, number)
        self.queue = queue
        self.options = options
        layout = wire.stamp_for(options.size)
        self.stamp = layout.whole
        self.run_id = run_id & layout.run_mask  # as the stamp carries it
        self.counters = counters
        self.receipts = receipts
        self.latency = latency
        self.manual = options.ack == "manual"
        self.ack_every = options.multi_ack_every
        self.tag = 0  # delivery tag of the message whose body comes next
        self.awaiting_body = False
        self.unacked = 0
        self.last_tag = 0

    async def setup(self) -> None:
        await self.conn.open_channel(self)
        if self.options.prefetch:
            qos = commands.Basic.Qos(prefetch_count=self.options.prefetch)
            await self.call(qos, commands.Basic.QosOk)
        consume = commands.Basic.Consume(queue=self.queue, no_ack=not self.manual)
        await self.call(consume, commands.Basic.ConsumeOk)

    def on_deliver(self, buffer: bytes, at: int) -> None:
        self.tag = wire.deliver_tag(buffer, at)
        self.awaiting_body = True

    def on_body(self, buffer: bytes, at: int) -> None:
        if not self.awaiting_body:
            return  # a later body frame of a message larger than frame_max
        self.awaiting_body = False
        stamp = self.stamp
        if at + stamp.size <= len(buffer):
            run_id, stream, seq, sent_ns = stamp.unpack_from(buffer, at)
        else:  # a body too short to be perf's, at the very end of what was read
            run_id = stream = seq = sent_ns = 0
        now = time.monotonic_ns()
        counters = self.counters
        if run_id == self.run_id:
            counters.consumed += 1
            self.receipts.mark(stream, seq)
            self.latency.record((now - sent_ns) // 1000)
        else:
            counters.foreign += 1
        counters.last_consume_ns = now
        if self.manual:
            self.unacked += 1
            if self.unacked >= self.ack_every:
                self.conn.out.append(wire.ack_frame(self.number, self.tag, self.ack_every > 1))
                self.unacked = 0
                self.last_tag = self.tag

    def flush_acks(self) -> None:
        """Acknowledge everything delivered so far (called from a timer and at the end)."""
        if self.unacked and self.tag > self.last_tag:
            self.conn.write(wire.ack_frame(self.number, self.tag, True))
            self.unacked = 0
            self.last_tag = self.tag
