"""The framing shared by the share-group (KIP-932) and streams-group (KIP-1071) records of
``__consumer_offsets``, Kafka 4.4's formats::

    key    int16 record type | the type's key message at version 0: group_id (and member_id for the
                               per-member types)
    value  int16 version     | the type's value message (flexible); null is a tombstone

Both families write value version 0 and read a newer version as version 0: a newer version only
adds tagged fields (Kafka's rule for these records). The messages come from
protocol/coordinator_schema_data.py. (The consumer-group records version their keys by type and
read value ranges: broker/group/consumer_group_records.py frames those itself.)

Pure functions; any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from odradek.protocol.codec import MessageCodec
from odradek.protocol.coordinator_schema_data import MESSAGES
from odradek.protocol.primitives import DecodeError

_SHORT = struct.Struct(">h")
VALUE_VERSION = 0

# (record type, group id, member id or None, value or None for a tombstone)
FramedRecord = tuple[int, str, "str | None", "dict[str, Any] | None"]


class GroupRecordFraming:
    """Encodes and decodes one family's records: ``names`` maps each record type to its message
    name without the Key/Value suffix; ``error`` is what a record that does not parse raises."""

    def __init__(self, family: str, names: Mapping[int, str], per_member: frozenset[int],
                 error: type[ValueError]) -> None:
        self.family = family
        self.names = dict(names)
        self.key_types = frozenset(names)
        self.per_member = per_member
        self.error = error
        self._codecs: dict[str, MessageCodec] = {}

    def _codec(self, name: str) -> MessageCodec:
        c = self._codecs.get(name)
        if c is None:
            c = self._codecs[name] = MessageCodec(name, 0, MESSAGES)
        return c

    def is_key(self, key: bytes | None) -> bool:
        return key is not None and len(key) >= 2 and _SHORT.unpack_from(key, 0)[0] in self.key_types

    def encode(self, kind: int, group_id: str, member_id: str | None,
               value: dict[str, Any] | None) -> tuple[bytes, bytes | None]:
        body: dict[str, Any] = {"group_id": group_id}
        if kind in self.per_member:
            body["member_id"] = member_id
        key = _SHORT.pack(kind) + self._codec(self.names[kind] + "Key").encode(body)
        if value is None:
            return key, None
        return key, _SHORT.pack(VALUE_VERSION) + self._codec(self.names[kind] + "Value").encode(value)

    def decode(self, key: bytes | None, value: bytes | None) -> FramedRecord:
        if key is None or len(key) < 2:
            raise self.error("key shorter than its type")
        (kind,) = _SHORT.unpack_from(key, 0)
        if kind not in self.key_types:
            raise self.error(f"key type {kind} is not a {self.family} record")
        name = self.names[kind]
        try:
            k, _ = self._codec(name + "Key").decode(key, 2)
            body = None
            if value is not None:
                if len(value) < 2:
                    raise self.error("value shorter than its version")
                (version,) = _SHORT.unpack_from(value, 0)
                if version < 0:
                    raise self.error(f"{name}Value has no version {version}")
                body, _ = self._codec(name + "Value").decode(value, 2)
        except DecodeError as exc:
            raise self.error(str(exc)) from None
        return kind, k["group_id"], k.get("member_id"), body
