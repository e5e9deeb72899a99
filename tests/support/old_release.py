"""The previous Odradek release's source tree, for the upgrade tests (issue 27, item 8).

``tests/data/releases/odradek-<version>.tar.gz`` is ``git archive`` of a tagged release's runtime
packages (broker/, protocol/, storage/, controller/), nothing else: the tests run that tree as a
broker process (``PYTHONPATH`` = the tree) to write data dirs and an etcd store the way that release
wrote them, then open them with this checkout, or replace its nodes one by one under load (a rolling
upgrade). It is a file in the repository, not a ``git worktree`` of the tag, so the tests also run in a
clone without history. The old tree runs without its C extensions (their pure-Python twins give the
same results, slower), which is what ``pip install`` without a compiler gives too.

``tests/data/releases/README.md`` says which commit each archive is and how to make the next one.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHIVES = REPO / "tests" / "data" / "releases"
# Where archives are unpacked (once per version; .cache is git-ignored).
UNPACKED = REPO / ".cache" / "releases"

# The release before this one: the newest archive under tests/data/releases.
PREVIOUS_RELEASE = "0.1.0"


def release_tree(version: str = PREVIOUS_RELEASE) -> Path:
    """The unpacked source tree of Odradek ``version`` (unpacked on first use; safe across xdist workers)."""
    root = UNPACKED / f"odradek-{version}"
    if (root / "broker" / "main.py").exists():
        return root
    archive = ARCHIVES / f"odradek-{version}.tar.gz"
    UNPACKED.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".odradek-{version}-", dir=UNPACKED))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        try:
            os.rename(staging / f"odradek-{version}", root)
        except OSError:
            if not (root / "broker" / "main.py").exists():  # not another worker having won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root
