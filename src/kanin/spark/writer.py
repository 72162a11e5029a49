"""The sink: df.write.format("kanin") and df.writeStream.format("kanin").

Spark makes the writer once per job (once per micro-batch when streaming) in a planning
process and pickles that one instance to every task; write() runs in the tasks, on
executors, and commit() in yet another process. Each task publishes its rows with
confirms (publish.py) and returns only once the broker has confirmed them all; a failed
task is run again by Spark, publishing the same ids again (ids.py). Behind an exchange of
type x-message-deduplication no message arrives twice. Without one, delivery is
at-least-once: a task that failed part way has published part of its rows, and an
aborted job cannot take back what its tasks published.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from kanin.spark.columns import ColumnLayout
from kanin.spark.ids import batch_write_id, column_message_id, row_message_id, streaming_write_id
from kanin.spark.options import KaninOptions
from kanin.spark.publish import MessageIds, publish_batches

# Spark sets these task properties for the tasks of a streaming query's micro-batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


class Published(WriterCommitMessage):
    """What a task reports to the driver: its partition and how many messages the broker
    confirmed."""

    def __init__(self, partition: int, count: int) -> None:
        self.partition = partition
        self.count = count


class _Sink:
    def __init__(self, options: KaninOptions, layout: ColumnLayout) -> None:
        self.options = options
        self.layout = layout

    def _publish(self, batches: Iterator[pa.RecordBatch], write_id: str) -> Published:
        partition = _task().partitionId()
        ids = self._ids(write_id, partition)
        return Published(partition, publish_batches(self.options, self.layout, batches, ids))

    def _ids(self, write_id: str, partition: int) -> MessageIds:
        if self.layout.message_key is not None:
            name = self.options.id_column or ""
            return lambda keys, first, _rows: [
                column_message_id(key, name, first + n) for n, key in enumerate(keys or ())
            ]
        return lambda _keys, first, rows: [
            row_message_id(write_id, partition, index) for index in range(first, first + rows)
        ]


def _task() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("format 'kanin' writes only from Spark tasks")
    return context


class KaninBatchWriter(_Sink, DataSourceArrowWriter):
    def __init__(self, options: KaninOptions, layout: ColumnLayout) -> None:
        super().__init__(options, layout)
        # Made once, when Spark plans the job; every task and every attempt of a task
        # gets this same instance, so the ids of rows without an idColumn are stable
        # across retries (and differ from the next job's, which must not be dropped as
        # duplicates of this one's).
        self.job_token = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return self._publish(iterator, batch_write_id(self.job_token))


class KaninStreamWriter(_Sink, DataSourceStreamArrowWriter):
    """Rows of micro-batch B of query Q get ids Q:B:partition:index. Spark keeps Q in the
    checkpoint and runs an unfinished batch again under the same B after a restart, with
    the same rows if the source replays exactly (a kanin stream does)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        task = _task()
        query_id = task.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = task.getLocalProperty(BATCH_ID_PROPERTY)
        if query_id is None or batch_id is None:
            raise RuntimeError("a streaming write task without Spark's query and batch ids")
        return self._publish(iterator, streaming_write_id(query_id, batch_id))
