"""One real local Spark session for every test in tests/spark, and a kanin broker per test.

Starting Spark takes about ten seconds, so the session is made once per run and shared.
Its master is local[2,4]: two cores, and up to four attempts per task, because plain
local[N] never retries a failed task and the sink's retry test needs Spark to. The
session stays on the loopback interface (SPARK_LOCAL_IP, no web UI), and its Python
workers run this interpreter with the repository's src/ (for kanin.spark) and the test
folders (for functions the tests hand to Spark) on their path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from driver_process import spark_environment

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from pyspark.sql import SparkSession

    import kanin.spark

    saved = dict(os.environ)
    os.environ.update(spark_environment())  # the JVM and its workers inherit these
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("kanin-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    kanin.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        os.environ.clear()
        os.environ.update(saved)
