"""The Java side of the tool chain: fetch Kafka/Spark jars with Maven, build classpaths, and run a real
single-node Apache Kafka (KRaft) to compare Odradek against.

Jar cache (all under ``.cache/``, git-ignored; filled on first use, ~1 min, from Maven Central only):

    .cache/m2/            Maven's local repository (``-Dmaven.repo.local``), so nothing goes to ~/.m2
    .cache/jars/kafka/    Apache Kafka 4.4.0: broker (kafka.Kafka), CLI tools, Java client, log4j 2
    .cache/jars/spark/    Spark 4.0.0's Kafka connector + token provider, its kafka-clients (3.9.0), commons-pool2
    .cache/jars/driver/   odradek-driver.jar (java/driver) and its runtime deps
    .cache/jars/old-java-client/  kafka-clients 2.1.0, the oldest Java client Kafka 4.4 serves (KIP-896)
    .cache/jars/connect-plugins/  a Connect plugin.path dir: connect-file/ and connect-mirror/ (4.3.1; the
                          4.4.0 jars are not on Maven Central), for the Connect and MirrorMaker 2 tests
    .cache/jars/.stamp    hash of java/**/pom.xml, java/settings.xml and the driver's sources at the
                          last successful build; a mismatch (or a missing dir) triggers a rebuild

The descriptors live in ``java/`` (see java/pom.xml for the version choices). A failed or interrupted
build leaves the previous jars and no new stamp, so the next call simply builds again. Maven fills a
staging directory that replaces the jar sets only when complete, and builds are serialised with a
lock file (``.cache/jars.lock``): processes that need the jars at the same time run Maven once.

A real Kafka (``KafkaServer``): ``start()`` writes ``server.properties`` (process.roles=broker,controller,
a PLAINTEXT listener on the chosen port and a CONTROLLER listener on another free port, a static
controller quorum (``controller.quorum.voters``, which Kafka 4.x still takes; the dynamic quorum of
KIP-853 would need ``format --standalone``), log dirs under the data dir), formats the log dir with
``kafka.tools.StorageTool format`` at the release's latest metadata.version and features (4.4 finalises
transaction.version 2, group.version 1, share.version 2, streams.version 1; skipped when already
formatted, so a restart keeps its data), launches ``kafka.Kafka`` (Kafka 4.x needs Java 17+: the JDK
installed here is 17) and waits for the log line "Kafka Server started" plus an accepted TCP connection. ``stop()`` sends SIGTERM (controlled shutdown)
and ``kill()`` SIGKILL. The server's own log goes to ``<data-dir>/kafka.log``; its pid to
``<data-dir>/kafka.pid`` so the CLI ``stop`` can find it from another process.

CLI (also used by ``make bench`` and the Makefile's jars/kafka-start/kafka-stop targets)::

    python -m tools.kafka_dist jars                         # fill the cache (silent no-op when current)
    python -m tools.kafka_dist classpath kafka|spark|driver|old-java-client # print a classpath
    python -m tools.kafka_dist start --port 9092 --data-dir .cache/kafka-run [--foreground]
    python -m tools.kafka_dist stop --data-dir .cache/kafka-run

Who may call it: any thread; every function is synchronous and blocks on subprocesses. A KafkaServer
object belongs to the caller that created it (no locking).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from odradek.broker.launcher.cluster_launcher import free_port
from odradek.controller.meta_properties import new_cluster_id

REPO = Path(__file__).resolve().parents[1]
JAVA_DIR = REPO / "java"
CACHE = Path(os.environ.get("ODRADEK_CACHE", REPO / ".cache"))
M2 = CACHE / "m2"
JARS = CACHE / "jars"
STAMP = JARS / ".stamp"
BUILD_LOCK = CACHE / "jars.lock"
CLASSPATHS = ("kafka", "spark", "driver", "old-java-client")
# Every jar set the build fills: the classpaths, and Connect's plugin dir (one sub-dir per plugin, so
# not a classpath of its own: connect_plugin_path()).
JAR_SETS = (*CLASSPATHS, "connect-plugins")

KAFKA_VERSION = "4.4.0"
SPARK_VERSION = "4.0.0"  # pyspark must be this exact version: the connector is built per Spark release

# The server logs this once the broker and controller are both serving (KafkaRaftServer.startup).
STARTED_MARKER = "Kafka Server started"


class ToolchainUnavailable(RuntimeError):
    """Java or Maven is missing, or Maven could not fetch the jars; the message says which."""


def _inputs() -> list[Path]:
    files = [JAVA_DIR / "settings.xml", *sorted(JAVA_DIR.rglob("pom.xml"))]
    files += sorted((JAVA_DIR / "driver" / "src").rglob("*.java"))
    return files


def _inputs_hash() -> str:
    h = hashlib.sha256()
    for f in _inputs():
        h.update(str(f.relative_to(JAVA_DIR)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def jars_current() -> bool:
    return (STAMP.exists() and STAMP.read_text().strip() == _inputs_hash()
            and all(any((JARS / name).rglob("*.jar")) for name in JAR_SETS))


def ensure_jars(quiet: bool = True) -> Path:
    """Build/fetch every jar set unless the cache is current; return the jars directory."""
    if jars_current():
        return JARS
    CACHE.mkdir(parents=True, exist_ok=True)
    # Several test processes (xdist workers, engineers sharing a checkout) find a stale cache at
    # once after a version change; two Mavens emptying and filling the same directories would
    # leave a mix of versions. The first builds, the others wait and then find the cache current.
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jars_current():
            return JARS
        _build_jars(quiet)
    return JARS


def _build_jars(quiet: bool) -> None:
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise ToolchainUnavailable(
                f"'{tool}' is not on PATH: `make test`, `make pipeline` and the Kafka tools need JDK 17+ "
                "and Maven (they fetch Kafka's and Spark's jars from Maven Central once); `make run` does not")
    # Maven fills a staging directory, which replaces the jar sets only once it is complete:
    # JVMs started meanwhile (another test process, a bin/kafka-* launcher) keep finding a whole,
    # if older, set, and a failed build changes nothing. A fresh directory also means no stale jar
    # of an older version sits beside the new ones (copy-dependencies only adds).
    JARS.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=JARS))
    try:
        # -ntp: no per-artifact transfer progress (about 1,600 lines on a first fetch).
        cmd = ["mvn", "-B", "-ntp", "-s", str(JAVA_DIR / "settings.xml"), "-f", str(JAVA_DIR / "pom.xml"),
               f"-Dmaven.repo.local={M2}", f"-Dodradek.cache={staging}", "package"]
        if quiet:
            cmd.insert(1, "-q")
        proc = subprocess.run(cmd, cwd=REPO, capture_output=quiet, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout or "")[-4000:] + (proc.stderr or "")[-2000:]
            raise ToolchainUnavailable(f"Maven could not build the jar cache (exit {proc.returncode}):\n{tail}")
        STAMP.unlink(missing_ok=True)
        for name in JAR_SETS:
            if (JARS / name).exists():
                os.rename(JARS / name, staging / f"old-{name}")
            os.rename(staging / "jars" / name, JARS / name)
        STAMP.write_text(_inputs_hash() + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def classpath(name: str) -> str:
    """The classpath for one jar set (one of CLASSPATHS), building the cache if needed."""
    if name not in CLASSPATHS:
        raise ValueError(f"unknown classpath {name!r}; one of {CLASSPATHS}")
    ensure_jars()
    return os.pathsep.join(str(p) for p in sorted((JARS / name).glob("*.jar")))


def jar_files(name: str) -> list[Path]:
    classpath(name)
    return sorted((JARS / name).glob("*.jar"))


def connect_plugin_path() -> Path:
    """The plugin.path directory for a Connect worker (connect-file/ and connect-mirror/ in it), building
    the cache if needed."""
    ensure_jars()
    return JARS / "connect-plugins"


def connect_plugin_jars(plugin: str) -> list[Path]:
    """One plugin's jars ("connect-file" or "connect-mirror"), e.g. to put MirrorMaker 2's dedicated mode
    on a classpath."""
    return sorted((connect_plugin_path() / plugin).glob("*.jar"))


def temp_config_file(name: str, text: str) -> Path:
    """``text`` in the temp dir under ``name`` (e.g. a log4j config for a Java tool), rewritten only
    when its content differs, so concurrent runs share one file."""
    path = Path(tempfile.gettempdir()) / name
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def java_command(main_class: str, args: list[str], cp: str, jvm_opts: list[str] | None = None) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise ToolchainUnavailable("'java' is not on PATH")
    return [java, *(jvm_opts or []), "-cp", cp, main_class, *args]


def random_cluster_id() -> str:
    """A Kafka Uuid as Kafka prints it (odradek.controller.meta_properties.new_cluster_id). It must not
    start with "-": kafka-storage's argument parser would take ``-t -abc...`` for an option, which
    failed one test run in 64 before."""
    return new_cluster_id()


# Kafka 4.x logs through log4j 2 (KIP-653; its distribution's config/*.yaml). The configs below are
# log4j 2's properties format, which log4j-core reads by itself, and are passed with
# ``log_config_option``. A log4j 1 file given as -Dlog4j.configuration would be ignored.

# The Java tools (CLI launchers, perf tools): warnings and errors only, to stderr, in Kafka's layout
# (Kafka's own tools-log4j2.yaml logs WARN to stderr as well).
LOG4J_TOOLS = """\
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
"""

LOG4J_SERVER = """\
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


