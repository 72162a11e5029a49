"""What FileStore recovery does with damage it finds (kanin/store/segments.py, manifest.py):
a bad record in any segment costs that record only; only the newest segment's torn tail is
cut; closed segments are never cut or rewritten; a missing segment file stops start-up
unless recovery is forced; the store's own deletions are never taken for losses.

Damage is done to the files between a store's close and the next start, as a bad disk, a
crash or an operator would leave them. Every error names the file and the byte offset.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from kanin.store import manifest, records
from kanin.store.file_store import FileStore
from kanin.store.segments import SegmentLog
from kanin.testing.faulty_disk import corrupt_byte, newest_segment, segment_files
from store_harness import Q1, Harness, Sent, body, expected, segment_of

# Every case twice: segments read whole, and mapped (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("segment_reading")


async def fill_and_close(files: Harness, count: int = 40, size: int = 400) -> list[Sent]:
    """Messages over several segments (about 9 per 4 KiB segment), then a clean close."""
    sent = [files.enqueue(Q1, body(i, size)) for i in range(count)]
    assert await files.commit() is True
    await files.close()
    assert len(segment_files(files.directory)) >= 4
    return sent


def in_segment(files: Harness, sent: list[Sent], path: Path) -> list[Sent]:
    where = segment_of(files.directory)
    return [m for m in sent if where[m.id] == int(path.stem)]


def offsets_in(path: Path) -> list[int]:
    return [offset for offset, _ in records.scan(path.read_bytes())]


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# -- a bad record is skipped, the rest recovered -----------------------------------------------


async def test_a_flipped_byte_in_a_closed_segment_loses_only_that_record(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sent = await fill_and_close(files)
    closed = segment_files(files.directory)[1]
    victims = in_segment(files, sent, closed)
    offsets = offsets_in(closed)
    assert len(offsets) >= 4
    hit = 1  # a record in the middle of the file
    corrupt_byte(closed, offsets[hit] + 30)  # a payload byte
    damaged = closed.read_bytes()
    assert files.reopen() == expected([m for m in sent if m.id != victims[hit].id])
    skipped = offsets[hit + 1] - offsets[hit]
    assert (
        f"segment {closed.name}: {skipped} bytes at offset {offsets[hit]} are not valid records"
        in "\n".join(errors(caplog))
    )
    assert closed.read_bytes() == damaged  # a closed segment is never cut or rewritten
    assert (closed.parent / f"{closed.name}.damaged").read_bytes() == damaged


async def test_several_flipped_bytes_in_several_closed_records(files: Harness) -> None:
    sent = await fill_and_close(files)
    lost: set[int] = set()
    closed = segment_files(files.directory)[:-1]
    for path, victims in [(path, in_segment(files, sent, path)) for path in closed]:
        offsets = offsets_in(path)
        for hit in (0, len(offsets) // 2):
            corrupt_byte(path, offsets[hit] + 100)
            lost.add(victims[hit].id)
    assert files.reopen() == expected([m for m in sent if m.id not in lost])


async def test_flipped_bytes_in_the_middle_of_the_active_segment_are_skipped_not_cut(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sent = await fill_and_close(files)
    active = newest_segment(files.directory)
    victims = in_segment(files, sent, active)
    offsets = offsets_in(active)
    assert len(offsets) >= 3
    size = active.stat().st_size
    for position in range(offsets[1] + 8, offsets[1] + 40):  # a run of bytes in one record
        corrupt_byte(active, position)
    assert files.reopen() == expected([m for m in sent if m.id != victims[1].id])
    assert active.stat().st_size == size  # valid records follow: nothing is a torn tail
    assert f"segment {active.name}: " in "\n".join(errors(caplog))
    assert f"at offset {offsets[1]} are not valid records" in "\n".join(errors(caplog))


async def test_a_torn_active_tail_is_still_cut(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sent = await fill_and_close(files)
    active = newest_segment(files.directory)
    offsets = offsets_in(active)
    os.truncate(active, active.stat().st_size - 10)  # tears the last record
    assert files.reopen() == expected(sent[:-1])
    assert active.stat().st_size == offsets[-1]
    assert errors(caplog) == []  # a crash's torn last write is not an error
    assert f"segment {active.name}: cutting" in caplog.text


async def test_corruption_then_a_torn_tail_in_the_active_segment(files: Harness) -> None:
    """The bad record in the middle is skipped; the torn tail after the last valid record is
    cut, and only that."""
    sent = await fill_and_close(files)
    active = newest_segment(files.directory)
    victims = in_segment(files, sent, active)
    offsets = offsets_in(active)
    corrupt_byte(active, offsets[0] + 50)
    os.truncate(active, active.stat().st_size - 10)
    assert files.reopen() == expected([m for m in sent[:-1] if m.id != victims[0].id])
    assert active.stat().st_size == offsets[-1]


async def test_a_truncated_closed_segment_keeps_its_whole_records_and_its_bytes(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sent = await fill_and_close(files)
    closed = segment_files(files.directory)[1]
    victims = in_segment(files, sent, closed)
    offsets = offsets_in(closed)
    os.truncate(closed, offsets[-2] + 20)  # the last two records: one torn, one gone
    truncated = closed.read_bytes()
    lost = {m.id for m in victims[-2:]}
    assert files.reopen() == expected([m for m in sent if m.id not in lost])
    assert closed.read_bytes() == truncated
    assert (
        f"segment {closed.name}: the last 20 bytes, from offset {offsets[-2]}, are not a whole "
        "valid record" in "\n".join(errors(caplog))
    )


async def test_a_damaged_closed_segment_header_is_reported_and_its_records_read(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sent = await fill_and_close(files)
    closed = segment_files(files.directory)[1]
    corrupt_byte(closed, 1)  # the magic
    assert files.reopen() == expected(sent)
    assert f"segment {closed.name}: damaged file header" in "\n".join(errors(caplog))
    # Read back later (a deep queue) and compacted through the same version.
    assert await files.restart() == expected(sent)


async def test_a_damaged_record_whose_segment_is_later_emptied_keeps_its_evidence(
    files: Harness,
) -> None:
    """The segment is deleted once its last live message goes; the damaged bytes stay
    under their second name."""
    sent = await fill_and_close(files)
    first = segment_files(files.directory)[0]
    corrupt_byte(first, offsets_in(first)[1] + 30)
    damaged = first.read_bytes()
    files.reopen()
    for message in sent:
        files.store.remove(Q1, message.id)
    assert await files.commit() is True
    assert await files.restart() == {}
    assert not first.exists()
    assert (first.parent / f"{first.name}.damaged").read_bytes() == damaged


# -- missing segment files ---------------------------------------------------------------------


@pytest.mark.parametrize("which", ["oldest", "middle", "newest"])
async def test_a_missing_segment_stops_recovery_unless_forced(
    files: Harness, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    from kanin.store.errors import RecoveryError

    sent = await fill_and_close(files)
    paths = segment_files(files.directory)
    gone = {"oldest": paths[0], "middle": paths[2], "newest": paths[-1]}[which]
    lost = {m.id for m in in_segment(files, sent, gone)}
    assert lost
    gone.unlink()
    with pytest.raises(RecoveryError, match=f"segment file\\(s\\) missing: {gone.name}") as info:
        files.reopen()
    assert "--force-recovery" in str(info.value)
    assert "\n" not in str(info.value)
    assert segment_files(files.directory) == [p for p in paths if p != gone]  # nothing touched
    # Forced: what exists is recovered, the loss logged at error level.
    files.store = FileStore(
        files.directory, files.loop, segment_bytes=files.segment_bytes, force_recovery=True
    )
    assert files.contents(files.store.recover()) == expected([m for m in sent if m.id not in lost])
    assert any(gone.name in e and "lost" in e for e in errors(caplog))
    # The loss is recorded: the next start does not stop on it again, and new segments
    # never reuse the lost number.
    later = files.enqueue(Q1, b"later")
    assert await files.commit() is True
    assert segment_of(files.directory)[later.id] > int(gone.stem)
    assert await files.restart() == expected([*(m for m in sent if m.id not in lost), later])


async def test_a_segment_the_store_deleted_is_not_missing(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sent = [files.enqueue(Q1, body(i, 400)) for i in range(40)]
    assert await files.commit() is True
    first = segment_files(files.directory)[0]
    emptied = in_segment(files, sent, first)
    for message in emptied:
        files.store.remove(Q1, message.id)
    assert await files.commit() is True
    assert await files.commit() is True  # the deletion's round
    assert not first.exists()
    survivors = [m for m in sent if m not in emptied]
    assert await files.restart() == expected(survivors)
    assert errors(caplog) == []


async def test_segments_deleted_at_start_up_are_not_missing(
    files: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dead segments still on disk at start-up (the process stopped before deleting them)
    are deleted by recovery, oldest first; the start after that finds nothing missing."""
    sent = await fill_and_close(files)
    files.reopen()
    # The segment log (Python in both builds) is patched: the committer's methods are
    # fixed in the compiled build.
    monkeypatch.setattr(files.file.committer._segments, "delete", lambda _number: None)
    for message in sent[:-1]:
        files.store.remove(Q1, message.id)
    assert await files.commit() is True
    await files.close()
    monkeypatch.undo()
    before = len(segment_files(files.directory))
    assert files.reopen() == expected(sent[-1:])  # recovery deletes the dead ones
    assert len(segment_files(files.directory)) < before
    assert await files.restart() == expected(sent[-1:])
    assert errors(caplog) == []


