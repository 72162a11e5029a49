"""Broker configuration: one frozen value passed in, never a global."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# RabbitMQ's default vm_memory_high_watermark: 0.4 of the machine's memory.
MEMORY_HIGH_WATERMARK_FRACTION = 0.4
# Where the machine's memory cannot be read.
FALLBACK_MEMORY_HIGH_WATERMARK_BYTES = 2 * 1024**3

# RabbitMQ's ssl_options.verify, verify_none / verify_peer (https://www.rabbitmq.com/ssl.html).
TLS_VERIFY_MODES = ("none", "peer")
# RabbitMQ's ssl_cert_login_from: what of a client certificate's subject the EXTERNAL
# mechanism takes as the user name (https://www.rabbitmq.com/access-control.html).
CERT_LOGIN_FROM = ("distinguished_name", "common_name")


def physical_memory_bytes() -> int | None:
    """The machine's RAM (sysconf, as /proc/meminfo's MemTotal), or None where unknown."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None


def default_memory_high_watermark() -> int:
    ram = physical_memory_bytes()
    if ram is None:
        return FALLBACK_MEMORY_HIGH_WATERMARK_BYTES
    return int(ram * MEMORY_HIGH_WATERMARK_FRACTION)


@dataclass(frozen=True)
class PermissionSpec:
    """RabbitMQ-style permissions of one user in one vhost: three regexes."""

    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(frozen=True)
class UserSpec:
    """A user created at start. Without explicit permissions it gets full access to the
    default vhost, as RabbitMQ's default user does."""

    name: str
    password: str
    tags: tuple[str, ...] = ("administrator",)
    permissions: tuple[PermissionSpec, ...] | None = None


