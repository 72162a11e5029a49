"""The options of format("kanin"), parsed once into a frozen dataclass.

Spark hands a data source its options as a case-insensitive map of strings (the keys
arrive lower-cased). Parsing happens when Spark plans the query (schema(), reader(),
writer()), so a typo fails there with an error naming the option, before any task runs
or any connection opens. Nothing here imports pyspark: the rules are plain Python and
tested without Spark.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Literal
from urllib.parse import urlsplit

# Canonical spellings, for error messages and documentation; matched case-insensitively.
URI = "uri"
QUEUE = "queue"
EXCHANGE = "exchange"
ROUTING_KEY = "routingKey"
ID_COLUMN = "idColumn"
MAX_RECORDS_PER_BATCH = "maxRecordsPerBatch"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
NUM_PARTITIONS = "numPartitions"
MODE = "mode"
# Spark adds these itself to a streaming sink's options (queryName when the query has
# one).
CHECKPOINT_LOCATION = "checkpointLocation"
QUERY_NAME = "queryName"

READ_OPTIONS = (
    URI,
    QUEUE,
    MODE,
    MAX_RECORDS_PER_BATCH,
    STARTING_OFFSETS,
    ENDING_OFFSETS,
    NUM_PARTITIONS,
)
# Options that only a stream can honour: a queue has no offsets and is read on the driver.
STREAM_ONLY_OPTIONS = (STARTING_OFFSETS, ENDING_OFFSETS, NUM_PARTITIONS)
WRITE_OPTIONS = (URI, QUEUE, EXCHANGE, ROUTING_KEY, ID_COLUMN)
SPARK_OPTIONS = (CHECKPOINT_LOCATION, QUERY_NAME)

# A stream position: the stream's first retained message, its tail when first asked
# ("last": only messages appended from then on), or an offset.
Position = Literal["first", "last"] | int
# How a queue is read: "stream" replays offset ranges of a stream (x-queue-type: stream);
# "queue" consumes a classic or quorum queue, acking once Spark has committed a batch.
Mode = Literal["stream", "queue"]
# Queue mode's prefetch is twice the batch size (see queue_read.py), and AMQP's prefetch
# count is 16 bits.
QUEUE_MODE_MAX_BATCH = 65535 // 2
QUEUE_MODE_DEFAULT_BATCH = 10_000


class Role(Enum):
    READ = "reading"
    WRITE = "writing"


class OptionError(ValueError):
    """A bad option of format("kanin"); the message names the option."""


@dataclass(frozen=True)
class KaninOptions:
    uri: str
    queue: str | None = None
    exchange: str = ""
    routing_key: str | None = None
    id_column: str | None = None
    max_records_per_batch: int | None = None
    starting_offsets: Position = "first"
    ending_offsets: Position = "last"
    num_partitions: int = 1
    mode: Mode = "stream"

    @property
    def safe_uri(self) -> str:
        """The URI with its password hidden, for messages and logs."""
        return hide_password(self.uri)

    @property
    def publish_routing_key(self) -> str:
        """The routing key of rows without their own: routingKey, else the queue's name when
        publishing straight to a queue through the default exchange."""
        if self.routing_key is not None:
            return self.routing_key
        return self.queue if self.exchange == "" and self.queue else ""


def parse_options(raw: Mapping[str, str], role: Role) -> KaninOptions:
    """Check every option for `role` and return them parsed; OptionError names the first bad
    one. Unset numbers get their defaults here, on the planning side."""
    given = {key.lower(): value for key, value in raw.items()}
    _reject_unknown(given, role)
    uri = _parse_uri(_required(given, URI, role))
    if role is Role.READ:
        return _read_options(given, uri)
    return _write_options(given, uri)


def _read_options(given: dict[str, str], uri: str) -> KaninOptions:
    mode = _parse_mode(given)
    if mode == "queue":
        return _queue_mode_options(given, uri)
    starting = _parse_position(given, STARTING_OFFSETS, "first")
    ending = _parse_position(given, ENDING_OFFSETS, "last")
    if ending == "first":
        raise OptionError(f"option {ENDING_OFFSETS!r} must be 'last' or an offset, not 'first'")
    if isinstance(starting, int) and isinstance(ending, int) and ending < starting:
        raise OptionError(
            f"option {ENDING_OFFSETS!r} ({ending}) is below {STARTING_OFFSETS!r} ({starting})"
        )
    return KaninOptions(
        uri=uri,
        queue=_required(given, QUEUE, Role.READ),
        max_records_per_batch=_positive_int(given, MAX_RECORDS_PER_BATCH),
        starting_offsets=starting,
        ending_offsets=ending,
        num_partitions=_positive_int(given, NUM_PARTITIONS) or os.cpu_count() or 1,
    )


def _queue_mode_options(given: dict[str, str], uri: str) -> KaninOptions:
    for name in STREAM_ONLY_OPTIONS:
        if name.lower() in given:
            raise OptionError(f"option {name!r} is for streams, not for {MODE}=queue")
    batch = _positive_int(given, MAX_RECORDS_PER_BATCH) or QUEUE_MODE_DEFAULT_BATCH
    if batch > QUEUE_MODE_MAX_BATCH:
        raise OptionError(
            f"option {MAX_RECORDS_PER_BATCH!r} is at most {QUEUE_MODE_MAX_BATCH} with "
            f"{MODE}=queue (the prefetch is twice it, and AMQP's prefetch is at most 65535)"
        )
    return KaninOptions(
        uri=uri, queue=_required(given, QUEUE, Role.READ), max_records_per_batch=batch, mode="queue"
    )


def _parse_mode(given: dict[str, str]) -> Mode:
    value = (_text(given, MODE) or "stream").strip().lower()
    if value == "stream":
        return "stream"
    if value == "queue":
        return "queue"
    raise OptionError(f"option {MODE!r} must be 'stream' or 'queue': {value!r}")


def _write_options(given: dict[str, str], uri: str) -> KaninOptions:
    queue = _text(given, QUEUE)
    exchange = _text(given, EXCHANGE) or ""
    if not queue and not exchange:
        raise OptionError(
            f"writing needs option {EXCHANGE!r} (with {ROUTING_KEY!r} or a routing_key column) "
            f"or option {QUEUE!r} (to publish to that queue through the default exchange)"
        )
    id_column = _text(given, ID_COLUMN)
    if id_column is not None and not id_column:
        raise OptionError(f"option {ID_COLUMN!r} is empty: name the column holding message ids")
    return KaninOptions(
        uri=uri,
        queue=queue,
        exchange=exchange,
        routing_key=_text(given, ROUTING_KEY),
        id_column=id_column,
    )


def _reject_unknown(given: dict[str, str], role: Role) -> None:
    allowed = READ_OPTIONS if role is Role.READ else WRITE_OPTIONS
    known = {name.lower(): name for name in allowed + SPARK_OPTIONS}
    every = {name.lower(): name for name in READ_OPTIONS + WRITE_OPTIONS}
    for key in given:
        if key in known:
            continue
        if key in every:
            raise OptionError(f"option {every[key]!r} is not used for {role.value}")
        names = ", ".join(allowed)
        raise OptionError(f"unknown option {key!r} for format 'kanin' (known: {names})")


def _text(given: dict[str, str], name: str) -> str | None:
    return given.get(name.lower())


def _required(given: dict[str, str], name: str, role: Role) -> str:
    value = _text(given, name)
    if not value:
        raise OptionError(f"option {name!r} is required for {role.value}")
    return value


def _parse_uri(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.scheme not in ("amqp", "amqps"):
        shown = hide_password(uri)
        raise OptionError(f"option {URI!r} must start with amqp:// or amqps://, got {shown!r}")
    if not parts.hostname:
        raise OptionError(f"option {URI!r} names no host: {hide_password(uri)!r}")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError as error:
        raise OptionError(f"option {URI!r} has a bad port: {hide_password(uri)!r}") from error
    return uri


def _parse_position(given: dict[str, str], name: str, default: Position) -> Position:
    value = _text(given, name)
    if value is None:
        return default
    word = value.strip().lower()
    if word in ("first", "last"):
        return "first" if word == "first" else "last"
    number = _integer(name, value)
    if number < 0:
        raise OptionError(f"option {name!r} must be 'first', 'last' or an offset >= 0: {value!r}")
    return number


def _positive_int(given: dict[str, str], name: str) -> int | None:
    value = _text(given, name)
    if value is None:
        return None
    number = _integer(name, value)
    if number <= 0:
        raise OptionError(f"option {name!r} must be a positive whole number: {value!r}")
    return number


def _integer(name: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a whole number: {value!r}") from None


def hide_password(uri: str) -> str:
    """The URI with any password replaced by ***; works on malformed URIs too."""
    return _PASSWORD.sub(r"\1***@", uri)


# scheme://user:password@host...: the password is what sits between the user's colon and @.
_PASSWORD = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@]*:)[^@/]*@")
