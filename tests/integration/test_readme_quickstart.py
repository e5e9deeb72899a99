"""The README's first client blocks run as written, in order, against one Odradek broker: kcat's
produce and consume ("Point any Kafka client at it"), then Kafka's CLI tools (topic created, listed,
a line produced, consumed in a group, the group described). Only localhost:9092 is replaced by the
test broker's address; the console producer gets its line on stdin and the console consumer, which
runs until stopped, is stopped once it printed it. The tools block used to create `hello`, which
kcat had just auto-created, and stopped at "Topic 'hello' already exists"."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.real_kafka import require_toolchain


def sh_blocks(markdown: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", markdown, re.S)


def quickstart_blocks() -> tuple[list[str], list[str]]:
    """The kcat block's and the CLI tools block's command lines."""
    blocks = sh_blocks((REPO / "README.md").read_text())
    kcat = next(b for b in blocks if b.lstrip().startswith("kcat -b localhost:9092"))
    tools = next(b for b in blocks if "bin/kafka-topics --bootstrap-server localhost:9092 --create" in b)
    lines = [[line.strip() for line in b.splitlines() if line.strip() and not line.startswith("#")] for b in (kcat, tools)]
    return lines[0], lines[1]


def test_the_readme_client_blocks_run_in_order(tmp_path) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("the README's first block needs kcat (Debian: kcat)")
    require_toolchain()
    kcat, tools = quickstart_blocks()
    broker = BrokerProcess(tmp_path / "broker").start()
    env = dict(os.environ, ODRADEK_PYTHON=sys.executable)
    try:
        outputs = []
        for line in kcat + tools:
            command = line.replace("localhost:9092", broker.bootstrap)
            if "kafka-console-consumer" in command:
                outputs.append(_consume_until(command, "hello from the tools", env))
                continue
            stdin = "hello from the tools\n" if "kafka-console-producer" in command else None
            proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, input=stdin, capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == 0, f"{line}\nexited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            outputs.append(proc.stdout)
    finally:
        broker.stop()
    by_command = dict(zip(kcat + tools, outputs, strict=True))
    consumed = next(out for cmd, out in by_command.items() if cmd.startswith("kcat") and " -C " in cmd)
    assert consumed.splitlines() == ["hello"], consumed
    listed = next(out for cmd, out in by_command.items() if "--list" in cmd)
    assert {"hello", "greetings"} <= set(listed.split()), listed
    described = next(out for cmd, out in by_command.items() if "kafka-consumer-groups" in cmd)
    rows = [row.split() for row in described.splitlines() if row.startswith("readers ")]
    assert sorted(int(r[2]) for r in rows) == [0, 1, 2] and sum(int(r[3]) for r in rows) == 1, described


def _consume_until(command: str, expected: str, env: dict[str, str], timeout: float = 90) -> str:
    """Run the console consumer (it runs until stopped) until it prints ``expected``, then stop it
    as Ctrl-C would; its output."""
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    seen = ""
    deadline = time.monotonic() + timeout
    try:
        while expected not in seen:
            assert time.monotonic() < deadline and proc.poll() is None, f"{command}\n{seen}"
            line = proc.stdout.readline()
            if line:
                seen += line
            else:
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)  # the consumer commits its offsets as it closes
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return seen
