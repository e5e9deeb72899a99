"""What the replica manager does when a log dir fails (Kafka's ReplicaManager.handleLogDirFailure).

The storage side is odradek.storage.log_manager: a log dir with an I/O error goes offline until the broker
restarts, and its logs are flagged offline, so their partitions answer KAFKA_STORAGE_ERROR. Here:
the one ERROR line, waiting fetches on those partitions answered now, the replicas in failed dirs
reported to the controller in a cluster (``on_offline_replicas``, through the broker's
registration; the controller moves them out of ISRs and leaderships, KIP-858), and with no online
log dir left, or the metadata log's dir failed (KIP-858), the broker stopped (``fail``: one line,
exit 1) instead of looking alive while serving nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.broker.replica.partition import Partition
    from odradek.controller.image import MetadataImage
    from odradek.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
OfflineReplicas = Callable[[list[tuple[uuid.UUID, int]]], None]


class LogDirFailures:
    """Reacts to a log dir going offline; tells whether the broker can still do its job."""

    def __init__(self, log_manager: LogManager, partitions: Mapping[TopicPartition, Partition],
                 image: Callable[[], MetadataImage], metadata_dir: Path | None,
                 call_on_loop: Callable[..., None], wake: Callable[[TopicPartition], None],
                 fail: Callable[[str], None], is_stopping: Callable[[], bool], is_started: Callable[[], bool],
                 on_offline_replicas: OfflineReplicas | None) -> None:
        """``fail(reason)`` stops the broker; ``on_offline_replicas`` tells the controller which
        replicas (topic id, partition) are in failed dirs (None: one node, nobody to tell)."""
        self.log_manager = log_manager
        self.partitions = partitions
        self._image = image
        self._metadata_dir = metadata_dir
        self._call_on_loop = call_on_loop
        self._wake = wake
        self._fail = fail
        self._is_stopping = is_stopping
        self._is_started = is_started
        self.on_offline_replicas = on_offline_replicas

    def dir_offline_threadsafe(self, log_dir: Path, reason: str) -> None:
        """LogManager's callback, from any thread (maybe inside a Log's lock): hand over to the loop
        (if it is closing, the shutdown reports offline dirs itself)."""
        self._call_on_loop(self.on_dir_offline, log_dir, reason)

    def on_dir_offline(self, log_dir: Path, reason: str) -> None:
        """A log dir went offline: say so once; stop the broker if it can no longer do its job.

        Its partitions already answer KAFKA_STORAGE_ERROR (their logs are flagged offline), so
        clients move on. Like Kafka, the broker shuts down when no online log dir is left or
        when the dir holds the metadata log (KIP-858): a broker that cannot write anything must
        not look alive.
        """
        if self._is_stopping():
            return  # found while shutting down: the shutdown's last line reports it
        hosted = [tp for tp in self.partitions if self.log_manager.log_dir_of(*tp) == log_dir]
        log.error("Log directory %s is offline (%s); its %d partitions answer KAFKA_STORAGE_ERROR until "
                  "the broker restarts", log_dir, reason, len(hosted))
        for tp in hosted:
            # Long-polling fetches on them answer now (with the error), not at their timeout.
            self._wake(tp)
        if self.on_offline_replicas is not None and self._is_started():  # (start-up's: report_after_start)
            self.on_offline_replicas(self.offline_replicas())
        fatal = self.fatal_failure()
        if fatal is not None and self._is_started():
            self._fail(fatal)  # (during start-up, the replica manager's start raises it)

    def report_after_start(self) -> None:
        """Tell the controller of the replicas in dirs that failed while the replica manager started."""
        if self.on_offline_replicas is not None and (offline := self.offline_replicas()):
            self.on_offline_replicas(offline)

    def offline_replicas(self) -> list[tuple[uuid.UUID, int]]:
        """(topic id, partition) of every hosted partition whose log dir is offline."""
        lm = self.log_manager
        image = self._image()
        out = []
        for topic, index in self.partitions:
            t = image.topics.get(topic)
            if t is not None and lm.log_dir_of(topic, index) in lm.offline_dirs:
                out.append((t.topic_id, index))
        return out

    def fatal_failure(self) -> str | None:
        """Kafka's reason to shut the broker down after log dir failures, or None."""
        lm = self.log_manager
        if not lm.online_dirs():
            return f"Shutdown broker because all log dirs in {', '.join(str(d) for d in lm.log_dirs)} have failed"
        metadata_dir = self._metadata_dir
        if metadata_dir is not None:
            for d in lm.offline_dirs:
                if Path(d).resolve() == Path(metadata_dir).resolve():
                    return f"Shutdown broker because the metadata log dir {d} has failed"
        return None
