"""The same Spark job on a standalone cluster: a master and a worker started on this
machine from the pyspark package's own launcher (bin/spark-class), the driver a process
of its own with only the master URL changed, executors in the worker's JVMs.

The job reads a kanin stream into Parquet (Trigger.AvailableNow) and publishes the stream
through the sink into a deduplicating exchange. Executors find kanin through
spark.executorEnv.PYTHONPATH, as a job would ship it with --py-files or an install.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from driver_process import Driver, driver_environment, kill_session
from pyspark.sql import SparkSession
from spark_helpers import channel, declare_stream, drain, publish

from kanin.testing.embedded import running_broker

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.kanin_only,
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("java") is None, reason="a Spark cluster needs Java"),
]

MESSAGES = 3000


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


class Daemon:
    """A master or worker JVM in a session of its own, its log in a file."""

    def __init__(self, folder: Path, label: str, args: list[str]) -> None:
        self.log = folder / f"{label}.log"
        environment = driver_environment(
            {"SPARK_DAEMON_MEMORY": "256m", "SPARK_WORKER_DIR": str(folder / "work")}
        )
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(spark_class()), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )

    def wait_for(self, pattern: str, timeout: float = 180) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log.read_text(errors="replace"))
            if found:
                return found
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-3000:]
            time.sleep(0.3)
        raise AssertionError(f"no {pattern!r} in {self.log.name}")

    def stop(self) -> None:
        kill_session(self.process.pid)  # the worker's executors are in its session too
        self.process.wait(30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("standalone")
    settings = folder / "spark.conf"
    settings.write_text("spark.master.rest.enabled false\n")  # else it listens on 6066
    loopback = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
    master = Daemon(
        folder,
        "master",
        ["org.apache.spark.deploy.master.Master", *loopback, "--properties-file", str(settings)],
    )
    worker = None
    try:
        url = master.wait_for(r"Starting Spark master at (spark://\S+)").group(1)
        small = ["--cores", "2", "--memory", "1g", "--work-dir", str(folder / "work")]
        worker = Daemon(
            folder,
            "worker",
            ["org.apache.spark.deploy.worker.Worker", url, *loopback, *small],
        )
        worker.wait_for("Successfully registered with master")
        yield url, folder
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


def test_a_job_runs_unchanged_on_a_standalone_cluster(
    spark: SparkSession, cluster: tuple[str, Path]
) -> None:
    master, folder = cluster
    with running_broker() as broker:
        declare_stream(broker.url, "events")
        publish(broker.url, "events", MESSAGES)
        with channel(broker.url) as ch:
            ch.exchange_declare(
                "copies", "x-message-deduplication", arguments={"x-cache-size": 10_000}
            )
            ch.queue_declare("copied")
            ch.queue_bind("copied", "copies")
        out = folder / "out"
        plan = {
            "phase": "drain",
            "master": master,
            "url": broker.url,
            "signals": str(folder),
            "conf": {
                "spark.executor.memory": "512m",
                "spark.cores.max": "2",
                "spark.executorEnv.PYTHONPATH": driver_environment()["PYTHONPATH"],
                "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
            },
            "queries": [
                {
                    "name": "events",
                    "queue": "events",
                    "mode": "stream",
                    "sink": "file",
                    "batch": 1000,
                    "expect": MESSAGES,
                    "out": str(out),
                    "checkpoint": str(folder / "checkpoint"),
                }
            ],
            "sink": {"from": "events", "exchange": "copies"},
        }
        job = Driver(plan, folder, "job")
        assert job.wait(400) == 0, job.tail()

        offsets = sorted(row.offset for row in spark.read.parquet(str(out)).collect())
        assert offsets == list(range(MESSAGES))
        copied = drain(broker.url, "copied")
    assert sorted(props.message_id for props, _ in copied) == sorted(
        f"id-{n}" for n in range(MESSAGES)
    )
    # The tasks ran in the worker's executors: each executor has a folder there.
    assert list((folder / "work").glob("app-*/*/stderr"))
