"""broker/allocator: the glibc malloc thresholds the broker sets at start-up."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys

import pytest

from odradek.broker.network import allocator

GLIBC = platform.libc_ver()[0] == "glibc"


def _run(code: str, env: dict[str, str] | None = None) -> str:
    import os

    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not GLIBC or ctypes.util.find_library("c") is None, reason="the thresholds are glibc's")
def test_glibc_takes_the_thresholds() -> None:
    # A fresh process: the setting is process-wide and must not leak into the test runner.
    assert _run("from odradek.broker.network.allocator import tune_malloc; print(tune_malloc())").strip() == "True"


def test_the_operators_own_malloc_variables_win() -> None:
    out = _run("from odradek.broker.network.allocator import tune_malloc; print(tune_malloc())",
               {"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert out.strip() == "False"


def test_thresholds_cover_a_request_and_bound_what_is_kept() -> None:
    # A 64 KiB produce makes 64-256 KiB buffers (uvloop reads up to 256 KiB at a time); the trim
    # threshold bounds what a heap keeps after a burst.
    assert allocator.MMAP_THRESHOLD_BYTES >= 256 << 10
    assert allocator.TRIM_THRESHOLD_BYTES <= 64 << 20
