"""The distribution users pip-install: the four packages, the schema tables, the console script."""

from __future__ import annotations

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
    for package in ("broker", "protocol", "storage", "controller"):
        assert f"{package}/__init__.py" in names
    assert "protocol/schema_data.py" in names and "broker/handlers/fetch.py" in names
    assert not any(n.startswith(("tests/", "pipeline/", "bench/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "odradek = broker.main:main" in text


def _make_dry_run(target: str, venv: Path) -> str:
    """The commands `make TARGET` would run for a fresh virtualenv at ``venv`` (make -n runs nothing)."""
    result = subprocess.run(["make", "-n", "-C", str(REPO), target, f"VENV={venv}"],
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
    assert "building 'protocol._record_scan' extension" in output
    assert "building 'protocol._produce_codec' extension" in output
    # The venv running the suite keeps its own install (the README's `make run` uses its script).
    assert "Uninstalling odradek" not in output
    assert (Path(sys.executable).parent / "odradek").exists()
