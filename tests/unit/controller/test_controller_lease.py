"""LeaseFile, the local lease store's synchronous core: monotonic epochs, exclusion between holders."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from odradek.controller.lease import Lease, LeaseFile, LeaseLostError
from odradek.protocol.errors import ErrorCode


def test_epoch_increases_across_acquisitions_and_restarts(tmp_path: Path) -> None:
    path = tmp_path / "controller.lease"
    store = LeaseFile(path)
    first = store.try_acquire(1, ttl_ms=1000, now_ms=0)
    assert first == Lease(1, 1, 1000)
    store.release(first)
    second = store.try_acquire(1, ttl_ms=1000, now_ms=10)
    assert second is not None and second.epoch == 2
    store.close()  # "crash": lock dropped, file says holder 1 until 1010

    restarted = LeaseFile(path)
    third = restarted.try_acquire(1, ttl_ms=1000, now_ms=20)
    assert third is not None and third.epoch == 3
    assert restarted.current(now_ms=30) == third
    restarted.release(third)
    assert restarted.current(now_ms=30) is None


def test_second_holder_cannot_acquire_while_held(tmp_path: Path) -> None:
    path = tmp_path / "controller.lease"
    a = LeaseFile(path)
    b = LeaseFile(path)
    lease = a.try_acquire(1, ttl_ms=1000, now_ms=0)
    assert lease is not None
    assert b.try_acquire(2, ttl_ms=1000, now_ms=5) is None
    # Even after the TTL lapses, the flock keeps the holder exclusive on this machine.
    assert b.try_acquire(2, ttl_ms=1000, now_ms=5000) is None
    a.release(lease)
    taken = b.try_acquire(2, ttl_ms=1000, now_ms=6000)
    assert taken is not None and taken.holder_id == 2 and taken.epoch == lease.epoch + 1
    # The old holder's lease is gone for good.
    with pytest.raises(LeaseLostError) as e:
        a.renew(lease, now_ms=6001)
    assert e.value.code == ErrorCode.NOT_CONTROLLER


def test_other_process_cannot_acquire(tmp_path: Path) -> None:
    path = tmp_path / "controller.lease"
    store = LeaseFile(path)
    lease = store.try_acquire(1, ttl_ms=60_000, now_ms=0)
    assert lease is not None
    script = textwrap.dedent(f"""
        from pathlib import Path
        from controller.lease import LeaseFile
        print(LeaseFile(Path({str(path)!r})).try_acquire(2, 1000, 0))
    """)
    repo = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None"
    store.release(lease)
    out = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, check=True)
    assert "epoch=2" in out.stdout


def test_renew_extends_and_rejects_expired_or_superseded(tmp_path: Path) -> None:
    store = LeaseFile(tmp_path / "controller.lease")
    lease = store.try_acquire(1, ttl_ms=100, now_ms=0)
    assert lease is not None
    renewed = store.renew(lease, now_ms=50)
    assert renewed == Lease(1, 1, 150)
    with pytest.raises(LeaseLostError):
        store.renew(renewed, now_ms=150)  # expired: must re-acquire with a new epoch
    again = store.try_acquire(1, ttl_ms=100, now_ms=200)
    assert again is not None and again.epoch == 2
    with pytest.raises(LeaseLostError):
        store.renew(lease, now_ms=210)  # old epoch


def test_bad_ttl_rejected(tmp_path: Path) -> None:
    store = LeaseFile(tmp_path / "controller.lease")
    with pytest.raises(ValueError):
        store.try_acquire(1, ttl_ms=0, now_ms=0)
    assert store.current(0) is None
