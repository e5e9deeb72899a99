"""``odradek --processes N|auto``: a host's cores as one deployment - N broker processes, one supervisor.

One Odradek process serves requests on one handler thread, so a many-core host needs several
processes to use its cores (issue 31: eight on one host reached Kafka's produce rate). This module
makes that one command. The supervisor (this process) starts N children, ``python -m odradek.broker.main`` with
the operator's config file and overrides plus each child's own settings (``child_overrides``):

- ``node.id``: ``node.id + i`` for i in 0..N-1 (give hosts disjoint ranges: 1, 101, ...);
- every listener's port (and ``advertised.listeners``' when set) ``+ i``, so a client bootstrapped on
  the first port learns the others from Metadata and reaches every partition;
- ``log.dirs``: each host dir ``D`` becomes ``D/node-<id>`` (``metadata.log.dir`` likewise);
- ``broker.rack``: the host's name unless set, so the controller's rack-aware placement
  (controller/placement.py) puts a partition's replicas on distinct hosts when there are several;
- the metrics and fault-injection ports, when set, ``+ i``; the internal topics' replication factors
  at most N unless set.

Metadata. With ``metadata.store=local`` (the default) the supervisor serves the metadata store itself
(controller/embedded_etcd.py, whose docstring says why this design) on a loopback port, its data in
``<first log dir>/metadata-store``, and the children join it as a cluster joins etcd; with
``metadata.store=etcd://...`` (several hosts) they join that etcd and nothing is served here.

A host dir that holds partition directories of its own (a single broker's data: ``D/<topic>-<n>``)
is refused before anything is locked or written (``foreign_partition_dirs``): each child opens only
``D/node-<id>``, so those topics would silently not be served.

Life cycle. The supervisor locks every host dir of ``log.dirs`` first (storage/log_dir_lock.py), so
a second ``odradek --processes`` (or a plain ``odradek``) on the same dirs is refused at once with
Kafka's "Failed to acquire lock" line. It starts the children and logs the bootstrap string once each
answers ApiVersions. A child that fails its very first start stops the deployment (exit 1: a bad
config or a busy dir would fail each time); a child that dies later is restarted after a backoff (1 s,
doubling to 30 s, back to 1 s once it served for a minute). SIGTERM or SIGINT stops every child at once
with SIGTERM (each does its controlled shutdown while the metadata store still answers; SIGKILL after
``SHUTDOWN_TIMEOUT_S``), then the store; exit 0 when every child exited 0. Children run in their own
process group (a terminal's Ctrl-C reaches the supervisor, which stops them in order) and get SIGTERM
if the supervisor dies (PR_SET_PDEATHSIG). Their output goes to the supervisor's stderr, each line
prefixed with ``[node <id>]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from odradek.broker.config.broker_config import BrokerConfig
from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT, _die_with_parent, kafka_request

log = logging.getLogger("odradek.host")

SHUTDOWN_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0
RESTART_BACKOFF_S = (1.0, 30.0)
# A child that served this long before dying is restarted at the shortest backoff again.
STABLE_AFTER_S = 60.0
METADATA_STORE_DIR = "metadata-store"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_processes(value: str | int) -> int:
    """``auto``: one process per core this process may run on (its CPU affinity); else the number."""
    text = str(value).strip()
    if text == "auto":
        return usable_cores()
    count = int(text)
    if count < 1:
        raise ValueError("the number of processes must be at least 1")
    return count


_PORT = re.compile(r":(\d+)$")


def shift_ports(listeners: str, by: int) -> str:
    """Every ``NAME://host:port`` of a listener list with its port ``+ by`` (port 0 stays 0: any port)."""
    shifted = []
    for item in listeners.split(","):
        item = item.strip()
        match = _PORT.search(item)
        if match and int(match.group(1)) != 0:
            item = item[: match.start()] + f":{int(match.group(1)) + by}"
        shifted.append(item)
    return ",".join(shifted)


def child_overrides(config: BrokerConfig, index: int, processes: int, store: str) -> dict[str, str]:
    """The settings of the ``index``-th child (0-based), over the operator's (see the module docstring)."""
    node_id = max(config.node_id, 0) + index if config.node_id >= 0 else 1 + index
    own: dict[str, str] = {
        "node.id": str(node_id),
        "broker.id": str(node_id),
        "odradek.processes": "1",
        "metadata.store": store,
        "listeners": shift_ports(config["listeners"], index),
        "log.dirs": ",".join(str((d / f"node-{node_id}").absolute()) for d in config.log_dirs),
    }
    if config["advertised.listeners"] is not None:
        own["advertised.listeners"] = shift_ports(config["advertised.listeners"], index)
    if config["metadata.log.dir"] is not None:
        own["metadata.log.dir"] = str((Path(config["metadata.log.dir"]) / f"node-{node_id}").absolute())
    if config["broker.rack"] is None:
        own["broker.rack"] = socket.gethostname()
    for port_key in ("odradek.metrics.port", "odradek.testing.faults.port"):
        if config[port_key] > 0:
            own[port_key] = str(config[port_key] + index)
    for factor_key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor"):
        if config.is_default(factor_key) and config[factor_key] > processes:
            # As a local cluster: the internal topics wait for this many live brokers, and there are N.
            own[factor_key] = str(processes)
    if config.is_default("transaction.state.log.min.isr") and config["transaction.state.log.min.isr"] > processes:
        own["transaction.state.log.min.isr"] = str(processes)
    return own


