"""The whole order pipeline, once, on a broker and a Spark session the caller owns:
declare the topology, start the streaming job and the rating service, run the order
service, let Spark take in everything, wait for the reminders to come due, audit.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import SparkSession

import kanin.spark
from orders import streaming_job, topology
from orders.audit import audit
from orders.order_service import Injected, run_order_service
from orders.rating_service import RatingService

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    orders: int = 300  # per producer
    rate: float = 5.0  # orders a second, per producer
    reminder_delay_s: float = 10.0
    late_after_s: float = 120.0
    reminder_late_after_s: float = 5.0


@dataclass
class Outcome:
    injected: Injected
    audit: list[dict[str, Any]]
    revenue: list[dict[str, Any]]


class LoopThread:
    """An asyncio loop on a thread of its own, for the services beside Spark's blocking calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def run_pipeline(spark: SparkSession, url: str, work: Path, settings: Settings) -> Outcome:
    topology.declare(url)
    kanin.spark.register(spark)
    paths = streaming_job.JobPaths(work)
    queries = streaming_job.start(spark, url, paths, settings.reminder_delay_s)
    services = LoopThread()
    rating = RatingService(url, work / "rating.sqlite3")
    try:
        services.run(rating.start(), 30)
        ledger = work / "ledger"
        sending = run_order_service(url, ledger, settings.orders, settings.rate)
        injected = services.run(sending, 60 + 4 * settings.orders / settings.rate)
        streaming_job.finish(queries)
        wait_for_reminders(spark, services, rating, paths, settings)
    finally:
        for query in queries:
            query.stop()
        services.run(rating.close(), 30)
        services.stop()
    rating.export(work / "reminders.jsonl")
    report = audit(spark, work, settings.late_after_s, settings.reminder_late_after_s)
    revenue = spark.read.parquet(str(paths.revenue)).orderBy("minute").collect()
    return Outcome(injected, report, [row.asDict() for row in revenue])


def wait_for_reminders(
    spark: SparkSession,
    services: LoopThread,
    rating: RatingService,
    paths: streaming_job.JobPaths,
    settings: Settings,
) -> None:
    """Until the rating service has handled a reminder per processed order, or long after
    the last one was due (the audit then reports the missing ones as lost)."""
    expected = spark.read.parquet(str(paths.processed)).select("order_id").distinct().count()

    async def handled() -> int:
        return rating.handled()

    deadline = time.monotonic() + settings.reminder_delay_s + 60
    while services.run(handled(), 10) < expected and time.monotonic() < deadline:
        time.sleep(0.5)
