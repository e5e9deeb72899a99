"""odradek.storage.log_dir_lock: the ``.lock`` of a data dir, held by one open file at a time."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.storage.log_dir_lock import LOCK_FILE_NAME, LogDirInUseError, LogDirLocks

REPO = Path(__file__).resolve().parents[3]


def test_the_holder_writes_its_pid_after_taking_the_lock_and_erases_it_on_release(tmp_path: Path) -> None:
    d = tmp_path / "new" / "logs"  # a brand-new dir is created, with its .lock
    locks = LogDirLocks.acquire([d])
    assert (d / LOCK_FILE_NAME).read_text() == f"{os.getpid()}\n"
    assert locks.held == [os.path.realpath(d)] and not locks.failed
    locks.release()
    assert (d / LOCK_FILE_NAME).read_text() == ""  # Kafka's empty file once nobody holds it
    LogDirLocks.acquire([d]).release()  # and it can be taken again


def test_a_second_lock_through_another_descriptor_fails_naming_the_dir_and_the_pid(tmp_path: Path) -> None:
    held = LogDirLocks.acquire([tmp_path])
    try:
        with pytest.raises(LogDirInUseError) as refused:
            LogDirLocks.acquire([tmp_path])
        assert refused.value.log_dir == tmp_path and refused.value.holder_pid == os.getpid()
        assert str(refused.value).startswith(f"Failed to acquire lock on file .lock in {tmp_path}: "
                                             f"process {os.getpid()} is using this directory")
    finally:
        held.release()


def test_a_refused_lock_changes_nothing_in_the_dir(tmp_path: Path) -> None:
    held = LogDirLocks.acquire([tmp_path])
    lock_file = tmp_path / LOCK_FILE_NAME
    before = (lock_file.read_bytes(), lock_file.stat().st_mtime_ns, tmp_path.stat().st_mtime_ns)
    time.sleep(0.01)  # a rewrite now would show in the mtimes
    try:
        with pytest.raises(LogDirInUseError):
            LogDirLocks.acquire([tmp_path])
        assert (lock_file.read_bytes(), lock_file.stat().st_mtime_ns, tmp_path.stat().st_mtime_ns) == before
        assert os.listdir(tmp_path) == [LOCK_FILE_NAME]
    finally:
        held.release()


def test_a_refusal_releases_the_dirs_taken_before_it(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    held = LogDirLocks.acquire([theirs])
    try:
        with pytest.raises(LogDirInUseError) as refused:
            LogDirLocks.acquire([mine, theirs])
        assert refused.value.log_dir == theirs
        LogDirLocks.acquire([mine]).release()  # "mine" was given back
    finally:
        held.release()


def test_a_dir_named_twice_or_through_a_symlink_is_locked_once(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "logs", target_is_directory=True)
    (tmp_path / "logs").mkdir()
    locks = LogDirLocks.acquire([tmp_path / "logs", tmp_path / "link", tmp_path / "logs"])
    assert locks.held == [os.path.realpath(tmp_path / "logs")]
    locks.release()


def test_the_holder_is_another_process_named_by_its_pid_and_its_death_frees_the_dir(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from odradek.storage.log_dir_lock import LogDirLocks; "
         "locks = LogDirLocks.acquire([Path(sys.argv[1])]); print('locked', flush=True); time.sleep(60)",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(LogDirInUseError) as refused:
            LogDirLocks.acquire([tmp_path])
        assert refused.value.holder_pid == holder.pid
        assert f"process {holder.pid}" in str(refused.value)
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL: no release ran, the stale PID stays in the file, but the kernel dropped the flock.
    assert (tmp_path / LOCK_FILE_NAME).read_text() == f"{holder.pid}\n"
    locks = LogDirLocks.acquire([tmp_path])
    assert (tmp_path / LOCK_FILE_NAME).read_text() == f"{os.getpid()}\n"
    locks.release()


def test_an_unknown_holder_is_said_to_be_unknown(tmp_path: Path) -> None:
    """A holder that wrote no PID (Kafka itself, whose .lock is empty) is still refused."""
    import fcntl

    fd = os.open(tmp_path / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        t0 = time.monotonic()
        with pytest.raises(LogDirInUseError) as refused:
            LogDirLocks.acquire([tmp_path])
        assert refused.value.holder_pid is None and "PID unknown" in str(refused.value)
        assert time.monotonic() - t0 < 3
    finally:
        os.close(fd)


def test_an_io_error_is_not_a_refusal_but_a_failed_dir(tmp_path: Path) -> None:
    """A .lock that cannot be opened (here: a directory in its place) fails that dir only, as
    Kafka's "Disk error while locking directory" takes the dir offline; the other dirs are locked."""
    bad, good = tmp_path / "bad", tmp_path / "good"
    (bad / LOCK_FILE_NAME).mkdir(parents=True)
    locks = LogDirLocks.acquire([bad, good])
    try:
        assert list(locks.failed) == [bad] and isinstance(locks.failed[bad], IsADirectoryError)
        assert locks.held == [os.path.realpath(good)]
    finally:
        locks.release()
