"""kanin.spark's rates beside the raw clients', on one kanin, on this machine, in one run.

    python bench/spark.py                                   # 200,000 messages, ~12 minutes
    python bench/spark.py --messages 50000 --out /tmp/sp    # a try

writes bench/results/spark.{md,json} (or --out DIR's). A fresh `kanin server` (port 0, its
own data directory under /tmp) gets N (--messages) messages of --size bytes, and each path
moves all N:
- raw clients, in this process: aio-pika publishing with confirms (--window unconfirmed
  at a time) to a stream and to a classic queue; aio-pika and pika consuming the stream
  from its first offset and the classic queue (prefetch --prefetch, one multiple ack per
  1000);
- the plain-client publishers the sink is measured against, each publishing persistent
  100-byte messages with a unique x-deduplication-header to a classic queue, as the sink
  does: `kanin perf` (one producer, --window unconfirmed confirms, N messages, its own
  process) and pika's BlockingConnection in confirm mode (each publish waits for its
  confirm; --pika-messages of them, it is slow), run right before each sink write with
  the Spark session up;
- Spark (local[2], the driver in this process), each into the `noop` sink so only reading
  counts: a streaming read of the stream (stream mode, --batch and then 5 x --batch
  offsets per micro-batch, --partitions tasks per batch, Trigger.AvailableNow), a batch
  read of the stream, a streaming read of the classic queue (mode=queue, --batch per
  micro-batch), and --rounds rounds of the publishers then a batch write of N rows (2
  partitions) through the sink to a classic queue, right after a small write that starts
  Spark's Python workers; the sink's figure is the median of the rounds. The
  streaming reads of each mode come after a warm-up query of that mode (--warm rows,
  --warm-batch a batch; warm_queue_read says why).
Spark rows/s = N / wall time from the query's start to its end (Spark start-up not
counted); "steady" leaves out the first micro-batch (Python workers starting cold) and is
rows / the sum of the other batches' trigger times from Spark's progress reports.

    python bench/spark.py --only-sink --rounds 3             # the sink and its baselines

runs only the publishers: per round kanin perf, pika, aio-pika, then the sink after a
small warm-up write (alternating, since the machine is shared; each round notes the
load average as it starts), into spark-sink.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aio_pika
import pika

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))
# This checkout's kanin, for the broker subprocess and Spark's Python workers too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
)

import compiled  # noqa: E402
from harness import Kanin, write_results  # noqa: E402

STREAM = "bench.spark.stream"
QUEUE = "bench.spark.queue"
WARM_QUEUE = "bench.spark.warm"  # what the queue-mode warm-up reads
OUT = "bench.spark.out"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="body bytes")
    parser.add_argument("--batch", type=int, default=20_000, help="maxRecordsPerBatch")
    parser.add_argument("--partitions", type=int, default=2, help="numPartitions (stream mode)")
    parser.add_argument("--window", type=int, default=1000, help="raw publish: unconfirmed")
    parser.add_argument("--prefetch", type=int, default=2000, help="raw consume: basic.qos")
    parser.add_argument("--pika-messages", type=int, default=10_000, help="pika publish")
    parser.add_argument("--warm", type=int, default=50_000, help="rows read to warm Spark up")
    parser.add_argument("--warm-batch", type=int, default=2_000, help="batch size warming up")
    parser.add_argument("--only-sink", action="store_true", help="publishers and the sink")
    parser.add_argument("--rounds", type=int, default=3, help="sink rounds (kanin perf, sink)")
    compiled.add_option(parser)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    return parser.parse_args()


# -- raw clients ------------------------------------------------------------------------


async def raw_publish(url: str, queue: str, count: int, size: int, window: int) -> float:
    connection = await aio_pika.connect(url)
    channel = await connection.channel(publisher_confirms=True)
    body = b"x" * size
    started = time.monotonic()
    for first in range(0, count, window):
        sends = [
            channel.default_exchange.publish(
                aio_pika.Message(body, message_id=f"m{n}", delivery_mode=2), queue
            )
            for n in range(first, min(count, first + window))
        ]
        await asyncio.gather(*sends)
    elapsed = time.monotonic() - started
    await connection.close()
    return count / elapsed


async def raw_consume(url: str, queue: str, count: int, prefetch: int, stream: bool) -> float:
    connection = await aio_pika.connect(url)
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=prefetch)
    target = await channel.declare_queue(queue, passive=True)
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen = 0

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        nonlocal seen
        seen += 1
        if seen % 1000 == 0 or seen == count:
            await message.ack(multiple=True)
        if seen >= count and not done.done():
            done.set_result(None)

    started = time.monotonic()
    arguments = {"x-stream-offset": "first"} if stream else None
    await target.consume(on_message, arguments=arguments)
    await done
    elapsed = time.monotonic() - started
    await connection.close()
    return count / elapsed


def pika_consume(url: str, queue: str, count: int, prefetch: int, stream: bool) -> float:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    started = time.monotonic()
    arguments = {"x-stream-offset": "first"} if stream else None
    deliveries = channel.consume(queue, arguments=arguments)
    for seen, (method, _props, _body) in enumerate(deliveries, 1):
        if seen % 1000 == 0 or seen == count:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if seen >= count:
            break
    elapsed = time.monotonic() - started
    connection.close()  # not cancel: pika would reject what it holds, and a stream
    return count / elapsed  # answers a reject by closing the connection


def pika_publish(url: str, queue: str, count: int, size: int) -> float:
    """pika's BlockingConnection in confirm mode: basic_publish returns once confirmed."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    body = b"x" * size
    started = time.monotonic()
    for n in range(count):
        dedup = f"pika:{n}"
        props = pika.BasicProperties(
            delivery_mode=2, message_id=dedup, headers={"x-deduplication-header": dedup}
        )
        channel.basic_publish("", queue, body, props, mandatory=True)
    elapsed = time.monotonic() - started
    connection.close()
    return count / elapsed


