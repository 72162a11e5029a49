"""A worker process: some producer and consumer connections, steered by the parent.

Conversation over the pipe (parent -> worker in caps, worker -> parent in lower case):
    ready -> START(start_ns) -> stats ... produced -> stats ... -> FINISH -> result
and `error` whenever a broker closes something on us. FINISH may come at any time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe
from typing import Any

from kanin.perf.client import Connection, PerfError, connect
from kanin.perf.consumer import Consumer
from kanin.perf.histogram import Histogram
from kanin.perf.options import PerfOptions
from kanin.perf.producer import Producer
from kanin.perf.tally import Counters, Receipts, WorkerResult

TICK_S = 0.05  # pipe polling, idle ack flushing
STATS_EVERY_TICKS = 4


@dataclass(frozen=True)
class WorkerSpec:
    options: PerfOptions
    run_id: int
    producers: tuple[tuple[int, str], ...]  # (producer index, queue)
    consumers: tuple[tuple[int, str], ...]  # (consumer index, queue)


def worker_main(spec: WorkerSpec, pipe: Pipe) -> None:
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is there on Linux
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(Worker(spec, pipe).run())


class Worker:
    def __init__(self, spec: WorkerSpec, pipe: Pipe) -> None:
        self.spec = spec
        self.pipe = pipe
        self.counters = Counters()
        self.receipts = Receipts(self.counters)
        self.confirm_latency = Histogram()
        self.e2e_latency = Histogram()
        self.connections: list[Connection] = []
        self.producers: list[Producer] = []
        self.consumers: list[Consumer] = []
        self.error: str | None = None
        self._start: asyncio.Future[int] | None = None
        self._finish = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        cpu_start, wall_start = time.process_time(), time.monotonic()
        self._start = loop.create_future()
        ticker = loop.create_task(self._tick())
        try:
            await self._setup()
            self.pipe.send(("ready", None))
            start_ns = await self._start
            cpu_start, wall_start = time.process_time(), time.monotonic()  # measure the run only
            await self._publish(start_ns)
            self.pipe.send(("produced", self.counters.snapshot()))
            await self._finish.wait()
        except (PerfError, OSError, TimeoutError) as exc:
            self._report_error(str(exc) or type(exc).__name__)
        finally:
            ticker.cancel()
        for consumer in self.consumers:
            consumer.flush_acks()
        await asyncio.gather(*(conn.close() for conn in self.connections))
        self.pipe.send(("result", self._result(cpu_start, wall_start)))

    def _read_pipe(self) -> None:
        # Polled from the ticker: a blocking pipe (never handed to the loop as a reader,
        # which would make it non-blocking and break the large result send).
        if not self.pipe.poll():
            return
        command, argument = self.pipe.recv()
        if command == "START" and self._start is not None and not self._start.done():
            self._start.set_result(int(argument))
        elif command == "FINISH":
            self._finish.set()
            for producer in self.producers:
                producer.stop()
            if self._start is not None and not self._start.done():
                self._start.set_exception(PerfError("finished before the start"))

    async def _setup(self) -> None:
        spec = self.spec
        await asyncio.gather(*(self._add_consumer(queue) for _, queue in spec.consumers))
        await asyncio.gather(*(self._add_producer(i, queue) for i, queue in spec.producers))

    async def _add_consumer(self, queue: str) -> None:
        options = self.spec.options
        conn = await connect(options.endpoint)
        self.connections.append(conn)
        for number in range(1, options.consumer_channels + 1):
            consumer = Consumer(
                conn,
                number,
                queue,
                options,
                self.spec.run_id,
                self.counters,
                self.receipts,
                self.e2e_latency,
            )
            await consumer.setup()
            self.consumers.append(consumer)

    async def _add_producer(self, index: int, queue: str) -> None:
        options = self.spec.options
        conn = await connect(options.endpoint)
        self.connections.append(conn)
        for number in range(1, options.producer_channels + 1):
            stream = index * options.producer_channels + number - 1
            producer = Producer(
                conn,
                number,
                stream,
                queue,
                options,
                self.spec.run_id,
                self.counters,
                self.confirm_latency,
            )
            await producer.setup()
            self.producers.append(producer)

    async def _publish(self, start_ns: int) -> None:
        options = self.spec.options
        if not self.producers:
            return
        loop = asyncio.get_running_loop()
        if not options.count:
            delay_s = max(0.0, (start_ns - time.monotonic_ns()) / 1e9 + options.duration_s)
            loop.call_later(delay_s, self._stop_producers)
        await asyncio.gather(*(producer.run(start_ns) for producer in self.producers))
        timeout_s = options.confirm_timeout_s
        await asyncio.gather(*(p.wait_for_confirms(timeout_s) for p in self.producers))

    def _stop_producers(self) -> None:
        for producer in self.producers:
            producer.stop()

    async def _tick(self) -> None:
        last_tags: dict[int, int] = {}
        ticks = 0
        while True:
            await asyncio.sleep(TICK_S)
            self._read_pipe()
            ticks += 1
            if self._start is None or not self._start.done():
                continue
            for index, consumer in enumerate(self.consumers):
                if consumer.tag == last_tags.get(index):  # idle since the last tick: ack the rest
                    consumer.flush_acks()
                last_tags[index] = consumer.tag
            for conn in self.connections:
                if conn.error is not None and not conn.closing:
                    self._report_error(conn.error)
            if ticks % STATS_EVERY_TICKS == 0:
                self.pipe.send(("stats", self.counters.snapshot()))

    def _report_error(self, error: str) -> None:
        if self.error is None:
            self.error = error
            self.pipe.send(("error", error))
            self._stop_producers()

    def _result(self, cpu_start: float, wall_start: float) -> WorkerResult:
        result: dict[str, Any] = {
            "statuses": {p.stream_id: bytes(p.status) for p in self.producers},
            "receipts": {s: bytes(seen) for s, seen in self.receipts.streams.items()},
        }
        return WorkerResult(
            counters=self.counters.snapshot(),
            confirm_latency=self.confirm_latency.counts,
            confirm_latency_max_us=self.confirm_latency.max_us,
            e2e_latency=self.e2e_latency.counts,
            e2e_latency_max_us=self.e2e_latency.max_us,
            statuses=result["statuses"],
            receipts=result["receipts"],
            cpu_s=time.process_time() - cpu_start,
            wall_s=time.monotonic() - wall_start,
            error=self.error,
        )
