"""Which API versions a client used against an Odradek broker, from the broker's own request log.

``request_log_args(dir)`` writes a logging config (config/logging.ini's, with the ``odradek.request``
logger at DEBUG, as the README says to turn Kafka's request logger on) and returns the
``--log-config`` argument for ``BrokerProcess(args=...)``; ``versions_used(broker)`` reads the
broker's log back: API name -> the versions of every request it answered with it. A test asserts
from it that a client really spoke a version (e.g. EndTxn v5), not only that it got the outcome.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
# broker/api/dispatcher.py: "request <peer> <API> v<version> corr=<id> client=<client id>: <body>"
_REQUEST = re.compile(r"\brequest \S+ (\w+) v(\d+) corr=")


def request_log_args(directory: Path) -> list[str]:
    """The ``--log-config`` arguments of a broker that logs every request it answers."""
    text = (REPO / "config" / "logging.ini").read_text()
    text = text.replace("[logger_request]\nlevel=INFO", "[logger_request]\nlevel=DEBUG")
    assert "[logger_request]\nlevel=DEBUG" in text, "config/logging.ini's request logger section moved"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "logging-requests.ini"
    path.write_text(text)
    return ["--log-config", str(path)]


def versions_used(broker: BrokerProcess) -> dict[str, set[int]]:
    """API name -> the versions of the requests the broker logged, from its whole log."""
    used: dict[str, set[int]] = {}
    with open(broker.log_path, errors="replace") as log:
        for line in log:
            m = _REQUEST.search(line)
            if m is not None:
                used.setdefault(m.group(1), set()).add(int(m.group(2)))
    return used
