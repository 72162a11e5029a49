"""The message log's record format (kanin/store/records.py): encoding, the file header, and
scan(), which must skip exactly the records that are torn, fail their checksum or are nonsense,
find the next valid record after each (resync) and never take bytes inside a body for one."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kanin.store import records
from kanin.store.records import (
    DELIVERED,
    ENQUEUE,
    FILE_HEADER,
    REDELIVERED,
    REMOVE,
    Record,
    decode,
    encode,
    encode_delivery,
    encode_simple,
    queue_key,
    record_size,
    scan,
)

# -- helpers -------------------------------------------------------------------------------


def short_text(max_bytes: int = 255) -> st.SearchStrategy[str]:
    """Text whose UTF-8 encoding fits a u8-length field."""
    return st.text(max_size=60).filter(lambda s: len(s.encode()) <= max_bytes)


enqueue_records = st.builds(
    Record,
    type=st.just(ENQUEUE),
    id=st.integers(1, 2**64 - 1),
    queue=st.text(max_size=40),
    exchange=short_text(),
    routing_key=short_text(),
    header=st.binary(max_size=200),
    body=st.binary(max_size=2000),
    priority=st.integers(0, 255),
    expires_at_ms=st.integers(0, 2**64 - 1),
)
simple_records = st.builds(
    Record,
    type=st.sampled_from([REMOVE, DELIVERED]),
    id=st.integers(1, 2**64 - 1),
    queue=st.text(max_size=40),
)
redelivered_records = st.builds(
    Record,
    type=st.just(REDELIVERED),
    id=st.integers(1, 2**64 - 1),
    queue=st.text(max_size=40),
    returns=st.integers(1, 2**32 - 1),
)
any_record = st.one_of(enqueue_records, simple_records, redelivered_records)


def sample_records() -> list[Record]:
    q = queue_key("/", "orders")
    return [
        Record(ENQUEUE, 1, q, "amq.direct", "rk.1", b"\x00\x3c\x00\x00header", b"body one"),
        Record(ENQUEUE, 2, q, "", "orders", b"", b""),
        Record(DELIVERED, 1, q),
        Record(
            ENQUEUE, 3, queue_key("vh", "q\u00e9"), "ex", "", b"h" * 300, bytes(range(256)), 9, 77
        ),
        Record(REMOVE, 2, q),
        Record(REDELIVERED, 1, q, returns=3),
    ]


def log_bytes(recs: list[Record]) -> tuple[bytes, list[int]]:
    """A segment file holding recs, and the offset of each record in it."""
    data = bytearray(FILE_HEADER)
    offsets = []
    for record in recs:
        offsets.append(len(data))
        data += encode(record)
    return bytes(data), offsets


def scanned(data: bytes) -> list[Record]:
    return [record for _, record in scan(data)]


def framed(payload: bytes, checksum: int | None = None) -> bytes:
    """A record frame around an arbitrary payload, with its true checksum unless given."""
    crc = zlib.crc32(payload) if checksum is None else checksum
    return struct.pack(">II", len(payload), crc) + payload


# -- the file header -------------------------------------------------------------------------


def test_file_header_is_magic_then_big_endian_version_two() -> None:
    assert FILE_HEADER == b"KNLG\x00\x00\x00\x02"
    assert records.MAGIC == b"KNLG"
    assert records.VERSION == 2
    assert records.file_version(FILE_HEADER) == 2
    assert records.file_version(b"KNLG\x00\x00\x00\x01") == 1
    for unknown in (b"KNLG\x00\x00\x00\x03", b"KNLX\x00\x00\x00\x02", b"KNLG\x00\x00", b""):
        assert records.file_version(unknown) is None


def test_scan_starts_after_the_file_header_by_default() -> None:
    data, offsets = log_bytes(sample_records())
    assert offsets[0] == len(FILE_HEADER) == 8
    assert [offset for offset, _ in scan(data)] == offsets


def test_scan_of_a_header_only_file_yields_nothing() -> None:
    assert scanned(FILE_HEADER) == []


# -- encoding --------------------------------------------------------------------------------


def test_enqueue_layout_matches_the_documented_format() -> None:
    record = Record(ENQUEUE, 0x0102030405060708, "/\x00q", "ex", "rk", b"HD", b"BODY", 7, 0x1234)
    payload = (
        b"\x01"  # type
        + bytes.fromhex("0102030405060708")  # u64 id
        + b"\x07"  # u8 priority
        + bytes.fromhex("0000000000001234")  # u64 expires_at_ms
        + b"\x02\x02"  # u8 exchange and routing key lengths
        + b"\x00\x00\x00\x02\x00\x00\x00\x04"  # u32 header and body lengths
        + b"\x00\x03/\x00q"  # u16 queue key
        + b"exrkHDBODY"
    )
    assert encode(record) == struct.pack(">II", len(payload), zlib.crc32(payload)) + payload


def v1_enqueue(
    id_: int, queue: str, exchange: str, routing_key: str, header: bytes, body: bytes
) -> bytes:
    """An ENQUEUE record as format version 1 wrote it."""
    fields = [struct.pack(">BQH", ENQUEUE, id_, len(queue.encode())), queue.encode()]
    for size_format, value in ((">B", exchange.encode()), (">B", routing_key.encode())):
        fields += [struct.pack(size_format, len(value)), value]
    for value in (header, body):
        fields += [struct.pack(">I", len(value)), value]
    return framed(b"".join(fields))


def test_version_one_files_are_still_read_as_priority_zero_never_expiring() -> None:
    q = queue_key("/", "old")
    data = (
        b"KNLG\x00\x00\x00\x01"
        + v1_enqueue(1, q, "ex", "rk", b"HEAD", b"body one")
        + encode_simple(DELIVERED, 1, q)
        + v1_enqueue(2, q, "", "", b"", b"")
        + encode_simple(REMOVE, 2, q)
    )
    assert scanned(data) == [
        Record(ENQUEUE, 1, q, "ex", "rk", b"HEAD", b"body one"),
        Record(DELIVERED, 1, q),
        Record(ENQUEUE, 2, q, "", "", b"", b""),
        Record(REMOVE, 2, q),
    ]
    summaries = list(records.SummaryScan(data))
    assert [s[1:] for s in summaries] == [
        (ENQUEUE, 1, q, 0, 0, 8),
        (DELIVERED, 1, q, 0, 0, 0),
        (ENQUEUE, 2, q, 0, 0, 0),
        (REMOVE, 2, q, 0, 0, 0),
    ]


def test_redelivered_layout_matches_the_documented_format() -> None:
    payload = b"\x04" + (7).to_bytes(8, "big") + (300).to_bytes(4, "big") + b"\x00\x01q"
    assert encode_delivery(7, "q", 300) == framed(payload)
    assert encode_delivery(7, "q", 0) == encode_simple(DELIVERED, 7, "q")
    summaries = list(records.SummaryScan(FILE_HEADER + framed(payload)))
    assert [s[1:] for s in summaries] == [(REDELIVERED, 7, "q", 0, 0, 300)]


def test_remove_layout_matches_the_documented_format() -> None:
    payload = b"\x02" + (7).to_bytes(8, "big") + b"\x00\x01q"
    assert encode(Record(REMOVE, 7, "q")) == framed(payload)


@pytest.mark.parametrize("type_", [REMOVE, DELIVERED])
def test_encode_simple_equals_encode(type_: int) -> None:
    for id_, queue in [(1, "q"), (2**64 - 1, queue_key("/", "caf\u00e9")), (5, "")]:
        assert encode_simple(type_, id_, queue) == encode(Record(type_, id_, queue))


@given(
    type_=st.sampled_from([REMOVE, DELIVERED]),
    id_=st.integers(0, 2**64 - 1),
    queue=st.text(max_size=50),
)
@settings(max_examples=200, deadline=None)
def test_encode_simple_round_trips(type_: int, id_: int, queue: str) -> None:
    data = FILE_HEADER + encode_simple(type_, id_, queue)
    assert scanned(data) == [Record(type_, id_, queue)]


@given(record=any_record)
@settings(max_examples=300, deadline=None)
def test_encode_decode_round_trip(record: Record) -> None:
    data = encode(record)
    assert record_size(data, 0) == len(data)
    assert decode(data[8:]) == record
    assert scanned(FILE_HEADER + data) == [record]


@given(recs=st.lists(any_record, max_size=12))
@settings(max_examples=150, deadline=None)
def test_scan_yields_every_record_with_its_offset(recs: list[Record]) -> None:
    data, offsets = log_bytes(recs)
    result = list(scan(data))
    assert [record for _, record in result] == recs
    assert [offset for offset, _ in result] == offsets
    ends = [offset + record_size(data, offset) for offset in offsets]
    assert ends == [*offsets[1:], len(data)][: len(recs)]


def test_exchange_longer_than_a_shortstr_cannot_be_encoded_silently() -> None:
    # A u8 length cannot hold 256: encoding must refuse rather than write a corrupt record.
    with pytest.raises(struct.error):
        encode(Record(ENQUEUE, 1, "q", "x" * 256, "", b"", b""))


# -- scan skips a bad record and goes on from the next valid one ------------------------------


def without(items: list[Record], index: int) -> list[Record]:
    return items[:index] + items[index + 1 :]


def test_a_bad_checksum_loses_only_that_record() -> None:
    recs = sample_records()
    data, offsets = log_bytes(recs)
    corrupt = bytearray(data)
    corrupt[offsets[2] + 4] ^= 0xFF  # the checksum field of the third record
    assert scanned(bytes(corrupt)) == without(recs, 2)
    summaries = records.SummaryScan(bytes(corrupt))
    assert [s[0] for s in summaries] == without_offset(offsets, 2)
    assert summaries.skipped == [(offsets[2], offsets[3] - offsets[2])]
    assert summaries.valid_end == len(data)


def without_offset(offsets: list[int], index: int) -> list[int]:
    return offsets[:index] + offsets[index + 1 :]


@pytest.mark.parametrize("index", range(5))
def test_a_flipped_byte_anywhere_in_a_record_loses_only_that_record(index: int) -> None:
    recs = sample_records()
    data, offsets = log_bytes(recs)
    end = offsets[index + 1] if index + 1 < len(offsets) else len(data)
    for position in range(offsets[index], end):
        corrupt = bytearray(data)
        corrupt[position] ^= 0x01
        assert scanned(bytes(corrupt)) == without(recs, index), position
        summaries = records.SummaryScan(bytes(corrupt))
        assert [s[0] for s in summaries] == without_offset(offsets, index), position


def test_a_damaged_length_pointing_at_a_later_record_loses_only_its_own_record() -> None:
    """The length of record 2 is raised to end exactly where record 4 starts: a valid record
    sits there, but record 2's payload up to record 3 matches its checksum, which shows the
    length was the damaged field. Record 3 must not be skipped with it."""
    recs = sample_records()
    data, offsets = log_bytes(recs)
    corrupt = bytearray(data)
    struct.pack_into(">I", corrupt, offsets[1], offsets[3] - offsets[1] - 8)
    assert scanned(bytes(corrupt)) == without(recs, 1)


def test_records_inside_a_damaged_body_are_not_taken_for_records() -> None:
    """A message body that holds encoded records (a log shipped through the broker): when a
    byte of that message is damaged but its length is intact, the records in its body must
    not be read as the store's own."""
    q = queue_key("/", "q")
    inner = encode(Record(REMOVE, 1, q)) + encode(Record(ENQUEUE, 99, q, "", "", b"", b"x"))
    recs = [
        Record(ENQUEUE, 1, q, "", "", b"", b"first"),
        Record(ENQUEUE, 2, q, "", "", b"", b"<" + inner + b">"),
        Record(ENQUEUE, 3, q, "", "", b"", b"third"),
    ]
    data, offsets = log_bytes(recs)
    corrupt = bytearray(data)
    corrupt[offsets[2] - 1] ^= 0x01  # the last body byte of record 2
    assert scanned(bytes(corrupt)) == without(recs, 1)
    assert [s[2] for s in records.SummaryScan(bytes(corrupt))] == [1, 3]


