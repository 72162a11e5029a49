"""A Spark driver program for the tests that need a driver of their own: a crash kills it
with SIGKILL, a standalone cluster gives it another master. Run as

    python spark_job.py PLAN.json

PLAN says the master, the broker, and the streaming queries to run: each reads a kanin
queue (mode stream or queue) into Parquet, through the file sink or through foreachBatch
writing each batch to out/batch_id=N once. A query may carry a hook that stops it at one
point of micro-batch 1 (the second): the hook notes that it got there in a file named
after the query in the plan's signal folder, then sleeps, so the test can kill the driver
there and know where it died:
- "read": in the executor task that reads and passes on the batch's rows;
- "commit": in the source's commit of batch 0, which Spark calls after logging batch 1's
  offsets and before running batch 1 (the reader is a subclass of kanin's with the hook);
- "sink": in foreachBatch, after batch 1's files are written and before Spark logs the
  batch as committed.
Queries start one after the other, each once the one before is at its hook or done.
With hooks the program then waits to be killed. Without, it drains each query with
`drain_batch` rows per batch: a stream-mode query runs with Trigger.AvailableNow to its
end, a queue-mode one until its output holds `expect` distinct message ids (a queue has
no end to run to). Then a batch write ("sink" in the plan) may publish what a stream
holds to an exchange.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col

from kanin.spark import KaninDataSource, register
from kanin.spark.queue_read import KaninQueueReader
from kanin.spark.reader import KaninStreamReader

HOOKED_BATCH = 1
STALL_S = 3600.0
COLUMNS = ("message_id", "offset", "redelivered", "body")
# queue -> signal file, for the readers whose commit stalls (read where Spark runs them).
COMMIT_HOOKS = "KANIN_TEST_COMMIT_HOOKS"


def stall(signal: str, note: str) -> None:
    Path(signal).write_text(note)
    time.sleep(STALL_S)


def commit_hook(queue: str | None, commits: int) -> None:
    """A run's first commit is batch 0's, made once batch 1's offsets are logged."""
    signal = json.loads(os.environ.get(COMMIT_HOOKS, "{}")).get(queue)
    if signal and commits == HOOKED_BATCH:
        stall(signal, f"in commit number {commits}")


class CommitHookedStreamReader(KaninStreamReader):
    commits = 0

    def commit(self, end: dict[str, Any]) -> None:
        self.commits += 1
        commit_hook(self.options.queue, self.commits)
        super().commit(end)


class CommitHookedQueueReader(KaninQueueReader):
    commits = 0

    def commit(self, end: dict[str, Any]) -> None:
        self.commits += 1
        commit_hook(self.options.queue, self.commits)
        super().commit(end)


class CommitHookedSource(KaninDataSource):
    @classmethod
    def name(cls) -> str:
        return "kanin_commit_hooked"

    def streamReader(self, schema: Any) -> KaninStreamReader:
        return CommitHookedStreamReader(super().streamReader(schema).options)  # type: ignore[attr-defined]

    def simpleStreamReader(self, schema: Any) -> KaninQueueReader:
        return CommitHookedQueueReader(super().simpleStreamReader(schema).options)  # type: ignore[attr-defined]


