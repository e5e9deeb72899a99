"""A fetch slice keeps its segment's file open after the log closes it (storage/file_handle.py)."""

from __future__ import annotations

import gc
import os

import pytest
from log_test_helpers import batch, open_log

from odradek.storage.errors import KafkaStorageError, SegmentTruncatedError


def fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def test_slice_reads_its_own_file_after_the_log_is_deleted_and_the_fd_number_reused(tmp_path):
    log = open_log(tmp_path / "a-0")
    log.append(batch(3, value_size=100, tag=1), leader_epoch=0)
    piece = log.read(0, 1 << 20)
    expected = piece.read_bytes()
    fd = piece.fd
    log.delete()  # closes every segment and removes the directory
    assert fd_is_open(fd), "the slice's reference keeps the descriptor open"
    # Files opened now cannot take the slice's number, so its bytes are still the deleted file's.
    other = [os.open(tmp_path / f"other{i}", os.O_CREAT | os.O_RDWR) for i in range(8)]
    try:
        assert fd not in other
        assert piece.read_bytes() == expected
    finally:
        for o in other:
            os.close(o)
    del piece
    gc.collect()
    assert not fd_is_open(fd), "closed with the last reference"


def test_closing_a_log_with_no_pending_slice_closes_the_fd_at_once(tmp_path):
    log = open_log(tmp_path / "b-0")
    log.append(batch(1), leader_epoch=0)
    fd = log.segments[0].fd
    log.close()
    assert not fd_is_open(fd)
    with pytest.raises(KafkaStorageError):
        log.read(0, 100)


def test_a_file_cut_from_outside_is_reported_not_read_short(tmp_path):
    log = open_log(tmp_path / "c-0")
    for i in range(5):
        log.append(batch(2, value_size=1000, tag=i), leader_epoch=0)
    piece = log.read(0, 1 << 20)
    os.truncate(log.segments[0].log_path, piece.size // 2)
    # The latest batches' slice is taken from memory (Segment.tail_slice), not from the file: the
    # cut shows when the slice is sent, as in Kafka (FileRecords.writeTo: "truncated during write").
    with pytest.raises(SegmentTruncatedError) as info:
        log.read(0, 1 << 20).read_bytes()
    assert "truncated under the broker" in str(info.value)
    with pytest.raises(SegmentTruncatedError):
        piece.read_bytes()
    log.close()


def test_a_failed_read_of_a_slice_is_a_storage_error_not_an_os_error(tmp_path):
    """A Fetch that cannot use sendfile reads its slices with pread; a read that fails (EIO on a
    dying disk; EBADF here) must reach the fetch as KAFKA_STORAGE_ERROR, which the replica manager
    answers per partition, not as an OSError that the dispatcher turns into UNKNOWN_SERVER_ERROR."""
    from odradek.protocol.errors import ErrorCode
    from odradek.storage.results import FetchSlice

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert FetchSlice(_Unowned(fd), 10, 20).read_bytes() == b"x" * 20  # type: ignore[arg-type]
    finally:
        os.close(fd)
    # A descriptor pread refuses (EISDIR here; EIO on a dying disk). Not a closed number: another
    # thread could be given it again meanwhile.
    refusing = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(KafkaStorageError) as info:
            FetchSlice(_Unowned(refusing), 10, 20).read_bytes()  # type: ignore[arg-type]
    finally:
        os.close(refusing)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR


class _Unowned:
    """A handle-shaped holder of an fd number that is not open (and must not be closed)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