def test_every_torn_tail_yields_exactly_the_whole_records_before_it() -> None:
    recs = sample_records()
    data, offsets = log_bytes(recs)
    ends = [*offsets[1:], len(data)]
    for cut in range(len(FILE_HEADER), len(data) + 1):
        whole = sum(1 for end in ends if end <= cut)
        assert scanned(data[:cut]) == recs[:whole], cut
        summaries = records.SummaryScan(data[:cut])
        assert len(list(summaries)) == whole, cut
        assert summaries.skipped == [], cut
        assert summaries.valid_end == ([len(FILE_HEADER), *ends][whole]), cut


def test_scan_stops_at_a_length_beyond_the_end_of_the_data() -> None:
    recs = sample_records()
    data, _ = log_bytes(recs[:2])
    bogus = struct.pack(">II", 10_000, 0) + b"x" * 50
    assert scanned(data + bogus) == recs[:2]


def test_a_garbage_length_over_the_limit_is_skipped() -> None:
    recs = sample_records()
    data, _ = log_bytes(recs[:1])
    bogus = struct.pack(">II", records.MAX_RECORD_BYTES + 1, 0)
    assert scanned(data + bogus + encode(recs[1])) == recs[:2]
    huge = struct.pack(">II", 0xFFFFFFFF, 0xFFFFFFFF)
    assert scanned(data + huge) == recs[:1]


