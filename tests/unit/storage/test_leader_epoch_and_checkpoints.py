import uuid

import pytest

from odradek.storage.checkpoint_file import CheckpointFormatError, read_checkpoint, write_checkpoint
from odradek.storage.leader_epoch_cache import LeaderEpochCache
from odradek.storage.partition_metadata import (
    read_partition_metadata,
    topic_id_from_str,
    topic_id_to_str,
    write_partition_metadata,
)


def test_checkpoint_format_round_trip(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_checkpoint(path, [("orders", 0, 42), ("my-topic", 11, 7)])
    assert path.read_text() == "0\n2\norders 0 42\nmy-topic 11 7\n"
    assert read_checkpoint(path, 3) == [["orders", "0", "42"], ["my-topic", "11", "7"]]
    assert read_checkpoint(tmp_path / "missing", 3) == []
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\na 0 1\n", "0\n1\na 0\n", "0\n", "0\nx\n"])
def test_checkpoint_rejects_malformed(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointFormatError):
        read_checkpoint(path, 3)


def test_leader_epoch_cache_assign_truncate_persist(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.assign(1, 0) and cache.assign(2, 10) and cache.assign(4, 20)
    assert not cache.assign(3, 25)  # epochs only increase
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n2 10\n4 20\n"
    cache.truncate_from_end(15)
    assert cache.entries == [(1, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    assert LeaderEpochCache(tmp_path).entries == [(2, 12)]
    assert cache.assign(5, 12)  # a new epoch at the same start offset replaces the empty old one
    assert cache.entries == [(5, 12)]


def test_leader_epoch_cache_tolerates_garbage_file(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("garbage")
    assert LeaderEpochCache(tmp_path).entries == []


def test_partition_metadata(tmp_path):
    tid = uuid.UUID("0e3f0c5e-8b8a-4cbb-9d7a-6c8a7e5f0a11")
    text = topic_id_to_str(tid)
    assert len(text) == 22 and topic_id_from_str(text) == tid
    write_partition_metadata(tmp_path, text)
    assert (tmp_path / "partition.metadata").read_text() == f"version: 0\ntopic_id: {text}"
    assert read_partition_metadata(tmp_path) == text
    (tmp_path / "partition.metadata").write_text("version: 1\n")
    with pytest.raises(ValueError):
        read_partition_metadata(tmp_path)
    with pytest.raises(ValueError):
        write_partition_metadata(tmp_path, "short")
