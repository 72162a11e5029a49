"""`kanin server` and friends."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from kanin import __version__
from kanin.config import BrokerConfig, default_memory_high_watermark
from kanin.server.app import BrokerServer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kanin", description="An AMQP 0-9-1 message broker.")
    parser.add_argument("--version", action="version", version=f"kanin {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("server", help="run the broker")
    server.add_argument("--port", type=int, default=5672, help="AMQP port (default 5672)")
    server.add_argument(
        "--bind",
        default=None,
        help="address to listen on (default: every interface, IPv4 and IPv6)",
    )
    server.add_argument(
        "--data-dir",
        type=Path,
        default=Path("kanin-data"),
        help="where kanin keeps its data (default ./kanin-data)",
    )
    server.add_argument("--heartbeat", type=int, default=60, help="heartbeat seconds proposed")
    server.add_argument(
        "--queue-memory-mb",
        type=float,
        default=4.0,
        help="MiB of ready message bodies each queue keeps in memory; a durable queue keeps "
        "persistent messages beyond that on disk only (default 4)",
    )
    server.add_argument(
        "--memory-high-watermark-mb",
        type=float,
        default=None,
        help="MiB of memory above which publishers are blocked: messages held, as counted, "
        "or the process's resident memory (default 40%% of RAM, as RabbitMQ's 0.4)",
    )
    server.add_argument(
        "--stats-file",
        type=Path,
        default=None,
        help="write store and connection counters to this JSON file every second",
    )
    server.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    commands.add_parser("perf", help="load generator for AMQP brokers", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["perf"]:  # kanin.perf parses its own options
        from kanin.perf import main as perf_main

        return perf_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "server":
        try:
            config = BrokerConfig(
                port=args.port,
                bind=args.bind,
                data_dir=args.data_dir,
                heartbeat_s=args.heartbeat,
                stats_file=args.stats_file,
                queue_memory_budget_bytes=int(args.queue_memory_mb * 1024 * 1024),
                memory_high_watermark_bytes=_watermark_bytes(args.memory_high_watermark_mb),
            )
        except ValueError as exc:
            print(f"kanin: {exc}", file=sys.stderr)
            return 2
        logging.basicConfig(
            level=args.log_level.upper(),
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        return run_server(config)
    return 2


def _watermark_bytes(megabytes: float | None) -> int:
    """The watermark given in MiB, else the default: 0.4 of RAM."""
    if megabytes is None:
        return default_memory_high_watermark()
    return int(megabytes * 1024 * 1024)


def run_server(config: BrokerConfig) -> int:
    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # uvloop does not build on every platform; asyncio still works
        pass
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_serve(config))
    except OSError as exc:
        print(f"kanin: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(config: BrokerConfig) -> None:
    # Handlers first: a SIGTERM during recovery or listening must still stop cleanly.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = BrokerServer(config)
    await server.start()
    await stop.wait()
    logging.getLogger("kanin").info("shutting down")
    await server.stop()


if __name__ == "__main__":
    sys.exit(main())
