"""`kanin server` and friends."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import signal
import socket
import sys
from pathlib import Path

from kanin import __version__
from kanin.cli.layers import Layered, SettingError, layer
from kanin.cli.tls_options import add_tls_options, tls_problem, tls_settings
from kanin.config import BrokerConfig, UserSpec, default_memory_high_watermark
from kanin.errors import StartupError
from kanin.native import build_name


class OptionError(StartupError):
    """A value `kanin server` cannot use, with the option's dest, so the message can say
    where the value came from (command line, environment, config file)."""

    def __init__(self, dest: str, message: str) -> None:
        super().__init__(message)
        self.dest = dest


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kanin", description="An AMQP 0-9-1 message broker.")
    parser.add_argument(
        "--version", action="version", version=f"kanin {__version__} ({build_name()})"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser(
        "server",
        help="run the broker",
        description="Run the broker. Every option can also be set in the environment "
        "(--mgmt-port: KANIN_MGMT_PORT) or in a TOML config file (mgmt_port = 15672); the "
        "command line wins over the environment, which wins over the file.",
    )
    server.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML file of settings, keys named as the options with underscores "
        "(default: $KANIN_CONFIG, else ./kanin.toml if it exists)",
    )
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
    server.add_argument(
        "--mgmt-port",
        type=int,
        default=15672,
        help="port of the management HTTP API, on the --bind address(es) (default 15672; "
        "0 turns it off)",
    )
    server.add_argument(
        "--prometheus-port",
        type=int,
        default=15692,
        help="port of the Prometheus metrics (/metrics), on the --bind address(es) "
        "(default 15692; 0 turns them off)",
    )
    add_tls_options(server)
    server.add_argument("--heartbeat", type=int, default=60, help="heartbeat seconds proposed")
    server.add_argument(
        "--queue-memory-mb",
        type=float,
        default=4.0,
        help="MiB of ready message bodies each queue keeps in memory; a durable queue keeps "
        "persistent messages beyond that on disk only (default 4)",
    )
    server.add_argument(
        "--segment-mb",
        type=float,
        default=64.0,
        help="MiB after which the message log starts a new segment file (default 64)",
    )
    server.add_argument(
        "--memory-high-watermark-mb",
        type=float,
        default=None,
        help="MiB of memory above which publishers are blocked: messages held, as counted, "
        "or the process's resident memory (default 40%% of RAM, as RabbitMQ's 0.4)",
    )
    server.add_argument(
        "--consumer-timeout-ms",
        type=int,
        default=30 * 60 * 1000,
        help="a delivery not acknowledged within this many ms closes its channel and goes "
        "back to its queue, as RabbitMQ's consumer_timeout; 0 turns it off (default 30 "
        "minutes; a queue's x-consumer-timeout argument overrides it)",
    )
    server.add_argument(
        "--stats-file",
        type=Path,
        default=None,
        help="write store and connection counters to this JSON file every second",
    )
    server.add_argument(
        "--force-recovery",
        action="store_true",
        help="start despite damage kanin cannot repair without losing data: (1) segment "
        "files of the message log are missing: the persistent messages they held are lost "
        "(each missing file is logged at error level); (2) the definitions file is missing "
        "while the message store holds messages: the broker starts with no durable "
        "exchanges, queues or bindings and the default users, and keeps the stored messages "
        "on disk, untouched, listed in unknown-queue-messages.json in the data directory. "
        "Without it, kanin refuses to start in both cases",
    )
    server.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    server.add_argument(
        "--default-user",
        default=None,
        help="on first start (a new data directory), create this administrator with full "
        "permissions on the default vhost instead of guest (as RABBITMQ_DEFAULT_USER)",
    )
    server.add_argument(
        "--default-pass",
        default=None,
        help="its password (default guest); better given as KANIN_DEFAULT_PASS or in the "
        "config file: other users of the machine can read a command line",
    )
    server.set_defaults(usage_error=server.error, options_parser=server)
    commands.add_parser("ctl", help="manage a running broker over its HTTP API", add_help=False)
    commands.add_parser("perf", help="load generator for AMQP brokers", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["perf"]:  # kanin.perf parses its own options
        from kanin.perf import main as perf_main

        return perf_main(argv[1:])
    if argv[:1] == ["ctl"]:  # so does kanin ctl
        from kanin.cli.ctl import main as ctl_main

        return ctl_main(argv[1:])
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command != "server":
        parser.error(f"unknown command {args.command!r}")
    if unknown:  # the server's own usage, not the top-level one: that is what was mistyped
        args.usage_error(f"unrecognized arguments: {' '.join(unknown)}")
    layered: Layered | None = None
    try:
        layered = layer(parser, args.options_parser, argv, args, os.environ)
        args = layered.values
        config = server_config(args)
    except OptionError as exc:
        origin = layered.origin_note(exc.dest) if layered is not None else ""
        print(f"kanin: {exc}{origin}", file=sys.stderr)
        return 2
    except (SettingError, StartupError, ValueError) as exc:
        print(f"kanin: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if layered is not None and layered.config_file is not None:
        logging.getLogger("kanin").info("settings from %s", layered.config_file.resolve())
    return run_server(config)


def server_config(args: argparse.Namespace) -> BrokerConfig:
    """The broker's configuration from `kanin server` options; OptionError naming the
    option for a value the broker cannot use (checked before anything is touched)."""
    for dest in ("port", "mgmt_port", "prometheus_port", "tls_port"):
        port = getattr(args, dest)
        _check(dest, 0 <= port <= 65535, "must be 0..65535", port)
    # A short in connection.tune.
    _check("heartbeat", 0 <= args.heartbeat <= 65535, "must be 0..65535 seconds", args.heartbeat)
    queue_mb = args.queue_memory_mb
    good_queue_mb = math.isfinite(queue_mb) and queue_mb >= 0
    _check("queue_memory_mb", good_queue_mb, "must be a number >= 0", queue_mb)
    segment_mb = args.segment_mb
    good_segment = math.isfinite(segment_mb) and 0 < segment_mb <= 2048
    _check("segment_mb", good_segment, "must be a number in (0, 2048]", segment_mb)
    watermark = args.memory_high_watermark_mb
    if watermark is not None:
        good_watermark = math.isfinite(watermark) and watermark > 0
        _check("memory_high_watermark_mb", good_watermark, "must be a number > 0", watermark)
    timeout = args.consumer_timeout_ms
    _check("consumer_timeout_ms", timeout >= 0, "must be >= 0", timeout)
    if args.bind is not None:
        _check_bind(args.bind)
    if args.stats_file is not None:
        _check_stats_file(args.stats_file)
    if (problem := tls_problem(args)) is not None:
        raise OptionError(*problem)
    return BrokerConfig(
        port=args.port,
        bind=args.bind,
        mgmt_port=args.mgmt_port or None,
        prometheus_port=args.prometheus_port or None,
        data_dir=args.data_dir,
        heartbeat_s=args.heartbeat,
        stats_file=args.stats_file,
        queue_memory_budget_bytes=int(args.queue_memory_mb * 1024 * 1024),
        segment_bytes=int(args.segment_mb * 1024 * 1024),
        force_recovery=args.force_recovery,
        memory_high_watermark_bytes=_watermark_bytes(args.memory_high_watermark_mb),
        consumer_timeout_ms=args.consumer_timeout_ms or None,
        default_users=_first_user(args.default_user, args.default_pass),
        **tls_settings(args),
    )


def _check(dest: str, good: bool, requirement: str, value: object) -> None:
    if not good:
        raise OptionError(dest, f"--{dest.replace('_', '-')} {requirement}, got {value}")


def _first_user(name: str | None, password: str | None) -> tuple[UserSpec, ...]:
    """The administrator a new data directory starts with: guest/guest unless named, as
    RabbitMQ's default_user and default_pass. A name without a password is refused rather
    than given guest's well-known one."""
    if name is None and password is None:
        return BrokerConfig().default_users
    if name is not None and password is None:
        raise OptionError(
            "default_user",
            "--default-user needs a password too: --default-pass, KANIN_DEFAULT_PASS or "
            "default_pass in the config file",
        )
    _check("default_user", name != "", "must not be empty", "''")
    _check("default_pass", password != "", "must not be empty", "''")
    assert password is not None
    return (UserSpec(name or "guest", password),)


def _check_bind(address: str) -> None:
    try:
        socket.getaddrinfo(address, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OptionError(
            "bind", f"--bind {address}: not an address, and no host of that name ({exc.strerror})"
        ) from None


def _check_stats_file(path: Path) -> None:
    """The stats file is written as FILE.tmp, then renamed over FILE: try the first half now,
    rather than fail a second after start-up on a path that could never work."""
    if path.is_dir():
        raise OptionError("stats_file", f"--stats-file {path}: is a directory")
    temporary = path.with_suffix(".tmp")
    existed = temporary.exists()
    try:
        with open(temporary, "a"):
            pass
    except OSError as exc:
        raise OptionError(
            "stats_file", f"--stats-file {path}: cannot write {temporary}: {exc.strerror}"
        ) from None
    if not existed:
        temporary.unlink(missing_ok=True)


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
    except StartupError as exc:
        print(f"kanin: cannot start: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kanin: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(config: BrokerConfig) -> None:
    from kanin.server.app import BrokerServer  # here: `kanin ctl` need not load the broker

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
