"""Values the log hands back to the broker: :class:`AppendInfo` and :class:`FetchSlice`.

Immutable; safe to pass between the IO pool and the event loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple


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

    ``fd`` stays open until the segment is physically deleted (``file.delete.delay.ms`` after it
    left the log) or the log is closed, so a response may send it a little later. ``fd`` is -1 and
    ``size`` 0 for an empty slice (fetch at the log end / high watermark).
    """

    fd: int
    position: int
    size: int
    first_offset: int = -1  # base offset of the first batch in the slice
    next_offset: int = -1  # offset after the last batch in the slice

    def read_bytes(self) -> bytes:
        """The slice's bytes via pread (tests, tools, and responses that cannot sendfile)."""
        if self.size == 0:
            return b""
        chunks = []
        pos, remaining = self.position, self.size
        while remaining > 0:
            chunk = os.pread(self.fd, remaining, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


EMPTY_SLICE = FetchSlice(-1, 0, 0)
