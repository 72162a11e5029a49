"""`kanin server` and friends."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import signal
import socket
import sys
from pathlib import Path

from kanin import __version__
from kanin.config import (
    CERT_LOGIN_FROM,
    TLS_VERIFY_MODES,
    BrokerConfig,
    default_memory_high_watermark,
)
from kanin.errors import StartupError
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
    _add_tls_options(server)
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
    server.set_defaults(usage_error=server.error)
    commands.add_parser("perf", help="load generator for AMQP brokers", add_help=False)
    return parser


def _add_tls_options(server: argparse.ArgumentParser) -> None:
    """RabbitMQ's listeners.ssl and ssl_options (https://www.rabbitmq.com/ssl.html)."""
    tls = server.add_argument_group(
        "TLS",
        "AMQP over TLS (amqps) listens beside the plain port when --tls-cert and "
        "--tls-key are given",
    )
    tls.add_argument(
        "--tls-port",
        type=int,
        metavar="PORT",
        default=5671,
        help="amqps port, on the --bind address(es) (default 5671, as RabbitMQ's "
        "listeners.ssl.default)",
    )
    tls.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="the server's certificate (chain), PEM"
    )
    tls.add_argument(
        "--tls-key", type=Path, metavar="FILE", help="its private key, PEM, unencrypted"
    )
    tls.add_argument(
        "--tls-ca",
        type=Path,
        metavar="FILE",
        help="CA bundle (PEM) client certificates are verified against (ssl_options.cacertfile)",
    )
    tls.add_argument(
        "--tls-verify",
        choices=TLS_VERIFY_MODES,
        default="none",
        help="peer: ask clients for a certificate and refuse one that does not verify "
        "(ssl_options.verify = verify_peer; needs --tls-ca); none: ask for none (default)",
    )
    tls.add_argument(
        "--tls-fail-if-no-peer-cert",
        action="store_true",
        help="with --tls-verify peer, refuse clients that send no certificate "
        "(ssl_options.fail_if_no_peer_cert)",
    )
    tls.add_argument(
        "--tls-cert-login-from",
        choices=CERT_LOGIN_FROM,
        default="distinguished_name",
        help="the user name the EXTERNAL mechanism takes from a verified client certificate: "
        "its subject's distinguished name, as RabbitMQ does by default (openssl x509 -noout "
        "-subject -nameopt RFC2253 shows it), or its common name (CN) (ssl_cert_login_from)",
    )
    tls.add_argument(
        "--mgmt-tls",
        action="store_true",
        help="serve the management API over HTTPS on --mgmt-port, with --tls-cert and "
        "--tls-key (RabbitMQ's management.ssl listener)",
    )
    tls.add_argument(
        "--prometheus-tls",
        action="store_true",
        help="serve the Prometheus metrics over HTTPS on --prometheus-port, with --tls-cert "
        "and --tls-key",
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["perf"]:  # kanin.perf parses its own options
        from kanin.perf import main as perf_main

        return perf_main(argv[1:])
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command != "server":
        parser.error(f"unknown command {args.command!r}")
    if unknown:  # the server's own usage, not the top-level one: that is what was mistyped
        args.usage_error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        config = server_config(args)
    except (StartupError, ValueError) as exc:
        print(f"kanin: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return run_server(config)


def server_config(args: argparse.Namespace) -> BrokerConfig:
    """The broker's configuration from `kanin server` options; StartupError naming the
    option for a value the broker cannot use (checked before anything is touched)."""
    if not 0 <= args.port <= 65535:
        raise StartupError(f"--port must be 0..65535, got {args.port}")
    if not 0 <= args.mgmt_port <= 65535:
        raise StartupError(f"--mgmt-port must be 0..65535, got {args.mgmt_port}")
    if not 0 <= args.prometheus_port <= 65535:
        raise StartupError(f"--prometheus-port must be 0..65535, got {args.prometheus_port}")
    if not 0 <= args.heartbeat <= 65535:  # a short in connection.tune
        raise StartupError(f"--heartbeat must be 0..65535 seconds, got {args.heartbeat}")
    if not (math.isfinite(args.queue_memory_mb) and args.queue_memory_mb >= 0):
        raise StartupError(f"--queue-memory-mb must be a number >= 0, got {args.queue_memory_mb}")
    if not (math.isfinite(args.segment_mb) and 0 < args.segment_mb <= 2048):
        raise StartupError(f"--segment-mb must be a number in (0, 2048], got {args.segment_mb}")
    watermark = args.memory_high_watermark_mb
    if watermark is not None and not (math.isfinite(watermark) and watermark > 0):
        raise StartupError(f"--memory-high-watermark-mb must be a number > 0, got {watermark}")
    if args.consumer_timeout_ms < 0:
        raise StartupError(f"--consumer-timeout-ms must be >= 0, got {args.consumer_timeout_ms}")
    if args.bind is not None:
        _check_bind(args.bind)
    if args.stats_file is not None:
        _check_stats_file(args.stats_file)
    _check_tls_options(args)
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
        tls_port=args.tls_port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
        tls_verify=args.tls_verify,
        tls_fail_if_no_peer_cert=args.tls_fail_if_no_peer_cert,
        tls_cert_login_from=args.tls_cert_login_from,
        mgmt_tls=args.mgmt_tls,
        prometheus_tls=args.prometheus_tls,
    )


def _check_tls_options(args: argparse.Namespace) -> None:
    """Options that need others, named as given (the files themselves are read at start)."""
    if not 0 <= args.tls_port <= 65535:
        raise StartupError(f"--tls-port must be 0..65535, got {args.tls_port}")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise StartupError("--tls-cert and --tls-key go together: give both or neither")
    needs = [
        (args.tls_verify == "peer" and args.tls_ca is None, "--tls-verify peer needs --tls-ca"),
        (
            args.tls_fail_if_no_peer_cert and args.tls_verify != "peer",
            "--tls-fail-if-no-peer-cert needs --tls-verify peer",
        ),
        (args.mgmt_tls and args.tls_cert is None, "--mgmt-tls needs --tls-cert and --tls-key"),
        (
            args.prometheus_tls and args.tls_cert is None,
            "--prometheus-tls needs --tls-cert and --tls-key",
        ),
    ]
    for missing, problem in needs:
        if missing:
            raise StartupError(problem)


def _check_bind(address: str) -> None:
    try:
        socket.getaddrinfo(address, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(
            f"--bind {address}: not an address, and no host of that name ({exc.strerror})"
        ) from None


def _check_stats_file(path: Path) -> None:
    """The stats file is written as FILE.tmp, then renamed over FILE: try the first half now,
    rather than fail a second after start-up on a path that could never work."""
    if path.is_dir():
        raise StartupError(f"--stats-file {path}: is a directory")
    temporary = path.with_suffix(".tmp")
    existed = temporary.exists()
    try:
        with open(temporary, "a"):
            pass
    except OSError as exc:
        raise StartupError(
            f"--stats-file {path}: cannot write {temporary}: {exc.strerror}"
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
