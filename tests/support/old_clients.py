"""The oldest client releases Kafka 4.4 still serves, kept apart from the test extra's current ones so
that negotiating protocol versions down to them stays tested (tests/integration/test_old_clients.py).

- kafka-python 2.0.2 (the release KIP-896 counted when it chose which versions Kafka 4.0 keeps):
  ``pip install --target .cache/old-clients/kafka-python-2.0.2``, run in a subprocess with only that
  directory on PYTHONPATH, so it shadows the kafka-python 3.x of the venv and nothing else. The
  Makefile's ``old-clients`` target (a prerequisite of ``make test``, so CI's clean clone has it)
  runs ``python -m tests.support.old_clients install``: a silent no-op once installed.
- The Java client 2.1.0 is a Maven module (java/old-java-client) of ``make jars``, with a
  classpath of its own (tools.kafka_dist.classpath("old-java-client")).
- librdkafka 2.0.2 is Debian's, through its kcat 1.7.1 (.ci/run installs the package).

Who may call it: any thread; ``install`` is for the command line and the Makefile.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OLD_CLIENTS = REPO / ".cache" / "old-clients"

KAFKA_PYTHON_VERSION = "2.0.2"
KAFKA_PYTHON_DIR = OLD_CLIENTS / f"kafka-python-{KAFKA_PYTHON_VERSION}"
# Written after a complete install: a directory without it is an interrupted one.
_INSTALLED = KAFKA_PYTHON_DIR / ".installed"


def kafka_python_installed() -> bool:
    return _INSTALLED.exists()


def install_kafka_python() -> None:
    """pip-install kafka-python 2.0.2 (pure Python, no dependencies) into its own directory."""
    if kafka_python_installed():
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade",
                    "--target", str(KAFKA_PYTHON_DIR), f"kafka-python=={KAFKA_PYTHON_VERSION}"], check=True)
    _INSTALLED.touch()


def main(argv: list[str]) -> int:
    if argv != ["install"]:
        print("usage: python -m tests.support.old_clients install", file=sys.stderr)
        return 2
    install_kafka_python()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
