"""The host supervisor's metadata store (controller/embedded_etcd.py) keeps etcd's contract.

The etcd store tests (test_etcd_stores.py, test_etcd_snapshots.py: lease fencing, appends racing,
snapshots in chunks, compaction, historical reads with etcdctl, watches) are run against it as they run
against a real etcd (ODRADEK_TEST_ETCD=embedded); the tests here cover what is its own: its log on
disk across restarts, a torn tail, leases that lapse, a request over etcd's size limit.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT
from odradek.broker.launcher.etcd_binary import find_etcd_binary
from odradek.controller.embedded_etcd import MAX_REQUEST_BYTES, EmbeddedEtcd
from odradek.controller.etcd_client import EtcdError, etcd_client


def test_the_etcd_store_tests_pass_against_the_embedded_store() -> None:
    # No etcd server is needed, but the snapshot tests read old revisions with etcd's own etcdctl.
    etcdctl, why = find_etcd_binary("etcdctl")
    if etcdctl is None:
        pytest.skip(why)
    tests = Path(PACKAGE_ROOT) / "tests" / "unit" / "controller"
    env = {**os.environ, "ODRADEK_TEST_ETCD": "embedded"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                          str(tests / "test_etcd_stores.py"), str(tests / "test_etcd_snapshots.py")],
                         cwd=PACKAGE_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout, run.stdout[-2000:]


async def test_keys_and_revision_survive_a_restart_leased_keys_do_not(tmp_path: Path) -> None:
    server = await EmbeddedEtcd(tmp_path).start()
    client = etcd_client(server.endpoint)
    try:
        await client.put(b"/a", b"1")
        await client.put(b"/a", b"2")
        lease = await client.lease(30)
        await client.put(b"/session", b"holder", lease=lease)
        revision = (await client.get(b"/a")).mod_revision
    finally:
        await client.close()
        await server.stop()
    server = await EmbeddedEtcd(tmp_path).start()
    client = etcd_client(server.endpoint)
    try:
        kv = await client.get(b"/a")
        assert (kv.value, kv.mod_revision, kv.version) == (b"2", revision, 2)
        # The lease's holder died with the store's process, as etcd's would have lapsed by its TTL.
        assert await client.get(b"/session") is None
        await client.put(b"/b", b"3")
        assert (await client.get(b"/b")).mod_revision > revision  # revisions never go back
    finally:
        await client.close()
        await server.stop()


async def test_a_torn_tail_is_cut_and_what_came_before_is_kept(tmp_path: Path) -> None:
    server = await EmbeddedEtcd(tmp_path).start()
    client = etcd_client(server.endpoint)
    try:
        await client.put(b"/kept", b"yes")
    finally:
        await client.close()
        await server.stop()
    wal = tmp_path / "store.wal"
    whole = wal.stat().st_size
    with open(wal, "ab") as f:
        f.write(b"\x00\x00\x01\x00\x12\x34")  # a record header and no payload: a crash mid-append
    server = await EmbeddedEtcd(tmp_path).start()
    client = etcd_client(server.endpoint)
    try:
        assert (await client.get(b"/kept")).value == b"yes"
        assert wal.stat().st_size == whole
        await client.put(b"/after", b"ok")
    finally:
        await client.close()
        await server.stop()
    server = await EmbeddedEtcd(tmp_path).start()
    client = etcd_client(server.endpoint)
    try:
        assert (await client.get(b"/after")).value == b"ok"
    finally:
        await client.close()
        await server.stop()


async def test_a_lease_not_kept_alive_lapses_and_takes_its_keys(tmp_path: Path) -> None:
    server = await EmbeddedEtcd(tmp_path).start()
    client = etcd_client(server.endpoint)
    try:
        kept, lapsing = await client.lease(1), await client.lease(1)
        await client.put(b"/kept", b"k", lease=kept)
        await client.put(b"/lapsing", b"l", lease=lapsing)
        for _ in range(8):
            await asyncio.sleep(0.25)
            await client.refresh_lease(kept.id)
        assert await client.get(b"/lapsing") is None
        assert (await client.get(b"/kept")).value == b"k"
        with pytest.raises(EtcdError, match="lease not found"):
            await client.put(b"/orphan", b"x", lease=lapsing)
        assert await client.get(b"/orphan") is None
    finally:
        await client.close()
        await server.stop()


async def test_a_request_over_etcds_limit_is_refused_whole(tmp_path: Path) -> None:
    server = await EmbeddedEtcd(tmp_path).start()
    client = etcd_client(server.endpoint)
    try:
        t = client.transactions
        with pytest.raises(EtcdError, match="too large"):
            await client.transaction(compare=[], success=[t.put(b"/small", b"s"),
                                                          t.put(b"/big", b"x" * MAX_REQUEST_BYTES)],
                                     failure=[])
        assert await client.get(b"/small") is None and await client.get(b"/big") is None
        await client.put(b"/big", b"x" * (MAX_REQUEST_BYTES // 2))
        assert len((await client.get(b"/big")).value) == MAX_REQUEST_BYTES // 2
    finally:
        await client.close()
        await server.stop()
