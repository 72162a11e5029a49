"""kanin perf's command line, and the frozen options every process receives."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from kanin.perf.wire import STAMP_SIZE

QueueArg = tuple[str, bool | int | str]


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    user: str
    password: str
    vhost: str


@dataclass(frozen=True)
class ConfirmMode:
    """none: no confirms; batch: publish `size`, wait for all; window: at most `size` sent
    and not yet confirmed."""

    kind: str  # "none" | "batch" | "window"
    size: int = 0


@dataclass(frozen=True)
class PerfOptions:
    endpoint: Endpoint
    producers: int = 1
    consumers: int = 1
    producer_channels: int = 1
    consumer_channels: int = 1
    queues: int = 1
    queue_prefix: str = "kanin-perf-"
    queue_args: tuple[QueueArg, ...] = ()
    exchange: str = ""
    exchange_type: str = "direct"
    exchange_args: tuple[QueueArg, ...] = ()
    unique_header: str = ""  # each message carries this header with a value of its own
    size: int = 64
    persistent: bool = False
    durable: bool = False
    confirm: ConfirmMode = ConfirmMode("none")
    ack: str = "auto"  # "auto" | "manual"
    prefetch: int = 0
    multi_ack_every: int = 1
    rate: float = 0.0  # messages per second per producer channel; 0 = unlimited
    duration_s: float = 10.0
    count: int = 0  # messages per producer channel; 0 = run for duration_s
    processes: int = 0  # 0 = automatic
    batch: int = 64  # messages per socket write when unthrottled
    purge: bool = False
    delete_queues: bool = False
    confirm_timeout_s: float = 10.0
    drain_timeout_s: float = 10.0
    json: bool = False
    quiet: bool = False
    self_test: bool = False

    @property
    def queue_names(self) -> list[str]:
        return [f"{self.queue_prefix}{index}" for index in range(self.queues)]

    @property
    def publisher_streams(self) -> int:
        return self.producers * self.producer_channels


def parse_uri(uri: str) -> Endpoint:
    parsed = urlparse(uri)
    if parsed.scheme != "amqp":
        raise ValueError(f"only amqp:// URIs are supported, got {uri!r}")
    path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
    return Endpoint(
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or 5672,
        user=unquote(parsed.username or "guest"),
        password=unquote(parsed.password or "guest"),
        vhost=unquote(path) if path else "/",
    )


def parse_confirm(text: str) -> ConfirmMode:
    kind, _, number = text.partition(":")
    if kind == "none" and not number:
        return ConfirmMode("none")
    if kind == "each" and not number:
        return ConfirmMode("batch", 1)
    if kind in ("batch", "window") and number.isdigit() and int(number) > 0:
        return ConfirmMode(kind, int(number))
    raise argparse.ArgumentTypeError(
        f"--confirm takes none, each, batch:N or window:N (N > 0), got {text!r}"
    )


def parse_queue_arg(text: str) -> QueueArg:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--queue-arg takes KEY=VALUE, got {text!r}")
    if raw in ("true", "false"):
        return key, raw == "true"
    try:
        return key, int(raw)
    except ValueError:
        return key, raw


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kanin perf",
        description="Load generator for any AMQP 0-9-1 broker (kanin, RabbitMQ, ...).",
    )
    add = p.add_argument
    add(
        "--uri",
        default="amqp://guest:guest@127.0.0.1:5672/%2F",
        help="broker to load (default %(default)s)",
    )
    add("-x", "--producers", type=int, default=1, help="producer connections")
    add("-y", "--consumers", type=int, default=1, help="consumer connections")
    add("--producer-channels", type=int, default=1, help="publishing channels per producer")
    add("--consumer-channels", type=int, default=1, help="consuming channels per consumer")
    add("--queues", type=int, default=1, help="queues; producer/consumer i uses queue i mod N")
    add("--queue-prefix", default="kanin-perf-", help="queue names are PREFIX0, PREFIX1, ...")
    add("--queue-arg", type=parse_queue_arg, action="append", default=[], metavar="K=V")
    add("--exchange", default="", help="publish via this exchange (declared, bound)")
    add("--exchange-type", default="direct", help="the exchange's type (default direct)")
    add("--exchange-arg", type=parse_queue_arg, action="append", default=[], metavar="K=V")
    add(
        "--unique-header",
        default="",
        metavar="NAME",
        help="each message carries header NAME with a value no other message has "
        "(e.g. x-deduplication-header)",
    )
    add("-s", "--size", type=int, default=64, help=f"message bytes (>= {STAMP_SIZE})")
    add("--persistent", action="store_true", help="delivery-mode 2")
    add("--durable", action="store_true", help="declare durable queues (and exchange)")
    add(
        "--confirm",
        type=parse_confirm,
        default=ConfirmMode("none"),
        help="none | each | batch:N | window:N (N unconfirmed at most; default none)",
    )
    add("--ack", choices=["auto", "manual"], default="auto", help="consumer acknowledgements")
    add("--prefetch", type=int, default=0, help="basic.qos prefetch per consumer (0 = none)")
    add("--multi-ack-every", type=int, default=1, help="manual ack: one multiple ack per N")
    add("--rate", type=float, default=0.0, help="msgs/s per producer channel (0 = unlimited)")
    add("--duration", type=float, default=10.0, help="seconds of publishing")
    add("--count", type=int, default=0, help="messages per producer channel (overrides time)")
    add("--processes", type=int, default=0, help="worker processes (0 = automatic)")
    add("--batch", type=int, default=64, help="messages per socket write (default 64)")
    add("--purge", action="store_true", help="purge the queues before the run")
    add("--delete-queues", action="store_true", help="delete the queues after the run")
    add("--confirm-timeout", type=float, default=10.0, help="seconds to wait for confirms")
    add(
        "--drain-timeout",
        type=float,
        default=10.0,
        help="seconds without consumer progress before giving up on missing messages",
    )
    add("--json", action="store_true", help="print the result as JSON on stdout")
    add("--quiet", action="store_true", help="no live progress line")
    add(
        "--self-test",
        action="store_true",
        help="run against a built-in sink broker to show perf's own ceiling (ignores --uri)",
    )
    return p


def options_from_argv(argv: list[str]) -> PerfOptions:
    parser = build_parser()
    a = parser.parse_args(argv)
    problems = []
    if a.size < STAMP_SIZE:
        problems.append(f"--size must be at least {STAMP_SIZE}")
    if min(a.producers, a.consumers) < 0 or a.producers + a.consumers == 0:
        problems.append("need at least one producer or consumer")
    if min(a.queues, a.producer_channels, a.consumer_channels, a.batch, a.multi_ack_every) < 1:
        problems.append("--queues, --*-channels, --batch and --multi-ack-every must be >= 1")
    if a.ack == "manual" and a.prefetch and a.multi_ack_every > a.prefetch:
        problems.append("--multi-ack-every above --prefetch would stall the consumers")
    if a.count < 0 or a.duration <= 0 or a.rate < 0 or a.processes < 0:
        problems.append("--count, --rate and --processes must be >= 0, --duration > 0")
    try:
        endpoint = parse_uri(a.uri)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        parser.error("; ".join(problems))
    return PerfOptions(
        endpoint=endpoint,
        producers=a.producers,
        consumers=a.consumers,
        producer_channels=a.producer_channels,
        consumer_channels=a.consumer_channels,
        queues=a.queues,
        queue_prefix=a.queue_prefix,
        queue_args=tuple(a.queue_arg),
        exchange=a.exchange,
        exchange_type=a.exchange_type,
        exchange_args=tuple(a.exchange_arg),
        unique_header=a.unique_header,
        size=a.size,
        persistent=a.persistent,
        durable=a.durable,
        confirm=a.confirm,
        ack=a.ack,
        prefetch=a.prefetch,
        multi_ack_every=a.multi_ack_every,
        rate=a.rate,
        duration_s=a.duration,
        count=a.count,
        processes=a.processes,
        batch=a.batch,
        purge=a.purge,
        delete_queues=a.delete_queues,
        confirm_timeout_s=a.confirm_timeout,
        drain_timeout_s=a.drain_timeout,
        json=a.json,
        quiet=a.quiet,
        self_test=a.self_test,
    )
