"""quixstreams 3.28, kept apart from the venv: it requires confluent-kafka < 2.13, and the test extra runs
confluent-kafka 2.16 (the librdkafka the rest of the suite tests), so it cannot join the extra.

``pip install --target .cache/stream-apps/quixstreams-3.28.1 quixstreams==3.28.1`` (with its own
dependencies, confluent-kafka 2.12 among them); tests/integration/test_stream_apps.py runs
tests/support/quix_counter.py in a subprocess with that directory first on PYTHONPATH, so it imports
that confluent-kafka and not the venv's. The Makefile's ``old-clients`` target (a prerequisite of
``make test``, so CI's clean clone has it) runs ``python -m tests.support.stream_apps install``: a
silent no-op once installed.

Who may call it: any thread; ``install`` is for the command line and the Makefile.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QUIXSTREAMS_VERSION = "3.28.1"
QUIXSTREAMS_DIR = REPO / ".cache" / "stream-apps" / f"quixstreams-{QUIXSTREAMS_VERSION}"
# Written after a complete install: a directory without it is an interrupted one.
_INSTALLED = QUIXSTREAMS_DIR / ".installed"


def quixstreams_installed() -> bool:
    return _INSTALLED.exists()


def install_quixstreams() -> None:
    if quixstreams_installed():
        return
    shutil.rmtree(QUIXSTREAMS_DIR, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--target", str(QUIXSTREAMS_DIR), f"quixstreams=={QUIXSTREAMS_VERSION}"], check=True)
    _INSTALLED.touch()


def main(argv: list[str]) -> int:
    if argv != ["install"]:
        print("usage: python -m tests.support.stream_apps install", file=sys.stderr)
        return 2
    install_quixstreams()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