def foreign_partition_dirs(log_dir: Path) -> list[str]:
    """The partition directories (``<topic>-<n>``, or a future log's) directly in a host dir: a single
    broker's data, which no child would open. A child's own ``node-<id>`` also reads as topic "node",
    partition id; it is told apart by what a partition dir always holds (a ``.log`` segment or
    ``partition.metadata``) and a node dir never does at its top."""
    from odradek.storage.log_manager import _FUTURE_DIR, _PARTITION_DIR, RESERVED_TOPICS

    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
            match = _PARTITION_DIR.match(entry.name) or _FUTURE_DIR.match(entry.name)
            if not entry.is_dir() or match is None or match["topic"] in RESERVED_TOPICS:
                continue
            with contextlib.suppress(OSError):
                if any(name == "partition.metadata" or name.endswith(".log") for name in os.listdir(entry.path)):
                    found.append(entry.name)
    return found


def first_bootstrap(overrides: Mapping[str, str]) -> tuple[str, int]:
    """(host, port) of a child's first listener, for probing it; an empty or wildcard host is loopback."""
    first = overrides["listeners"].split(",")[0].strip()
    host_port = first.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    host = host.strip("[]")
    return (host if host not in ("", "0.0.0.0", "::") else "127.0.0.1"), int(port)


@dataclass
class Child:
    """One broker process of the deployment and its restart state."""

    index: int
    node_id: int
    overrides: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    served: bool = False
    restarts: int = 0
    backoff_s: float = RESTART_BACKOFF_S[0]
    pump: asyncio.Task[None] | None = None
    waiter: asyncio.Task[object] | None = None
    history: list[int] = field(default_factory=list)

    @property
    def address(self) -> tuple[str, int]:
        return first_bootstrap(self.overrides)


