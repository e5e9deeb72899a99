"""docker/Dockerfile built without a container engine (none runs on the project's test machines: see
docker/README.md, "Testing the image"): its stages' COPY and RUN steps, the same commands, each stage in a
directory standing for its image with a fresh virtual environment standing for the image's Python, from
the build context /.dockerignore leaves (tests/support/docker_build.py). The runtime stage is replayed
with CC/CXX set to false: python:3.11-slim has no C compiler, so anything compiled there is not compiled
here either. Then the installed ``odradek`` starts with the image's configuration and answers clients,
with the native record check and Produce codec in use.

Needs PyPI (or a wheel mirror pip is configured with), as ``docker build`` does: the builder downloads
the dependencies' wheels. Skipped, saying so, where pip cannot reach an index."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.support.client_roundtrip import confluent_roundtrip
from tests.support.docker_build import (
    StageRun,
    build_context,
    is_excluded,
    load_dockerignore,
    parse_stages,
    run_stage,
)
from tests.support.wire import WireClient, create_topic

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
NOT_NATIVE_WARNING = "native record check (protocol/_record_scan.c) is not built"


# --- the build context -----------------------------------------------------------------------------------


def test_dockerignore_follows_dockers_documented_examples(tmp_path: Path) -> None:
    # The examples of Docker's .dockerignore reference ("Build context", "Syntax" and "Negating patterns").
    (tmp_path / ".dockerignore").write_text("# comment\n*/temp*\n*/*/temp*\ntemp?\n*.md\n!README*.md\nREADME-secret.md\n")
    rules = load_dockerignore(tmp_path / ".dockerignore")
    assert is_excluded("somedir/temporary.txt", rules) and is_excluded("somedir/temp", rules)
    assert is_excluded("somedir/subdir/temporary.txt", rules)
    assert is_excluded("tempa", rules) and is_excluded("tempb", rules) and not is_excluded("temp", rules)
    assert not is_excluded("temporary.txt", rules)  # */temp* needs one directory level
    assert is_excluded("CHANGES.md", rules) and not is_excluded("README.md", rules)
    assert is_excluded("README-secret.md", rules)
    (tmp_path / ".dockerignore").write_text("**/*.go\n")
    rules = load_dockerignore(tmp_path / ".dockerignore")
    assert is_excluded("main.go", rules) and is_excluded("a/b/c.go", rules) and not is_excluded("a/b.py", rules)


def test_the_build_context_holds_only_what_the_dockerfile_copies() -> None:
    files = set(build_context(REPO, load_dockerignore(DOCKERIGNORE)))
    tops = {f.split("/")[0] for f in files}
    # The checkout's bulk after `make test` (~1.1 GB) and anything local never reach the builder.
    assert not tops & {".venv", ".cache", "data", ".git", "build", "artifacts", "tests", "java", "bench",
                       "odradek.egg-info", ".mypy_cache", ".hypothesis"}, sorted(tops)
    assert not [f for f in files if "__pycache__" in f or f.endswith((".so", ".pyc"))]
    copied = {s.strip("/") for stage in parse_stages(DOCKERFILE) for step in stage.steps
              if step.instruction == "COPY" for s in step.args.split()[:-1]}
    assert tops == {c.split("/")[0] for c in copied}, (sorted(tops), sorted(copied))
    for source in copied:
        assert any(f == source or f.startswith(source + "/") for f in files), source
    assert sum((REPO / f).stat().st_size for f in files) < 30 * 1024 * 1024


# --- the stages --------------------------------------------------------------------------------------------


def test_the_runtime_installs_the_builders_wheels_and_compiles_nothing() -> None:
    builder, runtime = parse_stages(DOCKERFILE)
    assert builder.image == "python:3.11" and builder.name == "builder"  # the full image: gcc, headers
    assert runtime.image == "python:3.11-slim"
    runs = [s.args for s in runtime.steps if s.instruction == "RUN"]
    install = [r for r in runs if "pip install" in r]
    assert len(install) == 1 and "--no-index" in install[0] and "from=builder" in install[0], runs


def test_the_builders_wheel_check_refuses_a_wheel_without_the_compiled_extensions(tmp_path: Path) -> None:
    # What a builder without a compiler makes: setup.py's optional extensions left out, the build "fine".
    with zipfile.ZipFile(tmp_path / "odradek-0.2.0-cp311-cp311-linux_x86_64.whl", "w") as whl:
        whl.writestr("odradek/protocol/record_scan.py", "")
        whl.writestr("odradek/protocol/_record_scan.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
    check = [sys.executable, str(REPO / "docker" / "check_wheel.py"), str(tmp_path)]
    done = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "lacks the compiled odradek/protocol/_produce_codec" in done.stderr, done
    assert "_record_scan" not in done.stderr.split("lacks")[1]
    with zipfile.ZipFile(tmp_path / "odradek-0.2.0-cp311-cp311-linux_x86_64.whl", "a") as whl:
        whl.writestr("odradek/protocol/_produce_codec.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
    assert subprocess.run(check, capture_output=True, timeout=60).returncode == 0
    (tmp_path / "odradek-0.1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"")  # two wheels: which one?
    done = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "expected one odradek wheel" in done.stderr


def _base_env(home: Path) -> dict[str, str]:
    # The machine's pip settings (index, certificates, wheel mirror), nothing of this checkout's Python.
    env = {k: v for k, v in os.environ.items()
           if k.startswith("PIP_") or k in ("PATH", "LANG", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                                              "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE")}
    env["HOME"] = str(home)
    return env


def _index_reachable() -> bool:
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
                           "--no-cache-dir", "setuptools"], capture_output=True, text=True, timeout=120)
    return done.returncode == 0


def _fresh_venv(path: Path) -> Path:
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(path)], check=True, capture_output=True, timeout=120)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _replay(tmp_path: Path, dockerfile: Path = DOCKERFILE) -> dict[str, StageRun]:
    context_files = set(build_context(REPO, load_dockerignore(DOCKERIGNORE)))
    built: dict[str, StageRun] = {}
    for stage in parse_stages(dockerfile):
        env = _base_env(tmp_path / "home")
        # pip's cache of this machine's user, not the image's PIP_NO_CACHE_DIR (which keeps downloads out
        # of the image's layers): the dependencies' wheels are fetched once, not at every run.
        env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
        if stage.image.endswith("-slim"):
            env.update(CC="false", CXX="false")  # python:3.11-slim has no compiler
        venv = _fresh_venv(tmp_path / f"venv-{stage.name}")
        run = run_stage(stage, REPO, context_files, tmp_path / f"root-{stage.name}", venv, env, built,
                        unset=frozenset({"PIP_NO_CACHE_DIR"}))
        built[stage.name] = run
    return built


@pytest.mark.timeout(600)
def test_the_images_build_steps_install_a_broker_with_the_native_codec(tmp_path: Path) -> None:
    if not _index_reachable():
        pytest.skip("pip cannot reach a package index: the builder stage downloads the dependencies' wheels")
    (tmp_path / "home").mkdir()
    built = _replay(tmp_path)
    runtime = built[list(built)[-1]]

    # The installed package, not this checkout, with both compiled modules.
    probe = subprocess.run(
        [str(runtime.venv / "bin" / "python"), "-c",
         "import odradek.protocol.record_scan as r, odradek.protocol.produce_codec as p; print(r.NATIVE, p.NATIVE, r.__file__)"],
        cwd=tmp_path, env=_base_env(tmp_path / "home"), capture_output=True, text=True, timeout=60)
    native_scan, native_codec, where = probe.stdout.split()
    assert (native_scan, native_codec) == ("True", "True"), probe.stderr
    assert where.startswith(str(runtime.venv)), where
    assert "check_wheel: odradek-" in built["builder"].output  # the builder checked its wheel
    # docker/README.md tells TLS users to use PEM stores: PKCS12 needs cryptography, not installed.
    no_crypto = subprocess.run([str(runtime.venv / "bin" / "python"), "-c", "import cryptography"],
                               cwd=tmp_path, capture_output=True, timeout=60)
    assert no_crypto.returncode == 1
    # Only the accounts and ownership steps are left to a real container build.
    assert all(c.split()[0] in ("groupadd", "mkdir") for c in runtime.not_run), runtime.not_run

    # The image's entrypoint and command with its ENV, the listener moved to a free local port as a
    # `docker run -e KAFKA_LISTENERS=...` would.
    workdir = runtime.host(runtime.workdir)
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = {**_base_env(tmp_path / "home"), **runtime.env,
           "KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
           "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
           "PATH": f"{runtime.venv / 'bin'}:{os.environ['PATH']}"}
    log_path = tmp_path / "broker.log"
    with open(log_path, "w") as log:
        broker = subprocess.Popen([str(runtime.venv / "bin" / "odradek"), runtime.rewrite("/etc/odradek/server.properties")],
                                  cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert broker.poll() is None, log_path.read_text()[-4000:]
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log_path.read_text()[-4000:]
                time.sleep(0.2)
        with WireClient("127.0.0.1", port) as c:
            create_topic(c, "image-build", 1)
        got = confluent_roundtrip({"bootstrap.servers": f"127.0.0.1:{port}"}, "image-build", n=5)
        assert got == [f"ck-{i}".encode() for i in range(5)]
        # The partition log went where KAFKA_LOG_DIRS (the image's volume) says.
        assert (runtime.host("/var/lib/odradek/data") / "image-build-0").is_dir()
    finally:
        broker.terminate()
        broker.wait(30)
    text = log_path.read_text()
    assert NOT_NATIVE_WARNING not in text
    assert "sends clients to" not in text
