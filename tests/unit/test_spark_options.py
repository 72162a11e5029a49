"""format("kanin")'s option parsing: every bad option is named, at planning time."""

from __future__ import annotations

import pytest

from kanin.spark.options import (
    KaninOptions,
    OptionError,
    Role,
    hide_password,
    parse_options,
)

URI = "amqp://guest:secret@127.0.0.1:5672/%2F"


def read(**options: str) -> KaninOptions:
    return parse_options({"uri": URI, "queue": "events", **options}, Role.READ)


def write(**options: str) -> KaninOptions:
    return parse_options({"uri": URI, **options}, Role.WRITE)


def test_read_defaults() -> None:
    parsed = read()
    assert parsed.queue == "events"
    assert parsed.starting_offsets == "first"
    assert parsed.ending_offsets == "last"
    assert parsed.max_records_per_batch is None
    assert parsed.num_partitions >= 1


def test_names_are_case_insensitive_as_spark_lowercases_them() -> None:
    parsed = parse_options(
        {"URI": URI, "Queue": "q", "maxrecordsperbatch": "10", "STARTINGOFFSETS": "LAST"},
        Role.READ,
    )
    assert (parsed.queue, parsed.max_records_per_batch, parsed.starting_offsets) == (
        "q",
        10,
        "last",
    )


def test_positions_take_first_last_or_an_offset() -> None:
    assert read(startingOffsets="17", endingOffsets="40").starting_offsets == 17
    assert read(startingOffsets="17", endingOffsets="40").ending_offsets == 40
    assert read(endingOffsets="last").ending_offsets == "last"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"startingOffsets": "earliest"}, "'startingOffsets'"),
        ({"startingOffsets": "-1"}, "'startingOffsets'"),
        ({"endingOffsets": "first"}, "'endingOffsets'"),
        ({"startingOffsets": "50", "endingOffsets": "10"}, "'endingOffsets'"),
        ({"maxRecordsPerBatch": "0"}, "'maxRecordsPerBatch'"),
        ({"maxRecordsPerBatch": "ten"}, "'maxRecordsPerBatch'"),
        ({"numPartitions": "1.5"}, "'numPartitions'"),
        ({"queueName": "x"}, "'queuename'"),
        ({"idColumn": "key"}, "'idColumn' is not used for reading"),
        ({"exchange": "x"}, "'exchange' is not used for reading"),
    ],
)
def test_a_bad_read_option_is_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        read(**options)


def test_reading_needs_a_queue_and_a_uri() -> None:
    with pytest.raises(OptionError, match="'queue' is required for reading"):
        parse_options({"uri": URI}, Role.READ)
    with pytest.raises(OptionError, match="'uri' is required for reading"):
        parse_options({"queue": "q"}, Role.READ)


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("http://host/", "must start with amqp:// or amqps://"),
        ("amqp:///%2F", "names no host"),
        ("amqp://guest:pw@host:notaport/%2F", "bad port"),
    ],
)
def test_a_bad_uri_is_named_without_its_password(uri: str, said: str) -> None:
    with pytest.raises(OptionError, match=said) as caught:
        parse_options({"uri": uri, "queue": "q"}, Role.READ)
    assert "'uri'" in str(caught.value)
    assert "pw" not in str(caught.value)


def test_amqps_is_accepted() -> None:
    assert read(uri="amqps://u:p@broker.example:5671/prod").uri.startswith("amqps://")


def test_writing_needs_an_exchange_or_a_queue() -> None:
    with pytest.raises(OptionError, match="writing needs option 'exchange'"):
        write()
    with pytest.raises(OptionError, match="'startingOffsets' is not used for writing"):
        write(queue="q", startingOffsets="first")


def test_write_routing_defaults_to_the_queue_through_the_default_exchange() -> None:
    assert write(queue="jobs").publish_routing_key == "jobs"
    assert write(exchange="orders").publish_routing_key == ""
    assert write(exchange="orders", routingKey="eu").publish_routing_key == "eu"
    assert write(queue="jobs", routingKey="other").publish_routing_key == "other"


def test_spark_s_own_checkpoint_and_query_name_options_are_accepted_when_writing() -> None:
    assert write(queue="q", checkpointlocation="/tmp/ck").queue == "q"
    # writeStream.queryName(...) reaches the sink as an option too.
    assert write(queue="q", checkpointlocation="/tmp/ck", queryname="copies").queue == "q"


def test_an_empty_id_column_is_refused() -> None:
    with pytest.raises(OptionError, match="'idColumn' is empty"):
        write(queue="q", idColumn="")


def test_passwords_are_hidden() -> None:
    assert hide_password(URI) == "amqp://guest:***@127.0.0.1:5672/%2F"
    assert hide_password("amqp://host/%2F") == "amqp://host/%2F"
    assert read().safe_uri == "amqp://guest:***@127.0.0.1:5672/%2F"


def test_queue_mode_reads_classic_and_quorum_queues_with_a_batch_cap() -> None:
    parsed = read(mode="queue")
    assert (parsed.mode, parsed.max_records_per_batch) == ("queue", 10_000)
    assert read(mode="QUEUE", maxRecordsPerBatch="500").max_records_per_batch == 500
    assert read().mode == "stream"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"mode": "classic"}, "'mode' must be 'stream' or 'queue'"),
        ({"mode": "queue", "startingOffsets": "first"}, "'startingOffsets' is for streams"),
        ({"mode": "queue", "numPartitions": "2"}, "'numPartitions' is for streams"),
        ({"mode": "queue", "maxRecordsPerBatch": "40000"}, "at most 32767"),
    ],
)
def test_a_bad_queue_mode_option_is_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        read(**options)