def log_levels(levels: dict[str, str]) -> str:
    """Lines to append to a config above that set the level of each named logger (a class or
    package name), e.g. ``{"org.apache.kafka.clients": "WARN"}``."""
    lines = []
    for i, (name, level) in enumerate(levels.items()):
        lines += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = {level}"]
    return "".join(line + "\n" for line in lines)


def log_config_option(path: Path | str) -> str:
    """The JVM option that makes log4j 2 read the config file ``path``."""
    return f"-Dlog4j2.configurationFile={path}"


class KafkaServer:
    """One real Apache Kafka broker+controller in KRaft mode, in a subprocess."""

    def __init__(self, data_dir: Path, port: int | None = None, host: str = "127.0.0.1",
                 overrides: dict[str, str] | None = None, heap: str = "1g") -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.controller_port = free_port(host)
        self.heap = heap
        # A multi-node KRaft cluster formats every node with one cluster id; alone, a fresh one.
        self.cluster_id: str | None = None
        self.properties: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{host}:{self.port},CONTROLLER://{host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            # group.coordinator.rebalance.protocols stays Kafka 4.4's default (KIP-848's consumer
            # protocol is on by default since 4.0), as does every feature the format finalises.
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        }
        self.properties.update(overrides or {})
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "kafka.log"
        self.stdout_path = self.data_dir / "kafka.out"
        self.pid_path = self.data_dir / "kafka.pid"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = self.data_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        (self.data_dir / "log4j2.properties").write_text(
            LOG4J_SERVER.format(log=self.log_path)
            + log_levels({"kafka.request.logger": "WARN", "org.apache.kafka.clients": "WARN"}))
        return props

    def _jvm_opts(self) -> list[str]:
        return [f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                log_config_option(self.data_dir / "log4j2.properties"),
                f"-Dkafka.logs.dir={self.data_dir}"]

    def format(self, cp: str) -> None:
        """Format the log dir (meta.properties) unless a previous run already did."""
        if (self.data_dir / "logs" / "meta.properties").exists():
            return
        cmd = java_command("kafka.tools.StorageTool",
                           ["format", "-t", self.cluster_id or random_cluster_id(), "-c", str(self.data_dir / "server.properties"),
                            "--ignore-formatted"],
                           cp, ["-Xmx256m", log_config_option(self.data_dir / "log4j2.properties")])
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def start(self, timeout: float = 90.0) -> KafkaServer:
        cp = classpath("kafka")
        self._write_config()
        self.format(cp)
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        cmd = java_command("kafka.Kafka", [str(self.data_dir / "server.properties")], cp, self._jvm_opts())
        self._out = open(self.stdout_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid_path.write_text(f"{self.proc.pid}\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited with {self.proc.returncode}:\n{self.log_text()}")
            if self._log_since(log_offset).find(STARTED_MARKER) >= 0 and self._accepts():
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"kafka did not start within {timeout}s:\n{self.log_text()}")

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log_text(self) -> str:
        out = []
        for p in (self.stdout_path, self.log_path):
            try:
                out.append(p.read_text(errors="replace")[-8000:])
            except OSError:
                pass
        return "\n".join(out)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """Controlled shutdown (SIGTERM); SIGKILL if it takes longer than ``timeout``."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        if getattr(self, "_out", None):
            self._out.close()
        self.pid_path.unlink(missing_ok=True)

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def stop_by_pid_file(data_dir: Path, timeout: float = 60.0) -> bool:
    """Stop a server started by another process (``start`` without --foreground). True if one was running."""
    pid_path = Path(data_dir) / "kafka.pid"
    try:
        pid = int(pid_path.read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_path.unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
    pid_path.unlink(missing_ok=True)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.kafka_dist", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("jars", help="fill .cache/jars from Maven Central (no-op when current)")
    cp = sub.add_parser("classpath", help="print one classpath")
    cp.add_argument("name", choices=CLASSPATHS)
    st = sub.add_parser("start", help="start a real Apache Kafka (KRaft, single node)")
    st.add_argument("--port", type=int, default=9092)
    st.add_argument("--host", default="127.0.0.1")
    st.add_argument("--data-dir", type=Path, default=CACHE / "kafka-run")
    st.add_argument("--heap", default="1g")
    st.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    st.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops the broker")
    sp = sub.add_parser("stop", help="stop the broker started with `start` in --data-dir")
    sp.add_argument("--data-dir", type=Path, default=CACHE / "kafka-run")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except ToolchainUnavailable as exc:
        # A missing JDK/Maven or an unreachable Maven Central is the user's set-up, not a bug: one
        # sentence saying what is needed, no traceback.
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "jars":
        # `make test` runs this first: one line while Maven works (its output only on failure),
        # nothing at all once the cache is current.
        if not jars_current():
            print(f"Fetching Kafka {KAFKA_VERSION} and Spark {SPARK_VERSION} jars with Maven into "
                  f"{JARS} (once, about a minute)...", flush=True)
            t0 = time.monotonic()
            ensure_jars(quiet=True)
            print(f"Jars ready in {time.monotonic() - t0:.0f} s.", flush=True)
        return 0
    if args.cmd == "classpath":
        print(classpath(args.name))
        return 0
    if args.cmd == "stop":
        print("stopped" if stop_by_pid_file(args.data_dir) else "not running")
        return 0
    overrides = dict(o.split("=", 1) for o in args.override)
    server = KafkaServer(args.data_dir, port=args.port, host=args.host, overrides=overrides, heap=args.heap)
    server.start()
    print(f"kafka {KAFKA_VERSION} serving on {server.bootstrap} (data: {server.data_dir}, pid {server.proc.pid})",
          flush=True)
    if not args.foreground:
        return 0
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