def test_zeros_are_not_records() -> None:
    # A file extended with zeros by a crash: length 0 and crc32(b"") == 0 "match".
    recs = sample_records()
    data, _ = log_bytes(recs)
    assert zlib.crc32(b"") == 0
    assert scanned(data + bytes(64)) == recs
    summaries = records.SummaryScan(data + bytes(64))
    assert len(list(summaries)) == len(recs)
    assert (summaries.valid_end, summaries.skipped) == (len(data), [])
    # Zeros in the middle, then a valid record: the zeros are skipped, the record kept.
    assert scanned(data + bytes(64) + encode(recs[0])) == [*recs, recs[0]]


def test_random_bytes_are_never_taken_for_a_record() -> None:
    """The cheap checks (type byte, field lengths adding up to the length) and the checksum
    together: a megabyte of random bytes yields nothing, whatever precedes it."""
    import random

    noise = random.Random(7).randbytes(1 << 20)
    data, _ = log_bytes(sample_records()[:1])
    assert scanned(data + noise) == sample_records()[:1]
    summaries = records.SummaryScan(data + noise)
    assert len(list(summaries)) == 1
    assert (summaries.valid_end, summaries.skipped) == (len(data), [])


def enqueue_fields(exchange: int = 0, body: int = 0) -> bytes:
    """The fixed part of a version 2 ENQUEUE payload for a queue key of one byte."""
    return struct.pack(">BQBQBBIIH", ENQUEUE, 1, 0, 0, exchange, 0, 0, body, 1)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\x09" + (1).to_bytes(8, "big") + b"\x00\x01q", id="unknown-type"),
        pytest.param(b"\x02" + (1).to_bytes(8, "big") + b"\x00\x01qX", id="remove-trailing"),
        pytest.param(b"\x02" + (1).to_bytes(8, "big"), id="short-fixed-part"),
        pytest.param(b"\x02" + (1).to_bytes(8, "big") + b"\x00\x02\xff\xfe", id="bad-utf8"),
        pytest.param(enqueue_fields(body=9) + b"qab", id="enqueue-body-overruns"),
        pytest.param(enqueue_fields() + b"q!", id="enqueue-trailing"),
        pytest.param(enqueue_fields()[:-2], id="enqueue-short-fixed-part"),
        pytest.param(enqueue_fields(exchange=2) + b"q\xff\xfe", id="enqueue-bad-utf8-exchange"),
    ],
)
def test_a_checksummed_but_malformed_record_is_skipped(payload: bytes) -> None:
    recs = sample_records()
    data, offsets = log_bytes(recs[:2])
    assert scanned(data + framed(payload) + encode(recs[2])) == recs[:3]
    summaries = records.SummaryScan(data + framed(payload) + encode(recs[2]))
    assert [s[0] for s in summaries] == [*offsets, len(data) + len(framed(payload))]
    assert summaries.skipped == [(len(data), len(framed(payload)))]


