"""Run Kafka's own Java tools against a broker: the CLI tools as Java main classes, and the odradek test
driver (java/driver) as a long-lived process that answers JSON requests.

The tools, their main classes and the JVM/logging options are tools.kafka_cli's, the same code behind
bin/kafka-tool, which users run. Each ``run_tool`` is one JVM launch (~1-2 s); tests keep their number
small.

``JavaDriver``: ``java -jar odradek-driver.jar --serve`` reads one JSON request per line and answers one
JSON line each; ``call(scenario, **args)`` returns the result or raises ``DriverError`` carrying Kafka's
exception class name (e.g. "UnknownTopicOrPartitionException"). One JVM serves a whole test module.

Who may call it: one thread per JavaDriver (requests are strictly sequential on its pipes).
"""

from __future__ import annotations

import json
import selectors
import subprocess
import tempfile
import time

from tools.kafka_cli import TOOLS, tool_command  # noqa: F401 (TOOLS re-exported for tests)
from tools.kafka_dist import JARS, classpath, java_command

# Kafka 4.x's tools print this to stdout for an option they mean to drop (--producer.config,
# --property, ...), where a test reading the tool's output would take it for data.
DEPRECATED_OPTION = "is deprecated and will be removed"


def run_tool(tool: str, args: list[str], input: str | None = None, timeout: float = 120.0,
             check: bool = True) -> subprocess.CompletedProcess:
    """Run one Kafka CLI tool to completion; with check=True a non-zero exit, or a deprecated option
    the tool warns about, raises with its output."""
    proc = subprocess.run(tool_command(tool, args), input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    deprecated = [line for line in (proc.stdout + proc.stderr).splitlines() if DEPRECATED_OPTION in line]
    if check and deprecated:
        raise AssertionError(f"{tool} {' '.join(args)}: " + " ".join(deprecated))
    return proc


def console_roundtrip(bootstrap: str, topic: str, config: str, lines: list[str]) -> list[str]:
    """kafka-console-producer sends ``lines`` to ``topic``, kafka-console-consumer reads that many back
    from the beginning; both with the client properties file ``config``. Two JVM launches."""
    run_tool("kafka-console-producer", ["--bootstrap-server", bootstrap, "--topic", topic, "--command-config", config],
             input="\n".join(lines) + "\n")
    out = run_tool("kafka-console-consumer", ["--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                                              "--max-messages", str(len(lines)), "--timeout-ms", "30000",
                                              "--command-config", config]).stdout
    return out.split()


class DriverError(Exception):
    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(f"{error_class}: {message}")
        self.error_class = error_class
        self.message = message


class JavaDriver:
    """One ``odradek-driver --serve`` JVM; ``call`` sends a scenario and waits for its JSON answer."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        classpath("driver")  # fills the cache if needed
        cp = str(JARS / "driver" / "*")
        cmd = java_command("io.odradek.driver.Main", ["--serve"], cp, ["-Xmx512m", "-XX:+UseSerialGC"])
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, bufsize=1)
        self._sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    def call_raw(self, scenario: str, timeout: float = 120.0, **args: object) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"driver exited ({self.proc.returncode}): {self.stderr_text()}")
        request = {"scenario": scenario, "bootstrap": self.bootstrap, **args}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise TimeoutError(f"driver gave no answer to {scenario} within {timeout}s: {self.stderr_text()}")
            if self._sel.select(left):
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"driver exited mid-request: {self.stderr_text()}")
                return json.loads(line)

    def call(self, scenario: str, timeout: float = 120.0, **args: object):
        reply = self.call_raw(scenario, timeout=timeout, **args)
        if not reply["ok"]:
            raise DriverError(reply["error_class"], reply["error"])
        return reply["result"]

    def admin(self, op: str, **args: object):
        return self.call("admin", op=op, **args)

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._sel.close()
        self._stderr.close()

    def __enter__(self) -> JavaDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_spark = None


def shared_spark():
    """One local[2] SparkSession (with the Kafka connector jars) for the whole pytest session.

    Spark takes ~10 s to start, so every Spark test module shares it; it is stopped at exit. Skips,
    saying why, when pyspark is not installed or the jar cache cannot be built.
    """
    global _spark
    import atexit

    import pytest

    pytest.importorskip("pyspark", reason="pyspark is not installed (it is in the test extra)")
    from tests.support.real_kafka import require_toolchain

    require_toolchain()
    if _spark is None:
        from pipeline.spark_session import build_session

        _spark = build_session("odradek-tests")
        atexit.register(_spark.stop)
    return _spark
