"""The secure-setup recipe (config/secure-example/README.md, the README's "secure setup") runs as
written: its shell block's commands, one by one, as subprocesses against a real ``odradek`` daemon,
in a scratch copy of the repository (symlinks, the recipe's files real) where only the ports 9093
and 9094 are replaced by free ones. The README's copy of the block, once it has one, must equal it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.broker_process import free_port
from tests.support.real_kafka import require_toolchain

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "secure-example"
PORTS = ("9093", "9094")


def recipe_block(markdown: str) -> str | None:
    """The first ```sh block that runs config/secure-example/server.properties."""
    for block in re.findall(r"```sh\n(.*?)```", markdown, re.S):
        if "config/secure-example/server.properties" in block:
            return block
    return None


def test_readme_carries_the_recipe_unchanged() -> None:
    block = recipe_block((EXAMPLE / "README.md").read_text())
    assert block is not None and "make-test-certs.sh" in block and "kafka-console-consumer" in block
    in_readme = recipe_block((REPO / "README.md").read_text())
    if in_readme is not None:
        assert in_readme == block, "README.md's secure-setup recipe differs from config/secure-example/README.md"


def _scratch_repo(tmp: Path, ports: dict[str, str]) -> Path:
    """tmp/repo: every top-level entry of the repository as a symlink, except config/, whose
    secure-example/ is a real copy with the ports replaced (the daemon and tools read it there), and
    .venv, the virtualenv running this test (what `make run` leaves in .venv)."""
    root = tmp / "repo"
    (root / "config").mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in ("config", "data", "certs", ".git", ".venv"):
            (root / entry.name).symlink_to(entry)
    (root / ".venv").symlink_to(Path(sys.prefix))
    for entry in (REPO / "config").iterdir():
        if entry.name != "secure-example":
            (root / "config" / entry.name).symlink_to(entry)
    (root / "config" / "secure-example").mkdir()
    for f in EXAMPLE.iterdir():
        (root / "config" / "secure-example" / f.name).write_text(_ported(f.read_text(), ports))
    return root


def _ported(text: str, ports: dict[str, str]) -> str:
    for old, new in ports.items():
        text = re.sub(rf"(?<=:){old}\b", new, text)
    return text


def _wait_listening(port: int, proc: subprocess.Popen, log: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"odradek exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"odradek did not listen on {port}: {log.read_text()[-3000:]}")


def test_secure_recipe_runs_as_written(tmp_path: Path) -> None:
    require_toolchain()
    if shutil.which("openssl") is None:
        pytest.skip("the recipe's certificates need the openssl command")
    bindir = Path(sys.executable).parent
    if sys.prefix == sys.base_prefix or not (bindir / "odradek").exists():
        pytest.skip(f"needs a virtualenv with the odradek command, as `make run` makes ({bindir} is not one)")
    block = recipe_block((EXAMPLE / "README.md").read_text())
    assert block is not None
    ports = {p: str(free_port()) for p in PORTS}
    root = _scratch_repo(tmp_path, ports)
    # The shell of a newcomer after `make run`: the venv is not activated, so no odradek on PATH.
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "odradek").exists()]
    env = dict(os.environ, PATH=os.pathsep.join(path), ODRADEK_PYTHON=sys.executable, PYTHONPATH=str(REPO))
    env.pop("VIRTUAL_ENV", None)
    broker: subprocess.Popen | None = None
    log = tmp_path / "odradek.log"
    outputs: list[str] = []
    try:
        for line in block.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            command = _ported(line, ports)
            if command.endswith("&"):  # the daemon: started in the background, as the shell would
                with log.open("wb") as out:
                    broker = subprocess.Popen(["sh", "-c", "exec " + command[:-1]], cwd=root, env=env,
                                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                _wait_listening(int(ports["9094"]), broker, log)
                _wait_listening(int(ports["9093"]), broker, log)
                continue
            proc = subprocess.run(["sh", "-c", command], cwd=root, env=env, capture_output=True, text=True,
                                  timeout=120)
            assert proc.returncode == 0, f"{command}\nexited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            outputs.append(proc.stdout)
        assert broker is not None, "the recipe starts no broker"
        assert outputs[-1].split("\n")[0] == "hello, securely", outputs[-1]
        assert "Completed updating config for user alice." in "".join(outputs)
        # The broker really authenticated alice with SCRAM over TLS, and refuses a wrong password.
        wrong = (root / "alice.properties").read_text().replace('password="alice-secret"', 'password="nope"')
        (root / "wrong.properties").write_text(wrong)
        proc = subprocess.run(["sh", "-c", f"bin/kafka-topics --bootstrap-server localhost:{ports['9093']} "
                                           "--command-config wrong.properties --list"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert "SaslAuthenticationException" in proc.stdout + proc.stderr
        # The authorizer is on: bob authenticates, but without an ACL he can neither write nor read.
        admin = f"bin/kafka-configs --bootstrap-server 127.0.0.1:{ports['9094']}"
        subprocess.run(["sh", "-c", f"{admin} --alter --entity-type users --entity-name bob "
                                    "--add-config 'SCRAM-SHA-512=[password=bob-secret]'"],
                       cwd=root, env=env, check=True, capture_output=True, timeout=120)
        bob = (root / "alice.properties").read_text().replace('username="alice"', 'username="bob"') \
            .replace('password="alice-secret"', 'password="bob-secret"')
        (root / "bob.properties").write_text(bob)
        proc = subprocess.run(["sh", "-c", f"echo sneaky | bin/kafka-console-producer --bootstrap-server "
                                           f"localhost:{ports['9093']} --command-config bob.properties "
                                           "--topic secure-hello"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=120)
        assert "Not authorized to access topics: [secure-hello]" in proc.stdout + proc.stderr, proc.stderr[-3000:]
        proc = subprocess.run(["sh", "-c", f"bin/kafka-get-offsets --bootstrap-server localhost:{ports['9093']} "
                                           "--command-config alice.properties --topic secure-hello"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=120)
        assert proc.stdout.split() == ["secure-hello:0:1"], proc.stdout + proc.stderr[-3000:]  # alice's record only
        assert "Traceback" not in log.read_text()
    finally:
        if broker is not None and broker.poll() is None:
            os.killpg(broker.pid, signal.SIGTERM)
            try:
                broker.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(broker.pid, signal.SIGKILL)
                broker.wait(5)
