"""All partition logs of a broker across its log dirs (Kafka's LogManager).

Each log dir (``log.dirs``) holds::

    <topic>-<partition>/                  one Log per partition (odradek.storage.log)
    <topic>-<partition>.<uuid>-future/    a copy being made of a partition whose log lives in another
                                          dir of this broker (AlterReplicaLogDirs; see below)
    <topic>-<partition>.<uuid>-delete/    a deleted partition awaiting removal
    recovery-point-offset-checkpoint      "0\\n<count>\\n<topic> <partition> <offset>\\n..."
    log-start-offset-checkpoint           same format
    meta.properties                       node.id, cluster.id, directory.id, version=1
    .lock                                 flock'd by the running broker, holds its PID (odradek.storage.log_dir_lock)
    .kafka_cleanshutdown                  present only between a clean shutdown and the next start

A new partition goes to the dir AlterReplicaLogDirs named for it before it existed (Kafka's
preferred log dir), else to the online dir with the fewest partitions (future logs counted).

Future logs (Kafka's KIP-113, ``UnifiedLog.logFutureDirName``): moving a partition to another log
dir makes a second Log of it there, ``<topic>-<partition>.<uuid>-future``, which the broker's mover
(odradek.broker.replica.log_dir_mover) fills with the partition's batches while the partition keeps serving
from its current log; :meth:`replace_current_with_future` then swaps it in (Log.replace_with_future:
the old directory is renamed ``-delete`` first, then the future one to ``<topic>-<partition>``). A
future log is not served, retained, flushed by flush.ms or cleaned; it is checkpointed with its dir.
At start-up a future log is loaded like a current one; if its partition has a current log the copy
resumes (Kafka's maybeAddLogDirFetchers), and if it has none - a crash between the swap's two
renames, whose ``-delete`` half is then removed - it was complete, and is promoted to the current
log (Kafka's recoverAbandonedFutureLogs), unless an offline dir may hold the current one.

Crash story: :meth:`startup` opens every partition; in a dir without the clean-shutdown marker
each log is recovered from its checkpointed recovery point (odradek.storage.log). The marker is removed
once loading is done, so a crash from then on is seen as unclean. :meth:`shutdown` flushes and
closes every log, writes both checkpoints, then the marker. Checkpoints are written atomically.

Disk errors (Kafka's LogDirFailureChannel): a Log that hits an OSError calls back
:meth:`_on_dir_failure`, which takes its whole log dir offline: that dir's logs are flagged offline
(closed without flushing at shutdown) and any later access to them raises KafkaStorageError; other
dirs keep working. A dir stays offline until the broker restarts, as in Kafka: its logs may have
lost an unflushed tail, and only start-up recovery re-validates them. ``on_dir_offline(dir,
reason)`` tells the owner (the replica manager, which shuts the broker down when no online dir
is left); it is called from whichever thread saw the error, possibly inside a Log's lock, so it
must only schedule work.

Creating a log (:meth:`get_or_create_log`) can fail too. ENOSPC, EROFS, EIO, EACCES, ... are
faults of the dir: like Kafka, the dir goes offline and the caller gets KafkaStorageError. EMFILE,
ENFILE and ENOMEM are not: they are limits of this process, not of the disk, and a burst of
partition creation can hit them and then pass. Kafka would take the dir offline for them too (its
"Too many open files" IOException), which turns a transient shortage into a dead dir (and, with
one dir, a dead broker); here the creation fails with KafkaStorageError, the half-made partition
directory is removed and the dir stays online. A log absent from the online dirs is never
created afresh while it may exist in an offline dir (Kafka refuses any non-new log creation while
a dir is offline; we check the offline dirs for the partition directory instead), so a restart
with a dead disk never serves an empty log in place of the real one.

Threading: every method does blocking file work and belongs on the IO pool, never the event loop.
The registry of logs is guarded by a lock, so methods may be called from several pool threads;
per-partition ordering (appends serialized per partition) is the caller's job, the Log's own lock
enforces it anyway. ``get_log`` is cheap and safe from any thread.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from odradek.storage import clock
from odradek.storage.checkpoint_file import (
    CheckpointFormatError,
    fsync_dir,
    read_checkpoint,
    write_atomically,
    write_checkpoint,
)
from odradek.storage.errors import KafkaStorageError, LogDirOfflineError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.partition_metadata import topic_id_to_str
from odradek.storage.producer_state_contract import ProducerState
from odradek.storage.segment import LogSegment

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
# The controller's metadata log lives in a log dir like a partition (as KRaft's does) but is not
# one: the log manager must neither load nor delete it.
RESERVED_TOPICS = frozenset({"__cluster_metadata"})
FUTURE_DIR_SUFFIX = "-future"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# Kafka's logFutureDirName: "<topic>-<partition>.<uuid without dashes>-future".
_FUTURE_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]{32}-future$")
# Preferred dirs remembered for partitions not hosted yet: Kafka keeps every one until the replica
# is made; a bound keeps a client naming made-up partitions from growing the map without end.
MAX_PREFERRED_DIRS = 10_000
# Errors of this process's resources rather than of the disk: a log creation hitting one fails,
# but the log dir stays online (see the module docstring).
TRANSIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})

TopicPartition = tuple[str, int]
# (topic, partition, its log) -> the partition's high watermark, None when not hosted here.
HighWatermarkOf = Callable[[str, int, Log], int | None]


class LogManager:
    def __init__(self, log_dirs: list[Path], default_config: LogConfig, *, node_id: int | None = None,
                 cluster_id: str | None = None,
                 producer_state_factory: Callable[[str, int, Path], ProducerState] | None = None,
                 progress_interval_s: float = 10.0) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.producer_state_factory = producer_state_factory
        # Loading a big log dir (recovery, index rebuilds) takes minutes; say how far it got at
        # most this often, as Kafka's "Recovering ... X% done" lines do.
        self.progress_interval_s = progress_interval_s
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        # Future logs (copies being made in another dir, see the module docstring) and their dirs.
        self._futures: dict[TopicPartition, Log] = {}
        self._future_dir_of: dict[TopicPartition, Path] = {}
        # Kafka's preferredLogDirs: where AlterReplicaLogDirs asked a not-yet-hosted partition to live.
        self._preferred_dirs: dict[TopicPartition, Path] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        # Replaced, never mutated: the loop and the IO threads iterate it without a lock while a
        # failing IO thread marks another dir offline, so each reader sees one consistent set.
        self.offline_dirs: frozenset[Path] = frozenset()
        # Why each dir went offline (the first error seen), for logs and DescribeLogDirs users.
        self.offline_reasons: dict[Path, str] = {}
        self.on_dir_offline: Callable[[Path, str], None] | None = None
        self._lock = threading.RLock()
        self._offline_lock = threading.Lock()

    # ------------------------------------------------------------------------------------------
    # startup and shutdown

    def startup(self, topic_configs: Mapping[str, LogConfig] | None = None, now_ms: int | None = None) -> None:
        """Load every partition in every log dir, recovering those of uncleanly stopped dirs."""
        now = clock.now_ms() if now_ms is None else now_ms
        self._topic_configs.update(topic_configs or {})
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue  # it failed before loading (its .lock could not be taken): not touched
            try:
                self._load_dir(log_dir, now)
            except (OSError, CheckpointFormatError, KafkaStorageError) as exc:
                # Kafka refuses to start on a foreign meta.properties; we keep the other dirs.
                self._mark_offline(log_dir, exc)
        self._promote_abandoned_futures()

    def _load_dir(self, log_dir: Path, now: int) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._check_meta_properties(log_dir)
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_offsets(log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_offsets(log_dir / LOG_START_OFFSET_CHECKPOINT)
        partitions: list[tuple[TopicPartition, str]] = []
        futures: list[tuple[TopicPartition, str]] = []
        for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)  # deletion interrupted by a crash
                continue
            future = _FUTURE_DIR.match(entry.name)
            if future is not None:
                futures.append(((future["topic"], int(future["partition"])), entry.path))
                continue
            match = _PARTITION_DIR.match(entry.name)
            if match is None or match["topic"] in RESERVED_TOPICS:
                continue
            partitions.append(((match["topic"], int(match["partition"])), entry.path))
        for tp, path in futures:
            self._load_future(log_dir, tp, Path(path), clean, recovery_points, start_offsets, now)
        total = len(partitions)
        mode = "clean shutdown" if clean else "unclean shutdown: recovering"
        started = last_report = time.monotonic()
        loaded_bytes = 0
        for done, (tp, path) in enumerate(partitions, 1):
            log = Log.open(
                Path(path), self._topic_configs.get(tp[0], self.default_config),
                recovery_point=recovery_points.get(tp, 0), log_start_offset=start_offsets.get(tp, 0),
                clean_shutdown=clean, producer_state=self._producer_state(tp, Path(path)), now_ms=now,
                on_dir_failure=self._on_dir_failure,
            )
            with self._lock:
                self._logs[tp] = log
                self._log_dir_of[tp] = log_dir
            loaded_bytes += log.size_in_bytes  # a sum over the segments already in memory
            # One clock read per partition: negligible next to opening its files.
            now_mono = time.monotonic()
            if now_mono - last_report >= self.progress_interval_s and done < total:
                last_report = now_mono
                logger.info("Loading logs in %s (%s): %d/%d partitions, %d%% done, %.1f MB/s",
                            log_dir, mode, done, total, done * 100 // total,
                            loaded_bytes / 1e6 / max(now_mono - started, 1e-9))
        elapsed = time.monotonic() - started
        # A new, empty dir has no clean-shutdown marker either: "unclean" would alarm a first start.
        how = "clean shutdown" if clean else "unclean shutdown, recovered" if total else "no logs yet"
        logger.info("Loaded %d partitions (%.1f MB) in %s in %.1f s (%s)", total, loaded_bytes / 1e6, log_dir,
                    elapsed, how)
        if clean:
            marker.unlink()
            fsync_dir(log_dir)

    def _load_future(self, log_dir: Path, tp: TopicPartition, path: Path, clean: bool,
                     recovery_points: dict[TopicPartition, int], start_offsets: dict[TopicPartition, int],
                     now: int) -> None:
        """Open a future log found at start-up (its dir's checkpoints hold its offsets: a partition
        never has its current and its future log in one dir)."""
        with self._lock:
            if tp in self._futures:
                # Kafka refuses to start on two future dirs of one partition; this one is left alone.
                logger.error("A second future log of %s-%d in %s (the first is in %s): not loaded", *tp, path,
                             self._future_dir_of[tp])
                return
        log = Log.open(path, self._topic_configs.get(tp[0], self.default_config),
                       recovery_point=recovery_points.get(tp, 0), log_start_offset=start_offsets.get(tp, 0),
                       clean_shutdown=clean, producer_state=self._producer_state(tp, path), now_ms=now,
                       on_dir_failure=self._on_dir_failure)
        with self._lock:
            self._futures[tp] = log
            self._future_dir_of[tp] = log_dir

    def _promote_abandoned_futures(self) -> None:
        """After loading: a future log whose partition has no current log is the completed copy of
        a swap cut short between its renames (Log.replace_with_future), and becomes the current log
        (Kafka's recoverAbandonedFutureLogs); unless an offline dir may hold the current log."""
        with self._lock:
            orphans = [tp for tp in self._futures if tp not in self._logs]
        for tp in orphans:
            name = f"{tp[0]}-{tp[1]}"
            try:
                self._check_not_in_offline_dir(name)
            except KafkaStorageError as exc:
                logger.warning("Future log of %s kept as it is: %s", name, exc)
                continue
            with self._lock:
                log, log_dir = self._futures.pop(tp), self._future_dir_of.pop(tp)
                try:
                    log.rename_dir(log_dir / name)
                    fsync_dir(log_dir)
                except OSError as exc:
                    log.close_quietly()
                    self._mark_offline(log_dir, exc)
                    continue
                self._logs[tp] = log
                self._log_dir_of[tp] = log_dir
            logger.info("Promoted the future log of %s in %s: its swap was interrupted after the old log "
                        "was marked for deletion", name, log_dir)

    def _producer_state(self, tp: TopicPartition, dir: Path) -> ProducerState | None:
        return self.producer_state_factory(tp[0], tp[1], dir) if self.producer_state_factory else None

    def _check_meta_properties(self, log_dir: Path) -> None:
        path = log_dir / META_PROPERTIES
        if path.exists():
            props = dict(line.split("=", 1) for line in path.read_text().splitlines()
                         if "=" in line and not line.startswith("#"))
            if self.cluster_id is not None and props.get("cluster.id", self.cluster_id) != self.cluster_id:
                raise KafkaStorageError(f"{path}: cluster.id {props.get('cluster.id')} != {self.cluster_id}")
            if self.node_id is not None and props.get("node.id", str(self.node_id)) != str(self.node_id):
                raise KafkaStorageError(f"{path}: node.id {props.get('node.id')} != {self.node_id}")
            return
        lines = ["#", f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}"]
        if self.cluster_id is not None:
            lines.append(f"cluster.id={self.cluster_id}")
        lines.append(f"directory.id={topic_id_to_str(uuid.uuid4())}")
        if self.node_id is not None:
            lines.append(f"node.id={self.node_id}")
        lines.append("version=1")
        write_atomically(path, ("\n".join(lines) + "\n").encode())

    @staticmethod
    def _read_offsets(path: Path) -> dict[TopicPartition, int]:
        return {(t, int(p)): int(o) for t, p, o in read_checkpoint(path, 3)}

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker per dir."""
        with self._lock:
            for _tp, log, log_dir in self._every_log():
                if log_dir in self.offline_dirs:
                    log.close_quietly()
                    continue
                try:
                    log.close()
                except KafkaStorageError:
                    pass  # its dir just went offline; no marker for it below
            self.checkpoint()
            for log_dir in self.log_dirs:
                if log_dir in self.offline_dirs:
                    continue
                try:
                    write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, b'{"version":0,"brokerEpoch":-1}')
                except OSError as exc:
                    self._mark_offline(log_dir, exc)

    # ------------------------------------------------------------------------------------------
    # partitions

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The partition's log, None if absent; KafkaStorageError if its dir is offline."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None and self._log_dir_of[tp] in self.offline_dirs:
            raise KafkaStorageError(f"{topic}-{partition} is in offline log dir {self._log_dir_of[tp]}")
        return log

    def get_or_create_log(self, topic: str, partition: int, topic_id: str | None = None,
                          config: LogConfig | None = None) -> Log:
        """The partition's log, created in the online dir with the fewest partitions if absent.

        KafkaStorageError (with the reason) when it cannot be created: no online dir, the log may
        live in an offline dir, or the creation failed (see the module docstring for which errors
        also take the dir offline).
        """
        with self._lock:
            existing = self.get_log(topic, partition)
            if existing is not None:
                return existing
            if config is not None:
                self._topic_configs[topic] = config
            name = f"{topic}-{partition}"
            online = [d for d in self.log_dirs if d not in self.offline_dirs]
            if not online:
                raise KafkaStorageError(f"Cannot create log for {name}: no online log directory "
                                        f"({self._offline_summary()})")
            self._check_not_in_offline_dir(name)
            tp = (topic, partition)
            preferred = self._preferred_dirs.get(tp)
            if preferred in online:
                log_dir = preferred
            else:
                counts = {d: 0 for d in online}
                for d in (*self._log_dir_of.values(), *self._future_dir_of.values()):
                    if d in counts:
                        counts[d] += 1
                log_dir = min(online, key=lambda d: counts[d])
            dir = log_dir / name
            log = self._open_new_log(tp, log_dir, dir, dir.exists(),
                                     config or self._topic_configs.get(topic, self.default_config), topic_id=topic_id)
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
            return log

    def _open_new_log(self, tp: tuple[str, int], log_dir: Path, dir: Path, existed: bool, config: LogConfig,
                      **log_args: Any) -> Log:
        """Blocking, under the lock: open a new partition log (current or future) in ``dir``, made durable
        in ``log_dir``, with the dir-failure callback set once it is open; the partition's remembered
        preferred dir is spent. A failure to create it is :meth:`_creation_failed`'s."""
        log: Log | None = None
        try:
            # No failure callback while opening: whether the error takes the dir offline is
            # decided by _creation_failed, from its errno.
            log = Log.open(dir, config, clean_shutdown=True, producer_state=self._producer_state(tp, dir), **log_args)
            fsync_dir(log_dir)
        except (OSError, LogDirOfflineError) as exc:
            if log is not None:
                log.close_quietly()
            raise self._creation_failed(log_dir, dir, existed, exc) from exc
        log.on_dir_failure = self._on_dir_failure
        self._preferred_dirs.pop(tp, None)
        return log

    def _check_not_in_offline_dir(self, name: str) -> None:
        for d in self.offline_dirs:
            try:
                present = (d / name).exists()
            except OSError:
                present = True  # a dir we cannot even stat may hold it
            if present:
                raise KafkaStorageError(f"Cannot create log for {name} because it is in offline log directory {d}")

    def _creation_failed(self, log_dir: Path, dir: Path, existed: bool, exc: BaseException) -> KafkaStorageError:
        """Clean up a failed creation and say why; take the dir offline unless the cause is transient."""
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        reason = _reason(cause if isinstance(cause, OSError) else exc)
        if not existed:
            shutil.rmtree(dir, ignore_errors=True)  # best effort: a read-only dir keeps it (harmless)
        if isinstance(cause, OSError) and cause.errno in TRANSIENT_ERRNOS:
            return KafkaStorageError(f"Cannot create log {dir}: {reason}")
        self._mark_offline(log_dir, cause if isinstance(cause, OSError) else exc)
        return LogDirOfflineError(log_dir, f"Cannot create log {dir}: {reason}; log directory {log_dir} is offline")

    def _offline_summary(self) -> str:
        return ", ".join(f"{d}: {self.offline_reasons.get(d, 'offline')}" for d in sorted(self.offline_dirs))

    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def delete_log(self, topic: str, partition: int) -> bool:
        """Rename the partition dir to ``<topic>-<partition>.<uuid>-delete``, then remove it (its
        future log first, if it is being moved)."""
        self.delete_future_log(topic, partition)
        with self._lock:
            tp = (topic, partition)
            log = self._logs.pop(tp, None)
            log_dir = self._log_dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return False
        doomed = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        try:
            log.rename_dir(doomed)
            fsync_dir(log_dir)
        except OSError as exc:
            self._mark_offline(log_dir, exc)
        log.delete()
        return True

    def mark_stray(self, topic: str, partition: int) -> Path | None:
        """Close a log the cluster metadata does not know and rename it ``<dir>.<uuid>-stray``.

        Like Kafka's KRaft brokers, data is kept for an operator to inspect rather than deleted:
        metadata that lost a topic must not silently take the data with it. Stray dirs are not
        loaded at start-up (they do not match the partition-dir pattern).
        """
        self.delete_future_log(topic, partition)  # a copy of a stray log is of no use
        with self._lock:
            tp = (topic, partition)
            log = self._logs.pop(tp, None)
            log_dir = self._log_dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return None
        target = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"
        log.close_quietly()
        try:
            os.rename(log.dir, target)
            fsync_dir(log_dir)
        except OSError as exc:
            self._mark_offline(log_dir, exc)
            return None
        return target

    def update_config(self, topic: str, config: LogConfig) -> None:
        with self._lock:
            self._topic_configs[topic] = config
            for (t, _), log, _dir in self._every_log():
                if t == topic:
                    log.update_config(config)

    def _every_log(self) -> list[tuple[TopicPartition, Log, Path]]:
        """Current and future logs with their dirs (under the registry lock)."""
        return ([(tp, log, self._log_dir_of[tp]) for tp, log in self._logs.items()]
                + [(tp, log, self._future_dir_of[tp]) for tp, log in self._futures.items()])

    def all_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return {tp: log for tp, log in self._logs.items() if self._log_dir_of[tp] not in self.offline_dirs}

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    # ------------------------------------------------------------------------------------------
    # moving a partition between log dirs (AlterReplicaLogDirs; see the module docstring)

    def log_dir_by_path(self, path: str) -> Path | None:
        """The configured log dir whose absolute path is ``path`` exactly (Kafka compares the
        request's string with each dir's absolute path), None if none is."""
        for d in self.log_dirs:
            if os.path.abspath(d) == path:
                return d
        return None

    def maybe_update_preferred_log_dir(self, topic: str, partition: int, log_dir: Path) -> None:
        """Kafka's maybeUpdatePreferredLogDir: remember ``log_dir`` for the partition's log, unless
        its current or future log is there already (then there is nothing to prefer)."""
        tp = (topic, partition)
        with self._lock:
            if self._log_dir_of.get(tp) == log_dir or self._future_dir_of.get(tp) == log_dir:
                return
            self._preferred_dirs.pop(tp, None)
            if len(self._preferred_dirs) >= MAX_PREFERRED_DIRS:
                del self._preferred_dirs[next(iter(self._preferred_dirs))]  # the oldest
            self._preferred_dirs[tp] = log_dir

    def preferred_log_dir(self, topic: str, partition: int) -> Path | None:
        return self._preferred_dirs.get((topic, partition))

    def get_future_log(self, topic: str, partition: int) -> Log | None:
        return self._futures.get((topic, partition))

    def future_log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._future_dir_of.get((topic, partition))

    def future_logs(self) -> dict[TopicPartition, tuple[Path, Log]]:
        """Every future log in an online dir, with its dir."""
        with self._lock:
            return {tp: (self._future_dir_of[tp], log) for tp, log in self._futures.items()
                    if self._future_dir_of[tp] not in self.offline_dirs}

    def create_future_log(self, topic: str, partition: int, log_dir: Path) -> Log:
        """Blocking: the partition's future log in ``log_dir``, made empty at the current log's
        log start offset (or the one there already). KafkaStorageError, as Kafka's getOrCreateLog
        for a non-new log, while any log dir is offline (a future log must never be made for a
        partition whose other copy may sit in a dead dir) or when the creation fails."""
        tp = (topic, partition)
        with self._lock:
            current = self.get_log(topic, partition)
            if current is None:
                raise KafkaStorageError(f"Cannot create a future log for {topic}-{partition}: it has no log here")
            if self._log_dir_of[tp] == log_dir:
                raise ValueError(f"{topic}-{partition} already lives in {log_dir}")
            existing = self._futures.get(tp)
            if existing is not None:
                if self._future_dir_of[tp] != log_dir:
                    raise ValueError(f"{topic}-{partition} is being moved to {self._future_dir_of[tp]}")
                return existing
            if self.offline_dirs:
                raise KafkaStorageError(f"Can not create log for {topic}-{partition} because log directories "
                                        f"{','.join(str(d) for d in sorted(self.offline_dirs))} are offline")
            if log_dir in self.offline_dirs or log_dir not in self.log_dirs:
                raise KafkaStorageError(f"Log directory {log_dir} is offline")
            dir = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
            log = self._open_new_log(tp, log_dir, dir, False, self._topic_configs.get(topic, current.config),
                                     log_start_offset=current.log_start_offset, topic_id=current.topic_id)
            self._futures[tp] = log
            self._future_dir_of[tp] = log_dir
            return log

    def delete_future_log(self, topic: str, partition: int) -> bool:
        """Blocking: drop the partition's future log, if any (a move cancelled, or the partition
        deleted): renamed ``-delete``, then removed. False if there was none."""
        tp = (topic, partition)
        with self._lock:
            log = self._futures.pop(tp, None)
            log_dir = self._future_dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return False
        if log_dir in self.offline_dirs:
            log.close_quietly()  # nothing can be removed from a dead disk; start-up cleans up
            return True
        try:
            log.rename_dir(log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
            fsync_dir(log_dir)
        except OSError as exc:
            self._mark_offline(log_dir, exc)
        log.delete()
        return True

    def replace_current_with_future(self, topic: str, partition: int, *, generation: int | None,
                                    max_gap_bytes: int) -> RetiredLog | None:
        """Blocking: make the partition's future log its current one (Log.replace_with_future, which
        says when it refuses: None). Returns the replaced log's files, renamed ``-delete``, for the
        caller to remove after file.delete.delay.ms (reads already under way may still use them);
        a crash before that removes them at start-up. KafkaStorageError if either log is gone or
        offline."""
        tp = (topic, partition)
        name = f"{topic}-{partition}"
        with self._lock:
            current, future = self._logs.get(tp), self._futures.get(tp)
            if current is None or future is None:
                raise KafkaStorageError(f"{name}: its current or future log is gone")
            src, dst = self._log_dir_of[tp], self._future_dir_of[tp]
            if src in self.offline_dirs or dst in self.offline_dirs:
                raise KafkaStorageError(f"{name}: log dir {src if src in self.offline_dirs else dst} is offline")
            doomed = src / f"{name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            retired = current.replace_with_future(future, doomed, dst / name, generation=generation,
                                                  max_gap_bytes=max_gap_bytes)
            if retired is None:
                return None
            del self._futures[tp], self._future_dir_of[tp]
            self._log_dir_of[tp] = dst
        for d in (src, dst):
            try:
                fsync_dir(d)
            except OSError as exc:
                self._mark_offline(d, exc)
        self.checkpoint()  # the partition's offsets move from the old dir's checkpoints to the new one's
        return RetiredLog(doomed, retired)

    # ------------------------------------------------------------------------------------------
    # periodic work (the broker schedules these on the IO pool)

    def checkpoint(self) -> None:
        """Write recovery-point and log-start-offset checkpoints of every online dir."""
        with self._lock:
            for log_dir in self.log_dirs:
                if log_dir in self.offline_dirs or not log_dir.exists():
                    continue
                logs = sorted((tp, log) for tp, log, d in self._every_log() if d == log_dir)
                try:
                    write_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT,
                                     [(t, p, log.recovery_point) for (t, p), log in logs])
                    write_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT,
                                     [(t, p, log.log_start_offset) for (t, p), log in logs])
                except OSError as exc:
                    self._mark_offline(log_dir, exc)

    def run_retention(self, now_ms: int | None = None, high_watermark: HighWatermarkOf | None = None,
                      moved: list[TopicPartition] | None = None) -> int:
        """Retention and delayed file removal for every online log; returns segments deleted.

        ``high_watermark(topic, partition, log)`` gives the partition's high watermark, None if the
        log has no partition here (see Log.delete_old_segments: with one, retention stops at it and
        may delete the active segment). The log calls it under its own lock, so it must only read.
        ``moved`` collects the partitions whose log start offset moved (their owner recomputes what
        depends on it, such as the last stable offset).
        """
        now = clock.now_ms() if now_ms is None else now_ms
        deleted = 0
        for (topic, partition), log in self.all_logs().items():
            hw = None if high_watermark is None else partial(high_watermark, topic, partition, log)
            try:
                n = log.delete_old_segments(now, hw)
                log.remove_deleted_files(now)
            except KafkaStorageError:
                continue  # its dir went offline meanwhile
            deleted += n
            if n and moved is not None:
                moved.append((topic, partition))
        return deleted

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """Apply flush.ms to every online log; returns logs flushed."""
        now = clock.now_ms() if now_ms is None else now_ms
        flushed = 0
        for log in self.all_logs().values():
            try:
                flushed += log.maybe_flush(now)
            except KafkaStorageError:
                continue
        return flushed

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Drop the producer state of producers idle for producer.id.expiration.ms from every
        online log (Kafka's PeriodicProducerExpirationCheck); returns producers removed.

        Without it a long-running broker keeps every producer id that ever wrote, forever."""
        now = clock.now_ms() if now_ms is None else now_ms
        removed = 0
        for log in self.all_logs().values():
            removed += len(log.remove_expired_producers(now))
        return removed

    def set_producer_id_expiration_ms(self, expiration_ms: int) -> None:
        """A dynamic change of producer.id.expiration.ms reaches every open log's producer state
        (Kafka's DynamicProducerStateManagerConfig); new logs get it from their factory."""
        for log in self.all_logs().values():
            log.producer_state.set_producer_id_expiration_ms(expiration_ms)

    # ------------------------------------------------------------------------------------------
    # failures

    def report_dir_failure(self, log_dir: Path, exc: BaseException) -> None:
        """An I/O error on ``log_dir`` outside a Log (the replica manager's HW checkpoint): the
        dir goes offline as for a log's own error (Kafka's LogDirFailureChannel)."""
        self._mark_offline(log_dir, exc)

    def _on_dir_failure(self, log_dir: Path) -> None:
        # A Log calls this from its ``except OSError`` path (or after a failed background fsync,
        # where no exception is current): the current exception, if any, is the reason.
        self._mark_offline(log_dir, sys.exc_info()[1])

    def _mark_offline(self, log_dir: Path, exc: BaseException | None) -> None:
        # Only flags here: this runs inside a failing Log's lock, so it must not take the
        # registry lock (lock order is registry -> log) nor close files another thread may use.
        with self._offline_lock:
            if log_dir in self.offline_dirs:
                return
            reason = _reason(exc)
            self.offline_reasons[log_dir] = reason
            self.offline_dirs = self.offline_dirs | {log_dir}
            for tp, d in list(self._log_dir_of.items()):
                if d == log_dir:
                    log = self._logs.get(tp)
                    if log is not None:
                        log.offline = True
            for tp, d in list(self._future_dir_of.items()):
                if d == log_dir:
                    future = self._futures.get(tp)
                    if future is not None:
                        future.offline = True
        callback = self.on_dir_offline
        if callback is not None:
            callback(log_dir, reason)


class RetiredLog:
    """A log replaced by its future log: its directory (renamed ``-delete``) and its segments, still
    open for the reads that began before the swap. :meth:`remove` closes and deletes them."""

    def __init__(self, dir: Path, segments: list[LogSegment]) -> None:
        self.dir = dir
        self.segments = segments

    def remove(self) -> None:
        for seg in self.segments:
            try:
                seg.close()
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _reason(exc: BaseException | None) -> str:
    """A short reason for logs: the OS error text (with its errno name) or the exception's message."""
    if exc is None:
        return "I/O error"
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{exc.strerror or os.strerror(exc.errno)} ({name})"
    return str(exc) or type(exc).__name__