def stalling_in_batch(signal: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A mapInArrow function passing rows on unchanged, except in the hooked batch's tasks."""

    def pass_on(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        task = TaskContext.get()
        hooked = task is not None and task.getLocalProperty("streaming.sql.batchId") == str(
            HOOKED_BATCH
        )
        for batch in batches:
            if hooked:
                stall(signal, f"in a task of batch {HOOKED_BATCH}")
            yield batch

    return pass_on


def write_batch_once(out: str, signal: str | None, dedup: bool) -> Callable[[DataFrame, int], None]:
    """foreachBatch writing batch N to out/batch_id=N unless a finished copy is there, as
    Spark's file sink skips a batch it logged. With `dedup`, rows delivered again whose
    message_id the output already holds are dropped first: only a redelivered message
    can be one written before."""

    def write(frame: DataFrame, batch_id: int) -> None:
        target = Path(out) / f"batch_id={batch_id}"
        if (target / "_SUCCESS").exists():
            return
        if dedup:
            frame = without_rows_written_before(frame, out)
        frame.write.mode("overwrite").parquet(str(target))
        if signal and batch_id == HOOKED_BATCH:
            stall(signal, f"after writing batch {batch_id}")

    return write


def without_rows_written_before(frame: DataFrame, out: str) -> DataFrame:
    first_time = frame.where(~col("redelivered"))
    again = frame.where(col("redelivered")).dropDuplicates(["message_id"])
    if any(Path(out).glob("batch_id=*/_SUCCESS")):
        written = frame.sparkSession.read.parquet(out).select("message_id")
        again = again.join(written, "message_id", "left_anti")
    return first_time.unionByName(again)


def start_query(spark: SparkSession, plan: dict[str, Any], spec: dict[str, Any]) -> Any:
    hook = spec.get("hook") if plan["phase"] == "crash" else None
    signal = str(Path(plan["signals"]) / spec["name"])
    source = "kanin_commit_hooked" if hook == "commit" else "kanin"
    reader = spark.readStream.format(source).option("uri", plan["url"])
    batch = spec["batch"] if plan["phase"] == "crash" else spec.get("drain_batch", spec["batch"])
    reader = reader.option("queue", spec["queue"]).option("maxRecordsPerBatch", batch)
    if spec["mode"] == "queue":
        reader = reader.option("mode", "queue")
    frame = reader.load().select(*COLUMNS)
    if hook == "read":
        frame = frame.mapInArrow(stalling_in_batch(signal), frame.schema)
    writer = frame.writeStream.queryName(spec["name"].replace("-", "_"))
    writer = writer.option("checkpointLocation", spec["checkpoint"])
    if spec["sink"] == "file":
        writer = writer.format("parquet").option("path", spec["out"])
    else:
        hooked = signal if hook == "sink" else None
        writer = writer.foreachBatch(
            write_batch_once(spec["out"], hooked, spec.get("dedup", False))
        )
    if plan["phase"] == "drain" and spec["mode"] == "stream":
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="100 milliseconds").start()


def distinct_ids(spark: SparkSession, out: str) -> int:
    if not Path(out).exists():
        return 0
    try:
        return spark.read.parquet(out).select("message_id").distinct().count()
    except Exception:  # no committed file yet
        return 0


# Spark gives a streaming source's new Python process 10 s to connect back; on a busy
# machine that start can take longer, and the query fails before its first batch. It is
# then started again from its checkpoint, as a scheduler restarting a failed job would.
NOT_STARTED = "Python worker failed to connect back"
STARTS = 4


def run_query(spark: SparkSession, plan: dict[str, Any], spec: dict[str, Any]) -> Any:
    """Start the query and run it to its hook (crash) or its end (drain)."""
    for _ in range(STARTS):
        query = start_query(spark, plan, spec)
        if plan["phase"] == "crash":
            at_hook = Path(plan["signals"]) / spec["name"]
            while query.isActive and not at_hook.exists():
                time.sleep(0.2)
        else:
            drain(spark, plan, spec, query)
        failure = query.exception()
        if failure is None or NOT_STARTED not in str(failure):
            return query
    return query


def drain(spark: SparkSession, plan: dict[str, Any], spec: dict[str, Any], query: Any) -> None:
    deadline = time.monotonic() + plan.get("timeout", 240)
    if spec["mode"] == "stream":
        query.awaitTermination(max(1.0, deadline - time.monotonic()))
        return
    while distinct_ids(spark, spec["out"]) < spec["expect"]:
        if time.monotonic() > deadline or query.exception() is not None:
            break
        time.sleep(0.5)
    if query.exception() is None:
        query.processAllAvailable()  # one more batch acks the last one
        query.stop()


def publish_stream(spark: SparkSession, plan: dict[str, Any], sink: dict[str, Any]) -> None:
    rows = spark.read.format("kanin").option("uri", plan["url"]).option("queue", sink["from"])
    rows.load().select("body", "message_id").write.format("kanin").option(
        "uri", plan["url"]
    ).option("exchange", sink["exchange"]).option("idColumn", "message_id").mode("append").save()


def session(plan: dict[str, Any]) -> SparkSession:
    builder = SparkSession.builder.master(plan["master"]).appName("kanin-spark-job")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        **plan.get("conf", {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(CommitHookedSource)
    return spark


def main(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    signals = Path(plan["signals"])
    hooks = {
        spec["queue"]: str(signals / spec["name"])
        for spec in plan["queries"]
        if spec.get("hook") == "commit" and plan["phase"] == "crash"
    }
    os.environ[COMMIT_HOOKS] = json.dumps(hooks)  # before the JVM starts: its children see it
    spark = session(plan)
    # One query at a time: several Python processes starting at once overrun the 10 s.
    # A query stopped at its hook is idle.
    queries = {spec["name"]: run_query(spark, plan, spec) for spec in plan["queries"]}
    failed = [name for name, query in queries.items() if query.exception() is not None]
    if failed:
        (signals / "failed").write_text(f"{failed}: {queries[failed[0]].exception()}")
        sys.exit(1)
    while plan["phase"] == "crash":
        time.sleep(1)  # until killed
    if plan.get("sink"):
        publish_stream(spark, plan, plan["sink"])
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