@given(recs=st.lists(any_record, max_size=12))
@settings(max_examples=150, deadline=None)
def test_summaries_say_what_scan_says_without_the_content(recs: list[Record]) -> None:
    data, _ = log_bytes(recs)
    expected = [
        (offset, r.type, r.id, r.queue, r.priority, r.expires_at_ms, r.returns or len(r.body))
        for offset, r in scan(data)
    ]
    assert list(records.SummaryScan(data)) == expected


def test_payload_at_reads_one_whole_record_or_refuses() -> None:
    recs = sample_records()
    data, offsets = log_bytes(recs)
    for record, offset in zip(recs, offsets, strict=True):
        assert decode(records.payload_at(data, offset)) == record
    last = offsets[-1]
    with pytest.raises(records.CorruptRecord):
        records.payload_at(data[: len(data) - 1], last)  # torn
    with pytest.raises(records.CorruptRecord):
        records.payload_at(data, last + 1)  # not a record boundary
    with pytest.raises(records.CorruptRecord):
        records.payload_at(data, len(data))


@given(recs=st.lists(any_record, min_size=1, max_size=6), data=st.data())
@settings(max_examples=200, deadline=None)
def test_any_single_byte_corruption_loses_exactly_the_record_it_hits(
    recs: list[Record], data: st.DataObject
) -> None:
    log, offsets = log_bytes(recs)
    position = data.draw(st.integers(len(FILE_HEADER), len(log) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    corrupt = bytearray(log)
    corrupt[position] ^= flip
    hit = max(i for i, offset in enumerate(offsets) if offset <= position)
    assert scanned(bytes(corrupt)) == without(recs, hit)
    summaries = records.SummaryScan(bytes(corrupt))
    assert [s[0] for s in summaries] == without_offset(offsets, hit)
    if hit + 1 < len(recs):
        assert summaries.skipped == [(offsets[hit], offsets[hit + 1] - offsets[hit])]
    else:  # the last record: a bad tail, nothing skipped
        assert (summaries.skipped, summaries.valid_end) == ([], offsets[hit])
