"""Python stream-processing frameworks against Odradek (issue 32, section 1): a stateful application whose
state lives in a changelog topic, stopped and started again, must find its state where it left it.

- faust-streaming 0.15 (tests/support/faust_counter.py, a worker process of its own): an agent counts
  words in a table. Faust's documented behaviour: the table's changelog topic
  ``<app>-<table>-changelog`` is created compacted with the table's partition count; every change is
  written to it, and a worker that starts rebuilds the table from it before its agents process
  anything ("Worker ready" in its log). So after a clean stop (SIGTERM: faust commits the agent's
  offsets and flushes its producer) and a restart, the counts go on from where they were.

- quixstreams 3.28 (tests/support/quix_counter.py, a process of its own with quixstreams and the
  confluent-kafka 2.12 it requires on PYTHONPATH: tests/support/stream_apps.py installs them apart from
  the venv's 2.16): a stateful ``apply`` counts words in a RocksDB store. Its documented behaviour:
  every change goes to the store's changelog topic ``changelog__<group>--<topic>--default``, created
  compacted; a process that gets the partition without the store on its disk (a new machine: here an
  empty state dir) restores it from the changelog before it processes the partition's records.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.real_kafka import CLASSIC_GROUP, FETCH, PRODUCE, Target, create_topic, open_target, unique
from tests.support.stream_apps import QUIXSTREAMS_DIR, quixstreams_installed
from tests.support.topic_reader import read_topic
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def odradek(tmp_path):
    with open_target("odradek", tmp_path / "odradek") as t:
        yield t


def _produce(bootstrap: str, topic: str, words: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for word in words:
        producer.produce(topic, word.encode(), key=word.encode())
    assert producer.flush(30) == 0


def _counted(target: Target, topic: str, n: int) -> list[str]:
    """The first ``n`` lines the application wrote, once there are ``n``."""
    def read() -> list[str] | None:
        records = read_topic(target.bootstrap, topic, 1)[0]
        return [v.decode() for _, v in records] if len(records) >= n else None

    return wait_until(read, timeout=45, interval=0.5, what=f"{n} records in {topic}")[:n]


def _topic_facts(bootstrap: str, topic: str) -> tuple[int, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return partitions, admin.describe_configs([resource])[resource].result(timeout=10)["cleanup.policy"].value


class _Worker:
    """One stream application process (``command``), logging to a file."""

    def __init__(self, command: list[str], work_dir: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = work_dir / f"app-{time.monotonic_ns()}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"faust worker exited {self.proc.returncode}:\n{self.log()[-6000:]}"
            return "Worker ready" in self.log()

        wait_until(ready, timeout=60, interval=0.2, what="faust's 'Worker ready'")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"stream app ignored SIGTERM for 30 s:\n{self.log()[-6000:]}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_faust_table_is_restored_from_its_changelog_after_a_restart(odradek, tmp_path) -> None:
    pytest.importorskip("faust", reason="faust-streaming is not installed (it is in the test extra)")
    odradek.require(*PRODUCE, *FETCH, *CLASSIC_GROUP, "CreateTopics", "DescribeConfigs")
    app_id = unique("faust-counter")
    words, counted = f"{app_id}-words", f"{app_id}-counted"
    create_topic(odradek, words)
    create_topic(odradek, counted)

    command = [sys.executable, "-m", "tests.support.faust_counter", odradek.bootstrap, app_id, str(tmp_path / "data")]
    worker = _Worker(command, tmp_path)
    try:
        worker.wait_ready()
        _produce(odradek.bootstrap, words, ["apple", "pear", "apple"])
        assert _counted(odradek, counted, 3) == ["apple=1", "pear=1", "apple=2"]
        assert _topic_facts(odradek.bootstrap, f"{app_id}-counts-changelog") == (1, "compact")
        worker.stop()

        worker = _Worker(command, tmp_path)
        worker.wait_ready()
        _produce(odradek.bootstrap, words, ["apple", "pear", "plum"])
        # Restored: apple and pear count on from 2 and 1 (a worker without its table would say 1 and 1).
        assert _counted(odradek, counted, 6)[3:] == ["apple=3", "pear=2", "plum=1"]
        worker.stop()
    except BaseException:
        print(worker.log()[-8000:])
        raise
    finally:
        worker.kill()


def test_quixstreams_state_is_restored_from_its_changelog_on_a_new_machine(odradek, tmp_path) -> None:
    if not quixstreams_installed():
        pytest.skip(f"quixstreams is not installed in {QUIXSTREAMS_DIR} (`python -m tests.support.stream_apps "
                    "install`, which `make test` runs)")
    odradek.require(*PRODUCE, *FETCH, *CLASSIC_GROUP, "CreateTopics", "DescribeConfigs")
    app_id = unique("quix-counter")
    words, counted = f"{app_id}-words", f"{app_id}-counted"
    create_topic(odradek, words)
    create_topic(odradek, counted)
    # quixstreams and its confluent-kafka 2.12 first, so neither the venv's confluent-kafka nor this
    # repository's modules are imported by the application.
    env = {**os.environ, "PYTHONPATH": str(QUIXSTREAMS_DIR)}
    app = str(REPO / "tests" / "support" / "quix_counter.py")

    worker = _Worker([sys.executable, app, odradek.bootstrap, app_id, str(tmp_path / "state-1")], tmp_path, env)
    try:
        _produce(odradek.bootstrap, words, ["apple", "pear", "apple"])
        assert _counted(odradek, counted, 3) == ["apple=1", "pear=1", "apple=2"]
        assert _topic_facts(odradek.bootstrap, f"changelog__{app_id}--{words}--default") == (1, "compact")
        worker.stop()
        assert worker.proc.returncode == 0, worker.log()[-6000:]

        # A new machine: an empty state dir, so the store can only come back from the changelog topic.
        worker = _Worker([sys.executable, app, odradek.bootstrap, app_id, str(tmp_path / "state-2")], tmp_path, env)
        _produce(odradek.bootstrap, words, ["apple", "pear", "plum"])
        assert _counted(odradek, counted, 6)[3:] == ["apple=3", "pear=2", "plum=1"]
        worker.stop()
    except BaseException:
        print(worker.log()[-8000:])
        raise
    finally:
        worker.kill()
