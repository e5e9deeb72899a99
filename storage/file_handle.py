"""An open file descriptor that closes when its last holder lets go (:class:`FileHandle`).

A fetch response does not copy record bytes: it carries a file region that the connection writes
with ``os.sendfile`` later, maybe much later for a slow reader, and maybe on another network
thread. Meanwhile the segment may be closed (topic deleted, retention, DeleteRecords, compaction
swap, log dir failure). Were the region to hold only the fd *number*, the number could be closed
and reused by another file, and the response would carry that file's bytes.

So the segment owns its .log descriptor through a FileHandle, and every slice or region read from
it holds a reference to the same handle object. Closing the segment only drops the segment's own
reference; the descriptor is closed when the last reference goes: at once if nothing is pending
(the usual case, identical to closing it directly), else when the last pending region has been
sent or dropped. The count is CPython's own reference count, so there is no acquire/release to
forget on any of the paths where a response is dropped (connection lost, long poll re-read,
encoding failure): whatever drops the object drops the reference. Reference-count updates and
``__del__`` are atomic under the GIL, so network threads and the handler thread may share a
handle. A handle caught in a reference cycle closes at the next garbage collection: later, never
wrong.

Cost: one attribute load per region; no syscall (``os.dup`` per region would cost two syscalls and
an fd per pending partition).
"""

from __future__ import annotations

import os
from collections.abc import Callable


class FileHandle:
    """Owns ``fd``; closes it when garbage (see the module docstring). ``fd`` never changes."""

    __slots__ = ("fd", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:  # bound early: still callable at interpreter exit
        try:
            _close(self.fd)
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"FileHandle(fd={self.fd})"
