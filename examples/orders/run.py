"""Run the order pipeline end to end on this machine and print the delivery audit.

    python examples/orders/run.py                       # 4 producers x 300 orders, ~1 min
    python examples/orders/run.py --orders 50 --rate 20  # quicker

Starts a kanin broker in this process (or uses --url), a local Spark session, the
streaming job, the rating service and the order service; see README.md beside this file.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY_SRC = HERE.parent.parent / "src"


def python_path() -> str:
    """This example's package and, when run from a checkout, kanin's sources: on the path of
    this process and of Spark's Python workers (which read the kanin stream)."""
    entries = [str(HERE)]
    if (REPOSITORY_SRC / "kanin").is_dir():
        entries.append(str(REPOSITORY_SRC))
    for entry in reversed(entries):
        sys.path.insert(0, entry)
    return os.pathsep.join([*entries, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


os.environ.update(
    {
        "PYTHONPATH": python_path(),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
    }
)

from orders.audit import format_report  # noqa: E402
from orders.pipeline import Settings, run_pipeline  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402


@contextmanager
def broker_url(given: str | None, work: Path) -> Iterator[str]:
    if given:
        yield given
        return
    from kanin.testing.embedded import running_broker

    with running_broker(data_dir=work / "kanin") as broker:
        yield broker.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=300, help="orders per producer")
    parser.add_argument("--rate", type=float, default=5.0, help="orders a second, per producer")
    parser.add_argument("--reminder-delay", type=float, default=10.0, help="seconds")
    parser.add_argument("--url", help="a running broker (default: start kanin in-process)")
    parser.add_argument("--work", type=Path, help="folder for outputs (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kanin-orders-"))
    work.mkdir(parents=True, exist_ok=True)
    settings = Settings(orders=args.orders, rate=args.rate, reminder_delay_s=args.reminder_delay)

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kanin-orders")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with broker_url(args.url, work) as url:
            outcome = run_pipeline(spark, url, work, settings)
    finally:
        spark.stop()

    print(f"\noutputs in {work}")
    print("\nrevenue per minute (each order id once):")
    for row in outcome.revenue:
        print(
            f"  {row['minute']:%Y-%m-%d %H:%M}  {row['revenue']:>10.2f}  {row['orders']:>5} orders"
        )
    injected = outcome.injected
    print(
        f"\ninjected: double-sent {injected.double_sent}, never sent {injected.never_sent}, "
        f"uploaded late {injected.uploaded_late}"
    )
    print("\ndelivery audit:")
    print(format_report(outcome.audit))


if __name__ == "__main__":
    main()
