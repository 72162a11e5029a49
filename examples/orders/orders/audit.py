"""The delivery audit: a Spark batch job reconciling what the publishers sent with what the
consumers processed, per producer.

Inputs: the producers' outboxes (JSON lines: every order they meant to send), the
streaming job's processed orders (Parquet), and the reminders the rating service handled
(JSON lines). Per producer it reports
- sent: orders in the outbox;
- processed: distinct orders the streaming job wrote;
- lost: orders sent and never processed;
- duplicated: extra copies of orders processed more than once;
- late: orders processed more than `late_after_s` after they were created;
- reminders lost / duplicated / late: processed orders whose reminder the rating service
  never handled, handled more than once, or handled more than `reminder_late_after_s`
  after it was due.

Run on its own: python examples/orders/orders/audit.py WORK_DIR (the run's folder).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

COLUMNS = (
    "producer",
    "sent",
    "processed",
    "lost",
    "duplicated",
    "late",
    "reminders_lost",
    "reminders_duplicated",
    "reminders_late",
)


def audit(
    spark: SparkSession,
    work: Path,
    late_after_s: float = 60.0,
    reminder_late_after_s: float = 5.0,
) -> list[dict[str, Any]]:
    sent = spark.read.json(str(work / "ledger")).select("order_id", "producer", "created_at")
    processed = spark.read.parquet(str(work / "processed"))
    reminders = spark.read.schema(
        "order_id string, producer string, due_at double, received_at double"
    ).json(str(work / "reminders.jsonl"))

    per_order = processed.groupBy("order_id").agg(
        F.count("*").alias("copies"),
        F.min("processed_at").alias("first_processed_at"),
        F.first("producer").alias("producer"),
    )
    reminded = reminders.groupBy("order_id").agg(
        F.count("*").alias("reminders"),
        F.max(F.col("received_at") - F.col("due_at")).alias("reminder_lateness"),
    )
    orders = (
        sent.dropDuplicates(["order_id"])
        .join(per_order.drop("producer"), "order_id", "left")
        .join(reminded, "order_id", "left")
    )
    lateness = F.col("first_processed_at").cast("double") - F.col("created_at")
    processed_yet = F.col("copies").isNotNull()
    report = orders.groupBy("producer").agg(
        F.count("*").alias("sent"),
        F.sum(processed_yet.cast("int")).alias("processed"),
        F.sum((~processed_yet).cast("int")).alias("lost"),
        F.sum(F.coalesce(F.col("copies") - 1, F.lit(0))).alias("duplicated"),
        F.sum((processed_yet & (lateness > late_after_s)).cast("int")).alias("late"),
        F.sum((processed_yet & F.col("reminders").isNull()).cast("int")).alias("reminders_lost"),
        F.sum(F.coalesce(F.col("reminders") - 1, F.lit(0))).alias("reminders_duplicated"),
        F.sum((F.col("reminder_lateness") > reminder_late_after_s).cast("int")).alias(
            "reminders_late"
        ),
    )
    return [
        row.asDict() for row in _with_strays(report, per_order, sent).orderBy("producer").collect()
    ]


def _with_strays(report: DataFrame, per_order: DataFrame, sent: DataFrame) -> DataFrame:
    """Orders processed that no outbox holds (none expected) would show under producer
    '(not sent)'; listed so the audit cannot miss them."""
    strays = per_order.join(sent, "order_id", "left_anti")
    row = strays.agg(F.count("*").alias("processed")).select(
        F.lit("(not sent)").alias("producer"), F.lit(0).alias("sent"), "processed"
    )
    zeros = [F.lit(0).alias(name) for name in COLUMNS[3:]]
    return report.unionByName(
        row.select("producer", "sent", "processed", *zeros).where("processed > 0")
    )


def format_report(rows: list[dict[str, Any]]) -> str:
    widths = [max(len(name), *(len(str(row[name])) for row in rows)) for name in COLUMNS]
    lines = ["  ".join(name.rjust(width) for name, width in zip(COLUMNS, widths, strict=True))]
    for row in rows:
        cells = (str(row[name]) for name in COLUMNS)
        lines.append(
            "  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True))
        )
    return "\n".join(lines)


def main(work: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("order-audit").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(format_report(audit(spark, Path(work))))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
