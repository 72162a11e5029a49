"""kanin.spark: format("kanin") for PySpark (4.2 or later, with the [sql] extra).

    import kanin.spark
    kanin.spark.register(spark)
    spark.readStream.format("kanin").option("uri", "amqp://...").option("queue", "events")

Reads streams (x-queue-type: stream) as micro-batches of offset ranges, or between two
offsets as a batch; writes DataFrames as messages, each confirmed, with ids that make
Spark's task retries harmless behind a deduplicating exchange. The README's "Spark"
section has the options, the rows and the guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kanin.spark.source import KaninDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KaninDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make format("kanin") known to this Spark session."""
    spark.dataSource.register(KaninDataSource)
