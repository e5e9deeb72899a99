"""Which (api key, version) pairs this broker process received: the test suite's record of what it exercised.

Off unless the environment names a file, ``ODRADEK_REQUEST_VERSION_RECORD=<path>``. Then the dispatcher's
record step (``Dispatcher.record_then_process``) gives every request frame to ``RequestVersionRecord.note``,
which appends one line to that file the first time this process receives a pair, before the request is
handled::

    <api key> <api version>\\n

(decimal, one space). Only pairs this broker's registry knows are written (an API it has a handler for,
at a version from 0 to the handler's maximum), so hostile frames with random keys and versions add
nothing. Several broker processes share one file: each line is one ``write`` on a descriptor opened
``O_APPEND``, so lines never interleave, and a broker killed with SIGKILL has already written all it saw.

The test suite sets the variable in each pytest process (tests/support/api_coverage.py): every broker
its tests start, in-process or as a subprocess, writes into that process's file, and the suite
attributes the new lines to the test that ran; ``make api-coverage`` turns that into the record behind
docs/clients.md's conformance table. With the variable unset the request channel calls
``Dispatcher.process`` directly: the request path is exactly what it is without this module.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from odradek.broker.api.registry import HandlerSpec

log = logging.getLogger(__name__)

ENV = "ODRADEK_REQUEST_VERSION_RECORD"

# One descriptor per file for the whole process: tests start many brokers in one pytest process.
_descriptors: dict[str, int] = {}


def _descriptor(path: str) -> int:
    fd = _descriptors.get(path)
    if fd is None:
        fd = _descriptors[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return fd


class RequestVersionRecord:
    """One dispatcher's record: each broker notes each pair once, whatever another broker of the same
    process noted before (a later test's broker must still report what that test sent)."""

    def __init__(self, path: str, handlers: Mapping[int, HandlerSpec]) -> None:
        self._fd = _descriptor(path)
        # A request frame starts with the api key and version, two big-endian int16s; as one
        # unsigned 32-bit word they are the pair itself, so a frame costs one int conversion and
        # one set lookup here.
        self._wanted = {(spec.api_key << 16) | version
                        for spec in handlers.values() for version in range(spec.max_version + 1)}
        self._seen: set[int] = set()

    @classmethod
    def from_environment(cls, handlers: Mapping[int, HandlerSpec]) -> RequestVersionRecord | None:
        path = os.environ.get(ENV)
        if not path:
            return None
        try:
            return cls(path, handlers)
        except OSError as exc:  # a test hook: never stop a broker from serving
            log.warning("%s=%s cannot be opened (%s); not recording request versions", ENV, path, exc)
            return None

    def note(self, frame: bytes | memoryview) -> None:
        """Record ``frame``'s (api key, version) if it is wanted and new to this broker."""
        if len(frame) >= 4:
            pair = int.from_bytes(frame[:4], "big")
            if pair not in self._seen and pair in self._wanted:
                self._seen.add(pair)
                self._write(pair)

    def _write(self, pair: int) -> None:
        try:
            os.write(self._fd, f"{pair >> 16} {pair & 0xFFFF}\n".encode())
        except OSError as exc:
            log.warning("recording request version %d v%d failed: %s", pair >> 16, pair & 0xFFFF, exc)
