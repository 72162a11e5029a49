"""The Structured Streaming job: three queries on the order-events stream.

- processed: every order event, as read, into Parquet (the file sink), stamped with the
  micro-batch's time: what the consumer side processed, for the audit;
- revenue: revenue and order count per minute of order time, each order id counted once
  (a customer's double-click is one order), the whole table rewritten to Parquet after
  each batch;
- reminders: a "rate this order" message per order, published back to kanin through the
  kanin sink to a delayed-message exchange with an x-delay header, due some seconds after
  the order was processed. Its message id is made from the order id, so a second copy
  (Spark retrying a task or replaying a batch, or the order's double-click) has the same
  id as the first and the reminder queue and the rating service keep one.

Reading a kanin stream in stream mode is exactly-once into the file sink: each micro-batch
is a range of stream offsets logged in the checkpoint before it runs, and replayed as it
was after a crash. All transformations are Spark's built-in functions, so nothing of this
example has to be importable by Spark's Python workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from orders.topology import ORDER_EVENTS, REMINDER_KEY, REMINDERS_EXCHANGE

ORDER_SCHEMA = "order_id string, producer string, amount double, created_at double"


@dataclass(frozen=True)
class JobPaths:
    work: Path

    @property
    def processed(self) -> Path:
        return self.work / "processed"

    @property
    def revenue(self) -> Path:
        return self.work / "revenue"

    def checkpoint(self, query: str) -> str:
        return str(self.work / "checkpoints" / query)


def order_events(spark: SparkSession, url: str) -> DataFrame:
    raw = (
        spark.readStream.format("kanin")
        .option("uri", url)
        .option("queue", ORDER_EVENTS)
        .option("maxRecordsPerBatch", 5000)
        .load()
    )
    order = F.from_json(F.col("body").cast("string"), ORDER_SCHEMA)
    return raw.select(order.alias("order"), "offset").select(
        "order.order_id",
        "order.producer",
        "order.amount",
        F.timestamp_seconds("order.created_at").alias("created_at"),
        "offset",
    )


def start(
    spark: SparkSession, url: str, paths: JobPaths, reminder_delay_s: float
) -> list[StreamingQuery]:
    events = order_events(spark, url)
    trigger = {"processingTime": "1 second"}
    processed = (
        events.withColumn("processed_at", F.current_timestamp())
        .writeStream.queryName("processed")
        .format("parquet")
        .option("path", str(paths.processed))
        .option("checkpointLocation", paths.checkpoint("processed"))
        .trigger(**trigger)
        .start()
    )
    revenue = started(
        events.dropDuplicates(
            ["order_id"]
        )  # kept in state: bound it with a watermark in production
        .groupBy(F.window("created_at", "1 minute").alias("minute"))
        .agg(F.round(F.sum("amount"), 2).alias("revenue"), F.count("*").alias("orders"))
        .select(F.col("minute.start").alias("minute"), "revenue", "orders")
        .writeStream.queryName("revenue")
        .outputMode("complete")
        .foreachBatch(
            lambda table, _batch: table.write.mode("overwrite").parquet(str(paths.revenue))
        )
        .option("checkpointLocation", paths.checkpoint("revenue"))
        .trigger(**trigger)
        .start()
    )
    reminders = started(
        events.select(*reminder_columns(reminder_delay_s))
        .writeStream.queryName("reminders")
        .format("kanin")
        .option("uri", url)
        .option("exchange", REMINDERS_EXCHANGE)
        .option("idColumn", "message_id")
        .option("checkpointLocation", paths.checkpoint("reminders"))
        .trigger(**trigger)
        .start()
    )
    return [processed, revenue, reminders]


def started(query: StreamingQuery, timeout_s: float = 300) -> StreamingQuery:
    """The query once its first micro-batch is done. Queries are started one at a time:
    Spark gives each streaming source's new Python process 10 s to connect back, which
    several starting at once on a busy small machine can overrun."""
    deadline = time.monotonic() + timeout_s
    while query.lastProgress is None and query.isActive and time.monotonic() < deadline:
        time.sleep(0.2)
    if query.exception() is not None:
        raise RuntimeError(f"query {query.name} failed: {query.exception()}")
    return query


def reminder_columns(delay_s: float) -> list[Column]:
    delay_ms = int(delay_s * 1000)
    due_at = F.unix_millis(F.current_timestamp()) / 1000 + delay_s
    body = F.to_json(F.struct("order_id", "producer", due_at.alias("due_at")))
    return [
        body.alias("body"),
        F.lit(REMINDER_KEY).alias("routing_key"),
        F.create_map(F.lit("x-delay"), F.lit(str(delay_ms))).alias("headers"),
        F.concat(F.lit("rate-"), "order_id").alias("message_id"),
    ]


def finish(queries: list[StreamingQuery]) -> None:
    """Let every query take in all the stream holds, then stop them."""
    for query in queries:
        query.processAllAvailable()
    for query in queries:
        query.stop()
        if query.exception() is not None:
            raise RuntimeError(f"query {query.name} failed: {query.exception()}")