def kanin_perf_publish(url: str, count: int, size: int, window: int) -> float:
    """`kanin perf`, one producer with a window of confirms, into a queue of its own."""
    command = [
        *(sys.executable, "-m", "kanin", "perf", "--uri", url, "-x", "1", "-y", "0"),
        *("--queue-prefix", "bench.spark.perf", "--durable", "--persistent"),
        *("--confirm", f"window:{window}", "--count", str(count), "-s", str(size)),
        *("--unique-header", "x-deduplication-header", "--delete-queues", "--json", "--quiet"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=True)
    return float(json.loads(done.stdout)["rates"]["confirm"])


def declare(url: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    channel.queue_declare(QUEUE, durable=True)
    channel.queue_declare(WARM_QUEUE, durable=True)
    channel.queue_declare(OUT, durable=True)
    connection.close()


# -- Spark ------------------------------------------------------------------------------


def spark_session() -> Any:
    os.environ.update(
        {
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    from pyspark.sql import SparkSession

    import kanin.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kanin-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kanin.spark.register(spark)
    return spark


def streaming_rates(query: Any, started: float, count: int) -> dict[str, Any]:
    elapsed = time.monotonic() - started
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    steady = batches[1:]
    steady_rows = sum(p["numInputRows"] for p in steady)
    steady_ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    return {
        "rows": sum(p["numInputRows"] for p in batches),
        "seconds": round(elapsed, 2),
        "rows_per_s": round(count / elapsed),
        "steady_rows_per_s": round(steady_rows / (steady_ms / 1000)) if steady_ms else None,
        "batches": [p["numInputRows"] for p in batches],
        "batch_ms": [p["durationMs"]["triggerExecution"] for p in batches],
    }


def warm_stream_read(spark: Any, url: str, args: argparse.Namespace, work: Path) -> None:
    """Stream mode over the stream's last --warm offsets, --warm-batch at a time, before
    the timed reads (see warm_queue_read)."""
    start = str(max(args.messages - args.warm, 0))  # a --messages below --warm: all of it
    spark_stream_read(spark, url, args, work / "warm", args.warm_batch, start)


def spark_stream_read(
    spark: Any,
    url: str,
    args: argparse.Namespace,
    work: Path,
    batch: int,
    starting_offsets: str = "first",
) -> dict[str, Any]:
    frame = (
        spark.readStream.format("kanin")
        .option("uri", url)
        .option("queue", STREAM)
        .option("startingOffsets", starting_offsets)
        .option("maxRecordsPerBatch", batch)
        .option("numPartitions", args.partitions)
        .load()
    )
    started = time.monotonic()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(work / f"stream-checkpoint-{batch}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return streaming_rates(query, started, args.messages)


def warm_queue_read(spark: Any, url: str, args: argparse.Namespace, work: Path) -> None:
    """Queue mode over --warm messages of a queue of their own, --warm-batch at a time,
    before the timed read. Spark's JVM compiles the code a path runs (per batch and per
    row) during the first queries of a session: the first queue-mode query of a session
    cost 107 µs of JVM CPU per row, the fourth 18.5 (same broker and build). A streaming
    job runs for hours, so the timed reads measure it warm; small batches make many."""
    asyncio.run(raw_publish(url, WARM_QUEUE, args.warm, args.size, args.window))
    spark_queue_read(spark, url, args, work / "warm", WARM_QUEUE, args.warm, args.warm_batch)


def spark_queue_read(
    spark: Any,
    url: str,
    args: argparse.Namespace,
    work: Path,
    queue: str = QUEUE,
    count: int | None = None,
    batch: int | None = None,
) -> dict[str, Any]:
    """A queue-mode query until it has read `count` (--messages) rows, `batch` (--batch) at
    a time."""
    count = count or args.messages
    frame = (
        spark.readStream.format("kanin")
        .option("uri", url)
        .option("queue", queue)
        .option("mode", "queue")
        .option("maxRecordsPerBatch", batch or args.batch)
        .load()
    )
    started = time.monotonic()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(work / "queue-checkpoint"))
        .start()
    )
    while sum(p["numInputRows"] for p in query.recentProgress) < count:
        if query.exception() is not None:
            raise RuntimeError(query.exception())
        time.sleep(0.05)
    rates = streaming_rates(query, started, count)
    query.stop()
    return rates


def spark_batch_read(spark: Any, url: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    reader = spark.read.format("kanin").option("uri", url).option("queue", STREAM)
    reader.option("numPartitions", args.partitions).load().write.format("noop").mode(
        "overwrite"
    ).save()
    elapsed = time.monotonic() - started
    return {"seconds": round(elapsed, 2), "rows_per_s": round(args.messages / elapsed)}


def spark_sink(spark: Any, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """A batch write of N rows, its Python workers already running (warm_sink)."""
    warm_sink(spark, url, args.size)
    elapsed = sink_write(spark, url, args.messages, args.size)
    return {"seconds": round(elapsed, 2), "rows_per_s": round(args.messages / elapsed)}


def warm_sink(spark: Any, url: str, size: int) -> None:
    """A small write into OUT, then purged: Spark stops a Python worker idle for a minute,
    and the publishers measured before the sink take longer than that, so without it each
    round would time two workers starting (about 1.5 s of CPU each, beside the broker)."""
    sink_write(spark, url, 2000, size)
    purge(url, OUT)


def sink_write(spark: Any, url: str, rows: int, size: int) -> float:
    """Seconds to write `rows` rows of `size`-byte bodies into OUT through the sink."""
    frame = spark.range(0, rows, 1, 2).selectExpr(f"repeat('x', {size}) AS body")
    started = time.monotonic()
    frame.write.format("kanin").option("uri", url).option("queue", OUT).mode("append").save()
    return time.monotonic() - started


# -- the run ----------------------------------------------------------------------------


def publishers(url: str, args: argparse.Namespace) -> dict[str, int]:
    """The plain-client publishers the sink is compared with (bench.spark.out is drained
    after pika, so every run publishes into an empty queue)."""
    n, size = args.messages, args.size
    rates = {"kanin_perf_publish": kanin_perf_publish(url, n, size, args.window)}
    rates["pika_publish"] = pika_publish(url, OUT, args.pika_messages, size)
    purge(url, OUT)
    return {key: round(value) for key, value in rates.items()}


def purge(url: str, queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_purge(queue)
    connection.close()


def sink_round(
    spark: Any, url: str, args: argparse.Namespace, with_aio_pika: bool = False
) -> dict[str, Any]:
    """One round: the plain-client publishers, then the sink, into the emptied OUT."""
    figures: dict[str, Any] = {"load": round(os.getloadavg()[0], 1)}
    figures.update(publishers(url, args))
    if with_aio_pika:
        figures["aio_pika_publish"] = round(
            asyncio.run(raw_publish(url, OUT, args.messages, args.size, args.window))
        )
        purge(url, OUT)
    figures["spark_sink"] = spark_sink(spark, url, args)["rows_per_s"]
    purge(url, OUT)
    return figures


def run_sink_rounds(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    kanin = Kanin(work / "kanin")
    kanin.start()
    url = kanin.uri
    rounds: list[dict[str, Any]] = []
    try:
        declare(url)
        spark = spark_session()
        try:
            for _ in range(args.rounds):
                rounds.append(sink_round(spark, url, args, with_aio_pika=True))
        finally:
            spark.stop()
    finally:
        kanin.stop()
    return {"rounds": rounds}


def render_sink(results: dict[str, Any]) -> str:
    args = results["args"]
    lines = [
        "# kanin.spark's sink beside plain-client publishers",
        "",
        f"Command: `{results['command']}`",
        "",
        f"{args['messages']:,} persistent messages of {args['size']} bytes into a classic "
        f"queue on one `kanin server` (pika: {args['pika_messages']:,}); {results['machine']}. "
        "Rows/s, one line per round (each round runs them one after another).",
        "",
        "| round | load | kanin perf, window | pika, confirm each | aio-pika, window | "
        "Spark sink, 2 partitions | sink ÷ best plain client |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for number, r in enumerate(results["rounds"], 1):
        best = max(r["kanin_perf_publish"], r["pika_publish"], r["aio_pika_publish"])
        lines.append(
            f"| {number} | {r['load']} | {r['kanin_perf_publish']:,} | {r['pika_publish']:,} | "
            f"{r['aio_pika_publish']:,} | {r['spark_sink']:,} | {r['spark_sink'] / best:.2f} |"
        )
    return "\n".join([*lines, ""])


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    kanin = Kanin(work / "kanin")
    kanin.start()
    url = kanin.uri
    results: dict[str, Any] = {}
    try:
        declare(url)
        n, size = args.messages, args.size
        raw = results["raw"] = {}
        raw["aio_pika_publish_stream"] = asyncio.run(raw_publish(url, STREAM, n, size, args.window))
        raw["aio_pika_consume_stream"] = asyncio.run(
            raw_consume(url, STREAM, n, args.prefetch, True)
        )
        raw["pika_consume_stream"] = pika_consume(url, STREAM, n, args.prefetch, True)
        raw["aio_pika_publish_queue"] = asyncio.run(raw_publish(url, QUEUE, n, size, args.window))
        raw["aio_pika_consume_queue"] = asyncio.run(
            raw_consume(url, QUEUE, n, args.prefetch, False)
        )
        asyncio.run(raw_publish(url, QUEUE, n, size, args.window))  # again, for pika
        raw["pika_consume_queue"] = pika_consume(url, QUEUE, n, args.prefetch, False)
        asyncio.run(raw_publish(url, QUEUE, n, size, args.window))  # again, for Spark to read
        raw = {key: round(value) for key, value in raw.items()}
        results["raw"] = raw
        spark = spark_session()
        try:
            warm_stream_read(spark, url, args, work)
            results["spark_stream_read"] = spark_stream_read(spark, url, args, work, args.batch)
            results["spark_stream_read_big"] = spark_stream_read(
                spark, url, args, work, 5 * args.batch
            )
            results["spark_batch_read"] = spark_batch_read(spark, url, args)
            warm_queue_read(spark, url, args, work)
            results["spark_queue_read"] = spark_queue_read(spark, url, args, work)
            # The publishers right before each sink write, beside the same Spark session:
            # a baseline measured minutes earlier would carry the machine's drift since.
            results["sink_rounds"] = [sink_round(spark, url, args) for _ in range(args.rounds)]
        finally:
            spark.stop()
    finally:
        kanin.stop()
    return results


def sink_summary(rounds: list[dict[str, Any]], aio_pika: int) -> dict[str, Any]:
    """Medians over the sink rounds; each round's sink over that round's fastest plain
    publisher (aio-pika's, measured once, counts in every round)."""
    ratios = [
        r["spark_sink"] / max(r["kanin_perf_publish"], r["pika_publish"], aio_pika) for r in rounds
    ]
    return {
        "kanin_perf": round(statistics.median(r["kanin_perf_publish"] for r in rounds)),
        "pika": round(statistics.median(r["pika_publish"] for r in rounds)),
        "sink": round(statistics.median(r["spark_sink"] for r in rounds)),
        "ratio": statistics.median(ratios),
        "perf_rounds": [r["kanin_perf_publish"] for r in rounds],
        "sink_rounds": [r["spark_sink"] for r in rounds],
        "ratios": [round(ratio, 2) for ratio in ratios],
    }


def render(results: dict[str, Any]) -> str:
    args = results["args"]
    raw = results["raw"]
    sink = sink_summary(results["sink_rounds"], raw["aio_pika_publish_queue"])
    rows = [
        ("raw aio-pika publish, confirms (stream)", raw["aio_pika_publish_stream"], None, ""),
        ("raw aio-pika publish, confirms (classic queue)", raw["aio_pika_publish_queue"], None, ""),
        ("raw aio-pika consume (stream, from first)", raw["aio_pika_consume_stream"], None, ""),
        ("raw pika consume (stream, from first)", raw["pika_consume_stream"], None, ""),
        ("raw aio-pika consume (classic queue)", raw["aio_pika_consume_queue"], None, ""),
        ("raw pika consume (classic queue)", raw["pika_consume_queue"], None, ""),
        (
            "kanin perf publish, confirm window (classic queue), median",
            sink["kanin_perf"],
            None,
            "",
        ),
        ("pika publish, confirm each (classic queue), median", sink["pika"], None, ""),
    ]
    stream = results["spark_stream_read"]
    queue = results["spark_queue_read"]
    best_stream_client = max(raw["aio_pika_consume_stream"], raw["pika_consume_stream"])
    best_queue_client = max(raw["aio_pika_consume_queue"], raw["pika_consume_queue"])
    spark_rows = [
        (
            "Spark streaming read, stream mode",
            stream,
            best_stream_client,
            f"{args['batch']} offsets/batch, {args['partitions']} partitions",
        ),
        (
            "Spark streaming read, stream mode",
            results["spark_stream_read_big"],
            best_stream_client,
            f"{5 * args['batch']} offsets/batch, {args['partitions']} partitions",
        ),
        (
            "Spark batch read of the stream",
            results["spark_batch_read"],
            best_stream_client,
            f"{args['partitions']} partitions",
        ),
        (
            "Spark streaming read, queue mode",
            queue,
            best_queue_client,
            f"{args['batch']} messages/batch, 1 task",
        ),
    ]
    lines = [
        "# kanin.spark beside the raw clients",
        "",
        f"Command: `{results['command']}`",
        "",
        f"{args['messages']:,} messages of {args['size']} bytes on one `kanin server`; "
        f"{results['machine']}. bench/spark.py's docstring says what each figure is.",
        "",
        "| path | rows/s | steady rows/s | ÷ raw client | batches |",
        "|---|---:|---:|---:|---|",
    ]
    for name, rate, _raw, _note in rows:
        lines.append(f"| {name} | {rate:,} | | | |")
    for name, figures, client, note in spark_rows:
        steady = figures.get("steady_rows_per_s")
        shown = f"{steady:,}" if steady else ""
        ratio = (steady or figures["rows_per_s"]) / client
        lines.append(f"| {name} | {figures['rows_per_s']:,} | {shown} | {ratio:.2f} | {note} |")
    lines.append(
        f"| Spark batch write through the sink, median | {sink['sink']:,} | | "
        f"{sink['ratio']:.2f} | 2 partitions, on a plain socket, confirm window 2000 |"
    )
    lines += [
        "",
        "÷ raw client: the steady rate (or the whole rate, for batch jobs) over the fastest raw",
        "client doing the same: consuming the stream, consuming the queue, publishing to a queue.",
        "",
        f"Stream mode batches: {stream['batches']} rows, {stream['batch_ms']} ms.",
        f"Stream mode, bigger batches: {results['spark_stream_read_big']['batches']} rows, "
        f"{results['spark_stream_read_big']['batch_ms']} ms.",
        f"Queue mode batches: {queue['batches']} rows, {queue['batch_ms']} ms.",
        f"Sink rounds (each: kanin perf, pika, then the sink): kanin perf {sink['perf_rounds']},"
        f" sink {sink['sink_rounds']} rows/s; sink ÷ the round's fastest publisher "
        f"{sink['ratios']}, the median of which is the table's.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kanin-bench-spark-") as work:
        if args.compiled:
            compiled.use_for_every_broker(Path(work))
        results = run_sink_rounds(args, Path(work)) if args.only_sink else run(args, Path(work))
    results["args"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    results["command"] = "python " + " ".join(["bench/spark.py", *sys.argv[1:]])
    load = os.getloadavg()[0]
    results["machine"] = (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {load:.1f} at the end, the broker "
        f"{compiled.BUILD_NAME if args.compiled else 'pure Python'}"
    )
    if args.only_sink:
        report = write_results(args.out, "spark-sink", results, render_sink)
    else:
        report = write_results(args.out, "spark", results, render)
    print(report.read_text())


if __name__ == "__main__":
    main()