@dataclass(frozen=True)
class BrokerConfig:
    # Network. bind=None listens on every interface, IPv4 and IPv6, as RabbitMQ does.
    port: int = 5672
    bind: str | None = None
    # The management HTTP API's port, on the same address(es); None: no API. 0 picks a
    # free port (tests); the command line's `--mgmt-port 0` means None.
    mgmt_port: int | None = 15672
    # The Prometheus metrics' port (/metrics), likewise: None: none, 0: a free port.
    prometheus_port: int | None = 15692
    data_dir: Path = Path("kanin-data")

    # AMQP over TLS (amqps) on tls_port, beside the plain port, when tls_cert and tls_key
    # (PEM files) are both given; as RabbitMQ's listeners.ssl and ssl_options
    # (https://www.rabbitmq.com/ssl.html). tls_ca: the CA bundle client certificates are
    # verified against. tls_verify "peer" asks clients for a certificate (and refuses one
    # that does not verify); tls_fail_if_no_peer_cert also refuses a client without one.
    tls_port: int = 5671
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_verify: str = "none"
    tls_fail_if_no_peer_cert: bool = False
    # The user name EXTERNAL takes from a verified client certificate: its subject's whole
    # distinguished name, as RabbitMQ does by default, or its common name (CN).
    tls_cert_login_from: str = "distinguished_name"
    # Serve the management API / the Prometheus metrics over HTTPS, with tls_cert and
    # tls_key, on their own ports (RabbitMQ's management.ssl and prometheus.ssl listeners).
    mgmt_tls: bool = False
    prometheus_tls: bool = False

    # Values proposed in connection.tune; the client may lower them.
    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat_s: int = 60

    # A client that has not finished the handshake by then is dropped.
    handshake_timeout_s: float = 10.0

    # Users created when the store is empty; `loopback_users` may only connect from loopback.
    default_users: tuple[UserSpec, ...] = field(
        default_factory=lambda: (UserSpec("guest", "guest"),)
    )
    loopback_users: tuple[str, ...] = ("guest",)
    default_vhost: str = "/"
    # Further vhosts created at start.
    vhosts: tuple[str, ...] = ()

    # Flow control (RabbitMQ's vm_memory_high_watermark, default 0.4 of RAM): publishers
    # are blocked while the messages held in memory, as counted (core/memory.py), or the
    # process's resident memory are above this. Messages a deep queue keeps only on disk
    # do not count.
    memory_high_watermark_bytes: int = field(default_factory=default_memory_high_watermark)
    # Compare the process's resident memory with the watermark too. An embedded broker
    # (kanin.testing) shares its process with the tests, so it turns this off.
    memory_watch_rss: bool = True
    # Each queue keeps up to this many bytes of ready message bodies in memory; beyond it a
    # durable queue keeps persistent messages on disk only and reads them back in batches
    # (x-queue-mode=lazy makes it 0 for one queue).
    queue_memory_budget_bytes: int = 4 * 1024 * 1024
    # Below this much free space on the data directory's disk, publishers are blocked
    # (RabbitMQ's default disk_free_limit is 50 MB).
    disk_free_limit_bytes: int = 50 * 1000 * 1000

    # The message log starts a new segment file past this size; space is reclaimed a
    # whole segment at a time. Small values are for tests that need many segments.
    segment_bytes: int = 64 * 1024 * 1024
    # Start despite damage that cannot be repaired without losing data, instead of refusing:
    # segment files of the message log missing (their messages are lost, and logged as
    # such), or the definitions file missing while the message store holds messages (those
    # messages are kept on disk and listed for the operator; nothing is deleted).
    force_recovery: bool = False

    # Write store and connection counters here once a second (for benchmarks), if set.
    stats_file: Path | None = None

    # A delivery not acknowledged within this closes its channel with 406 and goes back to
    # its queue (RabbitMQ's consumer_timeout, 30 minutes by default); None: never. A
    # queue's x-consumer-timeout argument overrides it.
    consumer_timeout_ms: int | None = 30 * 60 * 1000

    # Bounds on what one peer may make us hold.
    max_message_size_bytes: int = 128 * 1024 * 1024

    @property
    def tls(self) -> bool:
        """Is there a certificate and key to serve TLS with?"""
        return self.tls_cert is not None and self.tls_key is not None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        self._check_tls()
        if self.mgmt_port is not None and not 0 <= self.mgmt_port <= 65535:
            raise ValueError(f"mgmt_port must be 0..65535, got {self.mgmt_port}")
        if self.prometheus_port is not None and not 0 <= self.prometheus_port <= 65535:
            raise ValueError(f"prometheus_port must be 0..65535, got {self.prometheus_port}")
        if self.frame_max != 0 and self.frame_max < 4096:
            raise ValueError(f"frame_max must be 0 or >= 4096, got {self.frame_max}")
        if not 0 <= self.channel_max <= 65535:
            raise ValueError(f"channel_max must be 0..65535, got {self.channel_max}")
        if self.consumer_timeout_ms is not None and self.consumer_timeout_ms <= 0:
            raise ValueError(f"consumer_timeout_ms must be > 0, got {self.consumer_timeout_ms}")
        if self.heartbeat_s < 0:
            raise ValueError(f"heartbeat_s must be >= 0, got {self.heartbeat_s}")
        if not 0 < self.segment_bytes <= 1 << 31:
            raise ValueError(f"segment_bytes must be 1..2 GiB, got {self.segment_bytes}")
        if self.memory_high_watermark_bytes <= 0:
            raise ValueError(
                f"memory_high_watermark_bytes must be > 0, got {self.memory_high_watermark_bytes}"
            )
        if self.queue_memory_budget_bytes < 0:
            raise ValueError(
                f"queue_memory_budget_bytes must be >= 0, got {self.queue_memory_budget_bytes}"
            )

    def _check_tls(self) -> None:
        if not 0 <= self.tls_port <= 65535:
            raise ValueError(f"tls_port must be 0..65535, got {self.tls_port}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if self.tls_verify not in TLS_VERIFY_MODES:
            raise ValueError(f"tls_verify must be 'none' or 'peer', got {self.tls_verify!r}")
        if self.tls_cert_login_from not in CERT_LOGIN_FROM:
            raise ValueError(
                f"tls_cert_login_from must be one of {CERT_LOGIN_FROM}, "
                f"got {self.tls_cert_login_from!r}"
            )
        if self.tls_verify == "peer" and self.tls_ca is None:
            raise ValueError("tls_verify 'peer' needs tls_ca, the CA bundle to verify clients by")
        if self.tls_fail_if_no_peer_cert and self.tls_verify != "peer":
            raise ValueError("tls_fail_if_no_peer_cert needs tls_verify 'peer'")
        for flag, name in ((self.mgmt_tls, "mgmt_tls"), (self.prometheus_tls, "prometheus_tls")):
            if flag and not self.tls:
                raise ValueError(f"{name} needs tls_cert and tls_key")
