"""A lazily decoded table of message schemas (the type of ``schema_data.MESSAGES``).

The generated tables hold each message's schema as a JSON string and decode it on first use:
building ~180 nested dict/tuple literals at import cost ~140 ms of start-up, while 180 strings
cost almost nothing and a broker only ever touches the few dozen messages it serves.

A decoded schema is a dict: ``api_key``, ``type``, ``valid`` and ``flexible`` version ranges
(``[low, high]`` or None) and ``fields`` rows ``[name, type, versions, nullable_versions, tag,
tagged_versions, default, no_flexible_encoding, child_fields]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any


class LazySchemaTable(Mapping[str, dict]):
    def __init__(self, raw: dict[str, str]) -> None:
        self._raw = raw
        self._decoded: dict[str, dict] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        found = self._decoded.get(name)
        if found is None:
            found = self._decoded[name] = json.loads(self._raw[name])
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)
