"""``.lock``: one process at a time in a data dir (Kafka's LogManager.lockLogDirs and
KafkaRaftManager.lockDataDir).

Format: a file named ``.lock`` in every dir of ``log.dirs`` and in the metadata dir, held with
``flock(LOCK_EX | LOCK_NB)`` for as long as the broker runs. Kafka's file is empty; ours holds the
holder's PID and a newline, written only by the process that holds the lock, after it took it, so a
refused process can say who holds the dir. The content is advice for that message; the flock alone
excludes.

What it guarantees, when the broker takes the locks first at start-up (odradek.broker.server.Broker.start):
- a second process given any dir of a live broker is refused before it reads meta.properties or
  the clean-shutdown marker, recovers a log, writes a checkpoint or contacts the metadata store;
- the refused process changes nothing in that dir: opening the existing ``.lock`` to try the lock
  leaves its content and mtime alone (only a brand-new dir gets a new, empty ``.lock``);
- a crashed holder's locks go with it: the kernel drops an flock when the last descriptor of the
  open file closes, so a dead process never blocks the restart (why not a PID file). A stale PID
  left by a crash is overwritten by the next holder.

flock locks belong to the open file, not the process: a second lock of the same dir through another
descriptor fails even in the same process, which is what a test running two brokers in-process on
one dir needs too. Dirs are compared by their real path, so a metadata dir that is also a log dir
(the default layout) is locked once.

An I/O error while locking (a dir that cannot be created, a ``.lock`` that cannot be opened) is not
a refusal: like Kafka, the dir is reported in ``LogDirLocks.failed`` and the caller takes it offline
(or stops, for the metadata dir).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable
from pathlib import Path

LOCK_FILE_NAME = ".lock"
# How long a refused process waits for the holder's PID to appear: the holder writes it just after
# taking the lock, so a refusal in between reads an empty file (or a crashed holder's stale PID).
PID_WAIT_S = 1.0


class LogDirInUseError(Exception):
    """Another process (or another descriptor in this one) holds the dir's ``.lock``."""

    def __init__(self, log_dir: Path, holder_pid: int | None) -> None:
        self.log_dir = log_dir
        self.holder_pid = holder_pid
        holder = f"process {holder_pid}" if holder_pid is not None else "another process (PID unknown)"
        # Kafka's words first, so an operator's search for them finds this.
        super().__init__(f"Failed to acquire lock on file {LOCK_FILE_NAME} in {log_dir}: {holder} is using this "
                         "directory. Stop it, or give this broker other log.dirs / metadata.log.dir.")


class LogDirLocks:
    """The ``.lock`` of each data dir this process holds; ``failed``: dirs that could not be locked
    because of an I/O error (the caller takes them offline)."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}  # real path -> descriptor holding the flock
        self.failed: dict[Path, OSError] = {}

    @classmethod
    def acquire(cls, dirs: Iterable[Path]) -> LogDirLocks:
        """Lock every dir in order (creating a missing dir). Raises LogDirInUseError at the first one
        another holder has, after releasing those taken so far."""
        locks = cls()
        try:
            for d in dirs:
                locks._lock(Path(d))
        except BaseException:
            locks.release()
            raise
        return locks

    def _lock(self, log_dir: Path) -> None:
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            real = os.path.realpath(log_dir)
            if real in self._fds:
                return
            # O_CREAT alone changes nothing when the file exists: no truncation, no new mtime.
            fd = os.open(os.path.join(real, LOCK_FILE_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self.failed[log_dir] = exc
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirInUseError(log_dir, holder_pid(log_dir)) from None
        except OSError as exc:
            os.close(fd)
            self.failed[log_dir] = exc
            return
        self._fds[real] = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, a refused process just cannot name us

    @property
    def held(self) -> list[str]:
        """The real paths of the dirs locked."""
        return list(self._fds)

    def release(self) -> None:
        """Give every lock up (shutdown). The PID is erased first, while the lock is still ours, so
        the next holder's PID is never erased."""
        for fd in self._fds.values():
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass  # a disk gone read-only: the stale PID is overwritten by the next holder
            os.close(fd)  # closing the last descriptor drops the flock
        self._fds.clear()


def holder_pid(log_dir: Path, wait_s: float = PID_WAIT_S) -> int | None:
    """The PID in ``log_dir``'s ``.lock``, if it names a live process; None if it never does within
    ``wait_s`` (the holder has not written it yet, or could not)."""
    path = Path(log_dir) / LOCK_FILE_NAME
    deadline = time.monotonic() + wait_s
    while True:
        pid = _read_pid(path)
        if pid is not None and _alive(pid):
            return pid
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True
