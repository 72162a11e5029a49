"""One publishing channel: pre-encoded frames, written in batches, paced by rate and confirms.

The body's sequence number is the channel's publish sequence number (both start at 1),
so a confirm for tag N is the confirm for the message stamped N. The window counts the
messages sent and not yet confirmed, as RabbitMQ's PerfTest counts its confirm permits: a
confirm frees room even while an earlier message waits, so a broker that confirms out of
order (kanin's end-to-end queues confirm when a consumer acks) does not hold a producer
to its oldest message. Send times are kept in a ring indexed by sequence number, SPAN_WINDOWS
windows long; the span from the lowest unconfirmed sequence to the last one sent is held
to the ring's length, so memory stays bounded however long one message waits.
"""

from __future__ import annotations

import asyncio
import time
from array import array

from pamqp import commands

from kanin.perf import wire
from kanin.perf.client import ChannelHandler, Connection, PerfError
from kanin.perf.histogram import Histogram
from kanin.perf.options import PerfOptions
from kanin.perf.tally import CONFIRMED, NACKED, SENT, UNUSED, Counters

# The shortest wait when pacing to --rate (see ProducerChannel.run).
PACING_SLEEP_MIN_NS = 1_000_000
# The send-time ring's length in windows: how far past its oldest unconfirmed message a
# producer may run when confirms come out of order.
SPAN_WINDOWS = 16


class Producer(ChannelHandler):
    def __init__(
        self,
        conn: Connection,
        number: int,
        stream_id: int,
        queue: str,
        options: PerfOptions,
        run_id: int,
        counters: Counters,
        latency: Histogram,
    ) -> None:
        super().__init__(conn, number)
        self.options = options
        self.counters = counters
        self.latency = latency
        self.template = wire.publish_template(
            number,
            options.exchange,
            queue,
            run_id,
            stream_id,
            options.size,
            options.persistent,
            conn.frame_max,
            options.unique_header,
        )
        self.stream_id = stream_id
        self.status = bytearray((UNUSED,))  # index = sequence number
        self.sent = 0
        self.low = 1  # lowest sequence not yet confirmed or nacked
        self.in_flight = 0  # sent, not yet confirmed or nacked
        mode = options.confirm
        self.confirms = mode.kind != "none"
        self.window = mode.size if mode.kind == "window" else 0
        self.batch_size = mode.size if mode.kind == "batch" else 0
        ring = 1
        while ring < max(mode.size, 1) * SPAN_WINDOWS:
            ring *= 2
        self.mask = ring - 1
        self.sent_ns = array("q", bytes(8 * ring))
        self.stopping = False
        self._wake: asyncio.Future[None] | None = None

    async def setup(self) -> None:
        await self.conn.open_channel(self)
        if self.confirms:
            await self.call(commands.Confirm.Select(), commands.Confirm.SelectOk)

    def stop(self) -> None:
        self.stopping = True
        self._wakeup()

    @property
    def span(self) -> int:
        """Sequences from the lowest unconfirmed to the last sent (their send times are in
        the ring)."""
        return self.sent - self.low + 1

    async def run(self, start_ns: int) -> None:
        options = self.options
        rate = options.rate
        limit = options.count
        batch_left = 0
        while not self.stopping and self.conn.error is None:
            if limit and self.sent >= limit:
                break
            n = options.batch if not limit else min(options.batch, limit - self.sent)
            now = time.monotonic_ns()
            if rate:
                due = int((now - start_ns) * rate / 1e9) + 1 - self.sent
                if due <= 0:
                    # At least a millisecond: the loop's timers are no finer, and shorter
                    # sleeps return at once, so pacing would spin a core. The messages
                    # that fall due meanwhile go out together on waking.
                    next_ns = start_ns + int(self.sent * 1e9 / rate)
                    await asyncio.sleep(max(next_ns - now, PACING_SLEEP_MIN_NS) / 1e9)
                    continue
                n = min(n, due)
            if self.window:
                room = min(self.window - self.in_flight, self.mask + 1 - self.span)
                if room <= 0:
                    await self._wait()
                    continue
                n = min(n, room)
            elif self.batch_size:
                if batch_left == 0:
                    if self.in_flight > 0:
                        await self._wait()
                        continue
                    batch_left = self.batch_size
                n = min(n, batch_left)
                batch_left -= n
            self._send(n, now)
            if not self.conn.writable:
                await self.conn.wait_writable()
            else:
                await asyncio.sleep(0)

    def _send(self, n: int, now_ns: int) -> None:
        first = self.sent + 1
        self.conn.write(self.template.batch(first, n, now_ns))
        self.sent += n
        self.status.extend(bytes(n))
        if self.confirms:
            self.in_flight += n
            ring, mask = self.sent_ns, self.mask
            for seq in range(first, first + n):
                ring[seq & mask] = now_ns
        counters = self.counters
        counters.published += n
        counters.last_publish_ns = now_ns

    async def wait_for_confirms(self, timeout_s: float) -> None:
        """After the last publish: wait until every message is confirmed (or time is up)."""
        if not self.confirms:
            return
        deadline = time.monotonic() + timeout_s
        while self.in_flight > 0 and self.conn.error is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._wait(), remaining)
            except TimeoutError:
                return

    async def _wait(self) -> None:
        self._wake = asyncio.get_running_loop().create_future()
        await self._wake

    def _wakeup(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def fail(self, error: PerfError) -> None:
        super().fail(error)
        self._wakeup()

    def on_ack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, CONFIRMED)

    def on_nack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, NACKED)

    def _settle(self, tag: int, multiple: bool, code: int) -> None:
        status = self.status
        if tag > self.sent:
            self.conn.fail(f"confirm for sequence {tag}, but only {self.sent} were published")
            return
        now = time.monotonic_ns()
        first = self.low if multiple else tag
        ring, mask = self.sent_ns, self.mask
        settled = 0
        run_us, run_count = -1, 0
        for seq in range(first, tag + 1):
            if status[seq] != SENT:
                continue
            status[seq] = code
            settled += 1
            if code == CONFIRMED:
                latency_us = (now - ring[seq & mask]) // 1000
                if latency_us != run_us:
                    if run_count:
                        self.latency.record_many(run_us, run_count)
                    run_us, run_count = latency_us, 0
                run_count += 1
        if run_count:
            self.latency.record_many(run_us, run_count)
        low, sent = self.low, self.sent
        while low <= sent and status[low] != SENT:
            low += 1
        self.low = low
        self.in_flight -= settled
        counters = self.counters
        if code == CONFIRMED:
            counters.confirmed += settled
        else:
            counters.nacked += settled
        counters.last_confirm_ns = now
        self._wakeup()
