"""PendingRecords: a stream's records, joined once per commit round, are byte for byte
what records.encode_enqueue writes, so logs written before and after read the same."""

from __future__ import annotations

from kanin.store import records
from kanin.store.stream_batch import PendingRecords

MESSAGES = [
    ("", "bench.streams", b"\x00\x3c\x00\x00" + bytes(8) + b"\x00\x00", b"x" * 16),
    ("", "bench.streams", b"\x00\x3c\x00\x00" + bytes(10), b""),
    ("amq.direct", "k\u00e9y", b"header bytes", b"body" * 1000),
    ("\u00e9x", "", b"", b"\x00\xff"),
]


def expected(offset: int, message: tuple[str, str, bytes, bytes], ts: int) -> bytes:
    exchange, routing_key, header, body = message
    return records.encode_enqueue(offset, "", exchange, routing_key, header, body, 0, ts)


def test_each_record_is_what_encode_enqueue_gives() -> None:
    pending = PendingRecords()
    sizes = [pending.add(7, 100 + i, *m, 1_700_000_000_000 + i) for i, m in enumerate(MESSAGES)]
    wanted = [expected(100 + i, m, 1_700_000_000_000 + i) for i, m in enumerate(MESSAGES)]
    assert sizes == [len(w) for w in wanted]
    assert pending.take() == [(7, 100, len(MESSAGES), b"".join(wanted))]
    assert not pending
    assert pending.take() == []


def test_records_read_back_with_their_fields() -> None:
    pending = PendingRecords()
    for i, message in enumerate(MESSAGES):
        pending.add(1, i, *message, 5)
    data = records.FILE_HEADER + pending.take()[0][3]
    found = [record for _, record in records.scan(data)]
    assert [(r.id, r.exchange, r.routing_key, r.header, r.body) for r in found] == [
        (i, *m) for i, m in enumerate(MESSAGES)
    ]
    assert all(r.type == records.ENQUEUE and r.queue == "" and r.expires_at_ms == 5 for r in found)


def test_a_new_segment_starts_a_new_run() -> None:
    pending = PendingRecords()
    pending.add(1, 0, *MESSAGES[0], 0)
    pending.add(1, 1, *MESSAGES[1], 0)
    pending.add(2, 2, *MESSAGES[2], 0)
    runs = pending.take()
    assert [(segment, first, count) for segment, first, count, _ in runs] == [(1, 0, 2), (2, 2, 1)]
    assert runs[1][3] == expected(2, MESSAGES[2], 0)
