"""The Spark driver killed with SIGKILL at three points of a micro-batch, then restarted
from its checkpoint and drained: what is in the Parquet output afterwards.

One driver runs seven streaming queries, each stopped by a hook (spark_job.py) in its
second micro-batch (batch 1) at one of three points:
- read: while an executor task reads and passes on the batch's rows;
- commit: after Spark logged batch 1's offsets, before it ran batch 1 (in the source's
  commit of batch 0, which Spark calls just then);
- sink: after foreachBatch wrote batch 1, before Spark logged batch 1 as committed.
Once every query has reached its point, the whole driver (JVM and Python processes) is
killed, and a second driver runs the same queries from the same checkpoints to the end.
Two driver starts in all: each costs a Spark start-up.

Stream mode must come out exactly once at every point. Queue mode loses nothing and
duplicates only what a crash after the sink's write and before the ack sends again: the
batch written last, each copy marked redelivered; dropping rows whose message_id the
output already holds makes it exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from driver_process import Driver
from pyspark.sql import SparkSession
from spark_helpers import channel, declare_stream, message_count, publish, wait_until

from kanin.testing.embedded import running_broker

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.kanin_only, pytest.mark.timeout(600)]

MESSAGES = 2000
BATCH = 500
HOOKED_BATCH = 1


@dataclass(frozen=True)
class Scenario:
    name: str
    mode: str  # "stream" or "queue"
    hook: str  # "read", "commit" or "sink"
    dedup: bool = False  # foreachBatch drops rows written before

    @property
    def sink(self) -> str:
        return "foreach" if self.hook == "sink" else "file"


SCENARIOS = [
    Scenario("stream-read", "stream", "read"),
    Scenario("stream-commit", "stream", "commit"),
    Scenario("stream-sink", "stream", "sink"),
    Scenario("queue-read", "queue", "read"),
    Scenario("queue-commit", "queue", "commit"),
    Scenario("queue-sink", "queue", "sink"),
    Scenario("queue-sink-dedup", "queue", "sink", dedup=True),
]


@dataclass
class Outcome:
    folder: Path
    url: str
    # Per scenario: the checkpoint's offset and commit logs and the file sink's log
    # (batch ids in each) when the driver died.
    logged: dict[str, tuple[set[int], set[int], set[int]]]
    leftover: dict[str, int]  # messages still in each queue after the drain


def log_entries(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def logged_at_kill(folder: Path) -> tuple[set[int], set[int], set[int]]:
    checkpoint = folder / "checkpoint"
    sink_log = folder / "out" / "_spark_metadata"
    return (
        log_entries(checkpoint / "offsets"),
        log_entries(checkpoint / "commits"),
        log_entries(sink_log),
    )


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    folder = tmp_path_factory.mktemp("driver-crash")
    with running_broker() as broker:
        specs = [query_spec(broker.url, folder, scenario) for scenario in SCENARIOS]
        plan: dict[str, Any] = {
            "master": "local[8]",  # stalled tasks hold slots; the other queries need some
            "url": broker.url,
            "signals": str(folder / "signals"),
            "queries": specs,
        }
        (folder / "signals").mkdir()
        crashing = Driver({**plan, "phase": "crash"}, folder, "crash")
        crashing.wait_for_files(
            [folder / "signals" / s.name for s in SCENARIOS], folder / "signals" / "failed", 300
        )
        crashing.kill()
        logged = {s.name: logged_at_kill(folder / s.name) for s in SCENARIOS}
        draining = Driver({**plan, "phase": "drain", "timeout": 300}, folder, "drain")
        assert draining.wait(400) == 0, draining.tail()
        leftover = {s.name: settled_count(broker.url, s) for s in SCENARIOS if s.mode == "queue"}
        yield Outcome(folder, broker.url, logged, leftover)


def query_spec(url: str, folder: Path, scenario: Scenario) -> dict[str, Any]:
    queue = scenario.name
    if scenario.mode == "stream":
        declare_stream(url, queue)
    else:
        with channel(url) as ch:
            ch.queue_declare(queue, durable=True)
    publish(url, queue, MESSAGES)
    return {
        "name": scenario.name,
        "queue": queue,
        "mode": scenario.mode,
        "hook": scenario.hook,
        "sink": scenario.sink,
        "dedup": scenario.dedup,
        "batch": BATCH,
        "drain_batch": MESSAGES,
        "expect": MESSAGES,
        "out": str(folder / scenario.name / "out"),
        "checkpoint": str(folder / scenario.name / "checkpoint"),
    }


def settled_count(url: str, scenario: Scenario) -> int:
    """Messages left in a queue once the drained driver is gone: its connection closed, so
    anything it had not acked is back in the queue."""
    wait_until(lambda: message_count(url, scenario.name) == 0, 10, "an empty queue")
    return message_count(url, scenario.name)


def ids_written(spark: SparkSession, out: Path) -> Counter[str]:
    """How often each message id is in the output (through the file sink's log, so files
    of a batch that never committed do not count)."""
    rows = spark.read.parquet(str(out)).select("message_id").collect()
    return Counter(row.message_id for row in rows)


EVERY_ID = Counter(f"id-{n}" for n in range(MESSAGES))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_driver_died_where_the_hook_stopped_it(outcome: Outcome, scenario: Scenario) -> None:
    offsets, commits, sink_log = outcome.logged[scenario.name]
    assert offsets == set(range(HOOKED_BATCH + 1))  # batch 1 planned and logged
    assert commits == set(range(HOOKED_BATCH))  # batch 1 not committed
    written = outcome.folder / scenario.name / "out"
    if scenario.sink == "foreach":
        assert (written / f"batch_id={HOOKED_BATCH}" / "_SUCCESS").exists()
    else:
        assert sink_log == set(range(HOOKED_BATCH))


@pytest.mark.parametrize(
    "scenario", [s for s in SCENARIOS if s.mode == "stream"], ids=lambda s: s.name
)
def test_stream_mode_writes_every_message_exactly_once(
    spark: SparkSession, outcome: Outcome, scenario: Scenario
) -> None:
    out = outcome.folder / scenario.name / "out"
    assert ids_written(spark, out) == EVERY_ID
    offsets = sorted(row.offset for row in spark.read.parquet(str(out)).collect())
    assert offsets == list(range(MESSAGES))


@pytest.mark.parametrize(
    "scenario",
    [s for s in SCENARIOS if s.mode == "queue" and (s.hook != "sink" or s.dedup)],
    ids=lambda s: s.name,
)
def test_queue_mode_writes_every_message_once_unless_the_sink_had_the_batch(
    spark: SparkSession, outcome: Outcome, scenario: Scenario
) -> None:
    """Killed before the sink had batch 1 (read, commit), nothing was written twice:
    batch 1 was not acked, came again redelivered and was written once. With the sink's
    dedup step, the same holds when the sink had it."""
    out = outcome.folder / scenario.name / "out"
    assert ids_written(spark, out) == EVERY_ID
    frame = spark.read.parquet(str(out))
    assert frame.where("redelivered").count() > 0  # the crash did make the broker resend
    assert outcome.leftover[scenario.name] == 0


def test_queue_mode_duplicates_only_the_batch_the_sink_had_and_they_can_be_dropped(
    spark: SparkSession, outcome: Outcome
) -> None:
    out = outcome.folder / "queue-sink" / "out"
    frame = spark.read.parquet(str(out))
    counts = ids_written(spark, out)
    assert set(counts) == set(EVERY_ID)  # nothing lost
    twice = {message_id for message_id, seen in counts.items() if seen > 1}
    hooked_batch = frame.where(f"batch_id = {HOOKED_BATCH}").collect()
    assert twice == {row.message_id for row in hooked_batch}  # that batch, and only it
    assert max(counts.values()) == 2
    copies = frame.where(frame.message_id.isin(sorted(twice))).collect()
    later = [row for row in copies if row.batch_id > HOOKED_BATCH]
    assert len(later) == len(twice) and all(row.redelivered for row in later)
    # The documented post-step: one row per message_id.
    assert frame.dropDuplicates(["message_id"]).count() == MESSAGES
    assert outcome.leftover["queue-sink"] == 0
