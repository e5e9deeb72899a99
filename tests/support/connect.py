"""Kafka Connect 4.4 and MirrorMaker 2 as real JVMs beside a broker, for the tests that guard them.

- ``ConnectWorker``: one distributed-mode worker (``org.apache.kafka.connect.cli.ConnectDistributed``,
  connect-runtime 4.4.0 from the kafka classpath) with ``plugin.path`` = tools.kafka_dist's
  connect-plugins dir (connect-file and connect-mirror 4.3.1, isolated plugins). Its REST API on a free
  loopback port is driven with urllib: ``put_connector`` (PUT /connectors/{name}/config, which creates or
  updates), ``wait_running`` (GET /connectors/{name}/status). ``stop()`` is SIGTERM: the worker's
  shutdown hook stops the tasks, commits source offsets and sink consumer offsets, and leaves the group.
- ``MirrorMaker``: MirrorMaker 2 in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``, what
  Kafka's bin/connect-mirror-maker.sh runs) on the kafka classpath plus connect-mirror's jars.

Both log to a file in their work dir (``log_text()`` for a failing test's message). Both raise
tools.kafka_dist.ToolchainUnavailable without Java or the jars; callers skip saying so.

Who may call it: one test thread per object.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from odradek.broker.launcher.cluster_launcher import free_port
from tools.kafka_dist import (
    LOG4J_SERVER,
    classpath,
    connect_plugin_jars,
    connect_plugin_path,
    java_command,
    log_config_option,
    log_levels,
)

# The worker's own logs at INFO go to its file; the clients it embeds are chatty at INFO (every
# consumer and producer prints its whole config), which is noise in a failing test's message.
_QUIET = {"org.apache.kafka.clients": "WARN", "org.apache.kafka.common.config.AbstractConfig": "WARN", "org.apache.kafka.common.utils.AppInfoParser": "WARN",
          "org.reflections": "ERROR", "org.eclipse.jetty": "WARN", "org.glassfish": "WARN"}


class _JavaProcess:
    """A JVM writing its log4j 2 output to ``<work_dir>/<name>.log``."""

    def __init__(self, work_dir: Path, name: str) -> None:
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = self.work_dir / f"{name}.log"
        self.out_path = self.work_dir / f"{name}.out"
        self.proc: subprocess.Popen | None = None

    def _launch(self, main_class: str, args: list[str], cp: str) -> None:
        log4j = self.work_dir / f"{self.name}-log4j2.properties"
        log4j.write_text(LOG4J_SERVER.format(log=self.log_path) + log_levels(_QUIET))
        # Serial GC and a small heap: two JVMs of these and a real Kafka share 2 busy cores.
        cmd = java_command(main_class, args, cp, ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                                                  "-Djava.awt.headless=true", log_config_option(log4j)])
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self, limit: int = 6000) -> str:
        parts = []
        for p in (self.out_path, self.log_path):
            try:
                parts.append(p.read_text(errors="replace")[-limit:])
            except OSError:
                pass
        return "\n".join(parts)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (the JVM's shutdown hooks run: Connect commits offsets), SIGKILL after ``timeout``."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class ConnectWorker(_JavaProcess):
    """One Kafka Connect 4.4 worker in distributed mode; see the module doc."""

    def __init__(self, work_dir: Path, bootstrap: str, group_id: str, topic_prefix: str,
                 name: str = "connect") -> None:
        super().__init__(work_dir, name)
        self.bootstrap = bootstrap
        self.rest_port = free_port("127.0.0.1")
        self.topics = {"config": f"{topic_prefix}-configs", "offset": f"{topic_prefix}-offsets",
                       "status": f"{topic_prefix}-status"}
        self.properties = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "config.storage.topic": self.topics["config"],
            "offset.storage.topic": self.topics["offset"],
            "status.storage.topic": self.topics["status"],
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            # Lines as plain strings in the topic, so a test can read them with any client.
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            # Offsets committed (and the FileStream sink's file flushed) every half second, not every 10 s.
            "offset.flush.interval.ms": "500",
            "listeners": f"http://127.0.0.1:{self.rest_port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.rest_port),
            "plugin.path": str(connect_plugin_path()),
            # Plugins found through their ServiceLoader manifests (every Kafka plugin has them) instead
            # of scanning each of the ~90 classpath jars' classes: seconds less per start.
            "plugin.discovery": "service_load",
        }

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def start(self, timeout: float = 60.0) -> ConnectWorker:
        props = self.work_dir / f"{self.name}.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        self._launch("org.apache.kafka.connect.cli.ConnectDistributed", [str(props)], classpath("kafka"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"Connect worker exited ({self.proc and self.proc.returncode}):\n{self.log_text()}")
            # GET /health (KIP-1017) answers 200 once the worker has started (its internal topics created
            # and read, the group joined); 503 before, and GET /connectors already answers then.
            try:
                self.request("GET", "/health")
                return self
            except (OSError, RuntimeError):
                time.sleep(0.25)
        self.kill()
        raise RuntimeError(f"Connect worker not ready within {timeout} s:\n{self.log_text()}")

    def request(self, method: str, path: str, body: object = None) -> object:
        """One REST call; RuntimeError with Connect's message on an HTTP error."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.rest_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}") from None
        return json.loads(text) if text else None

    def put_connector(self, name: str, config: dict[str, str], timeout: float = 30.0) -> None:
        """Create (or update) a connector; retried while the worker answers 409 (a rebalance is in
        progress, which Connect's REST API documents as retriable)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.request("PUT", f"/connectors/{name}/config", config)
                return
            except RuntimeError as e:
                if "HTTP 409" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.25)

    def wait_running(self, name: str, tasks: int = 1, timeout: float = 45.0) -> dict:
        """Wait until the connector and ``tasks`` tasks are RUNNING; fail on FAILED with its trace."""
        deadline = time.monotonic() + timeout
        status: object = None
        while time.monotonic() < deadline:
            try:
                status = self.request("GET", f"/connectors/{name}/status")
            except RuntimeError:
                time.sleep(0.25)
                continue
            assert isinstance(status, dict)
            states = [status["connector"]["state"]] + [t["state"] for t in status["tasks"]]
            if "FAILED" in states:
                raise AssertionError(f"connector {name} failed: {json.dumps(status)[:3000]}")
            if len(status["tasks"]) == tasks and set(states) == {"RUNNING"}:
                return status
            time.sleep(0.25)
        raise AssertionError(f"connector {name} not running within {timeout} s: {status}\n{self.log_text()}")


class MirrorMaker(_JavaProcess):
    """MirrorMaker 2 in dedicated mode, from the properties text a user would run it with."""

    def __init__(self, work_dir: Path, properties: str) -> None:
        super().__init__(work_dir, "mirror-maker")
        self.properties = properties

    def start(self) -> MirrorMaker:
        props = self.work_dir / "mm2.properties"
        props.write_text(self.properties)
        jars = [str(p) for p in connect_plugin_jars("connect-mirror")]
        cp = os.pathsep.join([classpath("kafka"), *jars])
        self._launch("org.apache.kafka.connect.mirror.MirrorMaker", [str(props)], cp)
        return self
