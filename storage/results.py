"""Values the log hands back to the broker: :class:`AppendInfo` and :class:`FetchSlice`.

Immutable; safe to pass between the IO pool and the event loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

from odradek.storage.errors import KafkaStorageError, SegmentTruncatedError
from odradek.storage.file_handle import FileHandle


class AppendInfo(NamedTuple):
    """What an append did. A NamedTuple because one is built per produce: a frozen dataclass's
    __init__ costs more than the rest of a small append."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    num_batches: int
    size: int
    duplicate: bool = False  # True when producer state recognised a retried batch (nothing written)


@dataclass(frozen=True)
class FetchSlice:
    """A byte range of one segment file holding whole batches, ready for ``os.sendfile``.

    ``file`` is the segment's :class:`~odradek.storage.file_handle.FileHandle`: while the slice exists (a
    Fetch response carries it until broker/network/connection.py has sent it), the descriptor stays open
    on the same file even if the segment is closed or deleted meanwhile, so the bytes sent are
    always this segment's.
    ``file`` is None and ``size`` 0 for an empty slice (fetch at the log end / high watermark).
    """

    file: FileHandle | None
    position: int
    size: int
    first_offset: int = -1  # base offset of the first batch in the slice
    next_offset: int = -1  # offset after the last batch in the slice

    @property
    def fd(self) -> int:
        """The descriptor, valid while this slice is referenced; -1 for an empty slice."""
        return self.file.fd if self.file is not None else -1

    def read_bytes(self) -> bytes:
        """The slice's bytes via pread (tests, tools, and responses that cannot sendfile).

        Raises SegmentTruncatedError if the file was cut below the slice's end from outside, and
        KafkaStorageError (KAFKA_STORAGE_ERROR, retriable) if the read itself fails (EIO): a Fetch
        answers that partition with it, as Kafka does on an IOException, not the catch-all's
        UNKNOWN_SERVER_ERROR.
        """
        if self.size == 0 or self.file is None:
            return b""
        chunks = []
        fd = self.file.fd
        pos, remaining = self.position, self.size
        while remaining > 0:
            try:
                chunk = os.pread(fd, remaining, pos)
            except OSError as exc:
                raise KafkaStorageError(f"reading {remaining} bytes at {pos} of fd {fd} failed: {exc}") from exc
            if not chunk:
                raise SegmentTruncatedError(f"fd {fd}", pos, self.position + self.size)
            chunks.append(chunk)
            pos += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


EMPTY_SLICE = FetchSlice(None, 0, 0)