class HostSupervisor:
    """Runs the deployment until a signal (``run``); see the module docstring."""

    def __init__(self, config: BrokerConfig, config_path: str | None, user_overrides: Sequence[str],
                 processes: int, log_args: Sequence[str] = ()) -> None:
        self.config = config
        self.config_path = config_path
        self.user_overrides = list(user_overrides)
        self.processes = processes
        self.log_args = list(log_args)
        self.children: list[Child] = []
        self.stopping = asyncio.Event()
        self._store: object | None = None

    def _command(self, child: Child) -> list[str]:
        cmd = [sys.executable, "-m", "odradek.broker.main"]
        if self.config_path:
            cmd.append(os.path.abspath(self.config_path))
        cmd += self.log_args
        for item in self.user_overrides:
            cmd += ["--override", item]
        for key, value in child.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    async def _spawn(self, child: Child) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("ODRADEK_PROCESSES", None)
        child.proc = await asyncio.create_subprocess_exec(
            *self._command(child), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        child.started_at = time.monotonic()
        child.served = False
        child.pump = asyncio.get_running_loop().create_task(self._pump(child, child.proc))
        child.waiter = loop_task(child.proc.wait())
        log.info("node %d starting (pid %d) on %s:%d", child.node_id, child.proc.pid, *child.address)

    async def _pump(self, child: Child, proc: asyncio.subprocess.Process) -> None:
        """The child's output onto our stderr, each line prefixed with its node id."""
        assert proc.stdout is not None
        prefix = f"[node {child.node_id}] ".encode()
        out = sys.stderr.buffer
        while line := await proc.stdout.readline():
            out.write(prefix + line)
            out.flush()

    async def _wait_serving(self, child: Child, timeout: float) -> bool:
        host, port = child.address
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            if child.waiter is not None and child.waiter.done():
                return False
            try:
                await asyncio.to_thread(kafka_request, host, port, "ApiVersions", 0, {}, 1.0)
                child.served = True
                return True
            except (OSError, ValueError):
                await asyncio.sleep(0.1)
        return False

    async def _start_store(self) -> str:
        if self.config["metadata.store"] != "local":
            return str(self.config["metadata.store"])
        from odradek.controller.embedded_etcd import EmbeddedEtcd

        store = await EmbeddedEtcd(self.config.log_dirs[0].absolute() / METADATA_STORE_DIR).start()
        self._store = store
        log.info("metadata store for the host's processes on %s (data %s)", store.endpoint, store.data_dir)
        return f"etcd://{store.endpoint}"

    async def run(self) -> int:
        from odradek.storage.log_dir_lock import LogDirInUseError, LogDirLocks

        for host_dir in self.config.log_dirs:
            # Checked before the lock: the refusal must leave the dir exactly as it was.
            if found := foreign_partition_dirs(host_dir):
                log.error("Odradek failed to start: log dir %s holds %d partition directories of a single broker "
                          "(%s); with --processes each broker opens only %s/node-<id>, so they would not be "
                          "served: run it without --processes, or give --processes other log.dirs",
                          host_dir.absolute(), len(found), ", ".join(found[:3]) + (", ..." if len(found) > 3 else ""),
                          host_dir.absolute())
                return 1
        try:
            # The host's dirs themselves: a second deployment (or a lone broker) on them stops here.
            locks = LogDirLocks.acquire(d.absolute() for d in self.config.log_dirs)
        except LogDirInUseError as exc:
            log.error("Odradek failed to start: %s", exc)
            return 1
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        try:
            store = await self._start_store()
            for index in range(self.processes):
                overrides = child_overrides(self.config, index, self.processes, store)
                self.children.append(Child(index, int(overrides["node.id"]), overrides))
            return await self._supervise()
        finally:
            await self._stop_children()
            if self._store is not None:
                await self._store.stop()  # type: ignore[attr-defined]
            locks.release()

    async def _supervise(self) -> int:
        for child in self.children:
            await self._spawn(child)
        started = await asyncio.gather(*(self._wait_serving(c, START_TIMEOUT_S) for c in self.children))
        if self.stopping.is_set():
            return 0
        if not all(started):
            failed = [c.node_id for c, ok in zip(self.children, started, strict=True) if not ok]
            log.error("Odradek failed to start: node(s) %s did not start (their lines above say why); "
                      "stopping the others", ", ".join(map(str, failed)))
            return 1
        bootstrap = ",".join(f"{h}:{p}" for h, p in (c.address for c in self.children))
        log.info("%d broker processes serving; bootstrap servers: %s", len(self.children), bootstrap)
        while not self.stopping.is_set():
            waiters: dict[asyncio.Task[object], Child] = {
                c.waiter: c for c in self.children if c.waiter is not None and not c.waiter.done()}
            stop_wait = loop_task(self.stopping.wait())
            done, _ = await asyncio.wait([*waiters, stop_wait], return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            for task in done:
                if task in waiters and not self.stopping.is_set():
                    await self._restart(waiters[task])
        return 0

    async def _restart(self, child: Child) -> None:
        assert child.proc is not None
        code = child.proc.returncode
        lived = time.monotonic() - child.started_at
        if lived >= STABLE_AFTER_S:
            child.backoff_s = RESTART_BACKOFF_S[0]
        log.warning("node %d (pid %d) exited with code %s after %.1f s; restarting it in %.0f s",
                    child.node_id, child.proc.pid, code, lived, child.backoff_s)
        if child.pump is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(child.pump, 2.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), child.backoff_s)
        if self.stopping.is_set():
            return
        child.backoff_s = min(child.backoff_s * 2, RESTART_BACKOFF_S[1])
        child.restarts += 1
        await self._spawn(child)
        loop_task(self._announce_when_serving(child))

    async def _announce_when_serving(self, child: Child) -> None:
        if await self._wait_serving(child, START_TIMEOUT_S):
            log.info("node %d serving again on %s:%d (restart %d)", child.node_id, *child.address, child.restarts)

    async def _stop_children(self) -> None:
        """SIGTERM to every live child at once, then wait (SIGKILL after SHUTDOWN_TIMEOUT_S)."""
        live = [c for c in self.children if c.proc is not None and c.proc.returncode is None]
        if live:
            log.info("stopping %d broker processes", len(live))
        for child in live:
            assert child.proc is not None
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGCONT)
                child.proc.send_signal(signal.SIGTERM)
        for child in live:
            assert child.proc is not None
            try:
                await asyncio.wait_for(child.proc.wait(), SHUTDOWN_TIMEOUT_S)
            except TimeoutError:
                log.error("node %d did not stop within %.0f s: killing it", child.node_id, SHUTDOWN_TIMEOUT_S)
                child.proc.kill()
                await child.proc.wait()
        for child in self.children:
            if child.pump is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(child.pump, 2.0)
        codes = {c.node_id: c.proc.returncode for c in self.children if c.proc is not None}
        self.exit_codes = codes
        if live:
            log.info("every broker process stopped (exit codes %s)", codes)


def loop_task(coro: object) -> asyncio.Task[object]:
    return asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]


def run(config: BrokerConfig, config_path: str | None, user_overrides: Sequence[str], processes: int,
        log_args: Sequence[str] = ()) -> int:
    """The deployment until SIGTERM/SIGINT; the exit code (1: a start failed or a child did not exit 0)."""
    # The supervisor forks its children while the metadata store's gRPC threads run; each fork is
    # followed by an exec, so gRPC's fork handlers (and their warning on every spawn) are not needed.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    supervisor = HostSupervisor(config, config_path, user_overrides, processes, log_args)

    async def main() -> int:
        code = await supervisor.run()
        codes = getattr(supervisor, "exit_codes", {})
        if code == 0 and any(c not in (0, None) for c in codes.values()):
            return 1
        return code

    return asyncio.run(main())