async def test_a_number_whose_file_was_never_created_is_not_missing(tmp_path: Path) -> None:
    """Every write to a segment can fail before its file exists while the store moves on
    to the next number: that number is a gap the manifest records, not a loss."""
    log = SegmentLog(tmp_path)
    assert list(log.recover()) == []
    record = records.encode_simple(records.REMOVE, 1, Q1)
    log.write([(1, record), (3, record)])  # 2 never written
    log.close()
    assert manifest.load(tmp_path) == manifest.Manifest(1, 3, {2})
    again = SegmentLog(tmp_path)
    assert [number for number, scan in again.recover() if list(scan)] == [1, 3]


async def test_a_crash_between_the_manifest_and_the_unlink_is_harmless(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The floor is saved before the file goes: a file left below the floor is read."""
    sent = await fill_and_close(files)
    saved = manifest.load(files.directory)
    assert saved is not None
    saved.raise_floor(2)
    manifest.save(files.directory, saved)
    assert files.reopen() == expected(sent)
    assert errors(caplog) == []


async def test_a_log_from_before_the_manifest_still_detects_gaps(files: Harness) -> None:
    from kanin.store.errors import RecoveryError

    await fill_and_close(files)
    manifest.path_in(files.directory).unlink()
    segment_files(files.directory)[1].unlink()
    with pytest.raises(RecoveryError, match="missing"):
        files.reopen()


async def test_an_unreadable_manifest_stops_recovery(files: Harness) -> None:
    from kanin.store.errors import RecoveryError

    await fill_and_close(files)
    manifest.path_in(files.directory).write_bytes(b"{not json")
    with pytest.raises(RecoveryError, match="segment manifest"):
        files.reopen()
