"""Schema-aware generation of valid Kafka requests, with a map of where every length lives.

The fuzzer needs two things from one request: its bytes, and the positions of the fields a
mutation should hit (string/bytes lengths, array counts, tagged-field counts and sizes, fixed-width
integers, record batches). ``encode_request`` walks Kafka's schema (protocol/schema_data.py, the
same tables the broker's codec is compiled from) and writes the wire form while noting each such
field as a :class:`Span`. The walk mirrors protocol/codec.py's encoder byte for byte;
``tests/fuzz/test_generate.py`` checks that against ``codec(...).encode`` so the map can be trusted.

Values come from :class:`ValueGen`: small integers mostly (so requests reach deep into handlers),
type extremes sometimes, strings from a small pool of topic-like names (so a run touches a bounded
set of topics and groups), nulls for nullable fields, arrays of 0-3 elements (rarely 10-40), tagged
fields, and for ``records`` fields valid v2 record batches built with protocol/records.py.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol import primitives as P
from odradek.protocol.codec import codec
from odradek.protocol.records import Record, encode_batch
from odradek.protocol.schema_data import MESSAGES

FIXED = P.FIXED_FORMATS
INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
# Names the generated requests use for topics, groups, configs...: few, so that auto-created topics
# and groups stay bounded over a long run. The real-client probe topic is never among them.
NAME_POOL = ("fz-a", "fz-b", "fz-c", "", "fz-" + "x" * 300, "fz-\u00fc", "fz.a")


@dataclass
class Span:
    """One mutable field of an encoded request: ``size`` bytes at ``pos`` (body-relative).

    kind: "len16" (string length), "len32" (bytes/records length, array count), "uvar"
    (compact length or count, stored +1), "tagcount", "tagsize", "int" (fixed-width integer;
    ``fmt`` is its struct letter), "records" (a record-batch blob).
    """

    pos: int
    size: int
    kind: str
    fmt: str = ""
    path: str = ""


@dataclass
class Encoded:
    api_key: int
    version: int
    name: str
    value: dict
    body: bytes
    spans: list[Span] = field(default_factory=list)


def _in(r: Any, v: int) -> bool:
    return r is not None and r[0] <= v <= r[1]


class ValueGen:
    """Random values of Kafka schema types; ``extreme`` is the chance of a type's min/max."""

    def __init__(self, rng: random.Random, extreme: float = 0.08, null: float = 0.12,
                 records_hook: Callable[[bytes, random.Random], bytes] | None = None) -> None:
        self.rng = rng
        self.extreme = extreme
        self.null = null
        self.records_hook = records_hook

    def integer(self, kind: str) -> int:
        lo, hi = INT_RANGES[kind]
        r = self.rng.random()
        if r < self.extreme:
            return self.rng.choice((lo, hi, lo + 1, hi - 1))
        if r < self.extreme + 0.1:
            return self.rng.randint(lo, hi)
        return max(lo, min(hi, self.rng.choice((-1, 0, 0, 1, 1, 2, 3))))

    def string(self) -> str:
        return self.rng.choice(NAME_POOL)

    def records(self) -> bytes:
        rng = self.rng
        out = b""
        for _ in range(rng.choice((1, 1, 1, 2))):
            recs = [
                Record(timestamp=rng.choice((0, 1_700_000_000_000, -1)),
                       key=rng.choice((None, b"k", bytes(rng.randrange(256) for _ in range(rng.randrange(20))))),
                       value=rng.choice((None, b"v", b"value" * rng.randrange(5))),
                       headers=[("h", rng.choice((None, b"x")))] * rng.randrange(3))
                for _ in range(rng.randrange(4))
            ]
            producer = rng.random() < 0.3
            out += encode_batch(
                recs,
                compression=rng.choice((0, 0, 0, 1, 2, 3, 4)),
                producer_id=rng.randrange(1000) if producer else -1,
                producer_epoch=0 if producer else -1,
                base_sequence=rng.randrange(5) if producer else -1,
                is_transactional=producer and rng.random() < 0.2,
            )
        if self.records_hook is not None:
            out = self.records_hook(out, rng)
        return out

    def value(self, f: tuple, version: int) -> Any:
        name, kind, versions, nullable, tag, tagged, default, no_flex, children = f
        rng = self.rng
        if _in(nullable, version) and rng.random() < self.null:
            return None
        if kind in INT_RANGES:
            return self.integer(kind)
        if kind == "float64":
            return rng.choice((0.0, 1.5, -1.0, float("inf")))
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "string":
            return self.string()
        if kind == "bytes":
            return bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 8, 30))))
        if kind == "uuid":
            return rng.choice((uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))))
        if kind == "records":
            return self.records()
        if kind == "struct":
            return self.struct(children, version)
        if kind.startswith("[]"):
            elem = kind[2:]
            # Mostly 0-3 elements; now and then a longer array, for the handlers' loops.
            n = rng.choice((0, 1, 1, 2, 3)) if rng.random() > 0.02 else rng.randint(10, 40)
            if elem == "struct":
                return [self.struct(children, version) for _ in range(n)]
            sub = (name, elem, versions, None, None, None, None, no_flex, None)
            return [self.value(sub, version) for _ in range(n)]
        raise ValueError(f"unsupported type {kind}")

    def struct(self, fields: list, version: int) -> dict:
        out = {}
        for f in fields:
            if not _in(f[2], version):
                continue
            tagged = _in(f[5], version)
            if tagged and self.rng.random() < 0.5:
                continue  # tagged field left out: its default
            value = self.value(f, version)
            # The codec writes a tagged field only when it differs from its default: leave such
            # values out so the span map and the codec agree on the bytes.
            if tagged and (value is None or value == [] or (f[1] != "struct" and value == _default(f, version))):
                continue
            out[f[0]] = value
        return out


class Writer:
    """Writes a value the way protocol/codec.py does and records the :class:`Span` of each field."""

    def __init__(self, version: int, flexible: bool, unknown_tags: Callable[[], list] | None = None) -> None:
        self.version = version
        self.flexible = flexible
        self.out = bytearray()
        self.spans: list[Span] = []
        self.unknown_tags = unknown_tags

    def _uvar(self, value: int, kind: str, path: str) -> None:
        at = len(self.out)
        P.write_uvarint(self.out, value)
        self.spans.append(Span(at, len(self.out) - at, kind, path=path))

    def _fixed(self, kind: str, value: Any, path: str) -> None:
        fmt = FIXED[kind][0]
        at = len(self.out)
        self.out += struct.pack(">" + fmt, value)
        if kind in INT_RANGES:
            self.spans.append(Span(at, FIXED[kind][1], "int", fmt, path))

    def _len(self, n: int, flex: bool, wide: bool, path: str) -> None:
        if flex:
            self._uvar(n + 1 if n >= 0 else 0, "uvar", path)
        else:
            at = len(self.out)
            self.out += struct.pack(">i" if wide else ">h", n)
            self.spans.append(Span(at, 4 if wide else 2, "len32" if wide else "len16", path=path))

    def scalar(self, kind: str, value: Any, flex: bool, path: str) -> None:
        if kind in FIXED:
            self._fixed(kind, value, path)
        elif kind == "string":
            data = None if value is None else value.encode()
            self._len(-1 if data is None else len(data), flex, False, path)
            self.out += data or b""
        elif kind in ("bytes", "records"):
            self._len(-1 if value is None else len(value), flex, True, path)
            if value is not None:
                if kind == "records":
                    self.spans.append(Span(len(self.out), len(value), "records", path=path))
                self.out += value
        elif kind == "uuid":
            self.out += (value or uuid.UUID(int=0)).bytes
        else:
            raise ValueError(kind)

    def field(self, f: tuple, value: Any, path: str) -> None:
        name, kind, versions, nullable, tag, tagged, default, no_flex, children = f
        flex = self.flexible and not no_flex
        if kind == "struct":
            if _in(nullable, self.version):
                if value is None:
                    self.out.append(255)
                    return
                self.out.append(1)
            self.struct(children, value if value is not None else {}, path)
        elif kind.startswith("[]"):
            elem = kind[2:]
            if value is None:
                self._len(-1, flex, True, path)
                return
            self._len(len(value), flex, True, path)
            for i, x in enumerate(value):
                if elem == "struct":
                    self.struct(children, x, f"{path}[{i}]")
                else:
                    self.scalar(elem, x, flex, f"{path}[{i}]")
        else:
            self.scalar(kind, value, flex, path)

    def struct(self, fields: list, m: dict, path: str = "") -> None:
        v = self.version
        regular = [f for f in fields if _in(f[2], v) and not (self.flexible and _in(f[5], v))]
        tagged = sorted((f for f in fields if _in(f[2], v) and self.flexible and _in(f[5], v)), key=lambda f: f[4])
        for f in regular:
            self.field(f, m.get(f[0], _default(f, v)), f"{path}.{f[0]}")
        if not self.flexible:
            return
        tags: list[tuple[int, bytes, list[Span]]] = []
        for f in tagged:
            if f[0] not in m:
                continue
            sub = Writer(v, self.flexible, self.unknown_tags)
            sub.field(f, m[f[0]], f"{path}.{f[0]}")
            tags.append((f[4], bytes(sub.out), sub.spans))
        if self.unknown_tags is not None:
            tags += [(t, data, []) for t, data in self.unknown_tags()]
            tags.sort(key=lambda t: t[0])
        self._uvar(len(tags), "tagcount", path)
        for tag, data, spans in tags:
            P.write_uvarint(self.out, tag)
            self._uvar(len(data), "tagsize", path)
            base = len(self.out)
            self.out += data
            self.spans += [Span(s.pos + base, s.size, s.kind, s.fmt, s.path) for s in spans]


def _default(f: tuple, version: int) -> Any:
    kind = f[1]
    if kind.startswith("[]"):
        return None if (f[6] is None and _in(f[3], version)) else []
    if kind == "struct":
        return None
    from odradek.protocol.codec import _zero

    return _zero(kind, f[6], _in(f[3], version))


def request_name(api_key: int) -> str:
    for name, spec in MESSAGES.items():
        if spec["type"] == "request" and spec["api_key"] == api_key:
            return name
    raise KeyError(api_key)


def generate(rng: random.Random, api_key: int, version: int, unknown_tags: bool = False,
             records_hook: Callable[[bytes, random.Random], bytes] | None = None) -> Encoded:
    """One valid request body (no header) of ``api_key`` at ``version``, with its span map."""
    name = request_name(api_key)
    spec = MESSAGES[name]
    flexible = _in(spec["flexible"], version)
    gen = ValueGen(rng, records_hook=records_hook)
    value = gen.struct(spec["fields"], version)
    tags_fn = None
    if unknown_tags and flexible:
        def tags_fn() -> list[tuple[int, bytes]]:
            n = rng.choice((0, 0, 1, 2))
            return [(10_000 + rng.randrange(1000) * 2 + i, bytes(rng.randrange(256) for _ in range(rng.randrange(6))))
                    for i in range(n)]
    w = Writer(version, flexible, tags_fn)
    w.struct(spec["fields"], value)
    return Encoded(api_key, version, name, value, bytes(w.out), w.spans)


def encode_header(api_key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool,
                  header_tags: bytes = b"\x00") -> tuple[bytes, list[Span]]:
    """Request header v1/v2 bytes and spans (client_id length, header tag count)."""
    out = bytearray(struct.pack(">hhi", api_key, version, correlation_id))
    spans = [Span(0, 2, "int", "h", "header.api_key"), Span(2, 2, "int", "h", "header.api_version")]
    spans.append(Span(8, 2, "len16", path="header.client_id"))
    P.write_string(out, client_id)
    if flexible:
        spans.append(Span(len(out), 1, "tagcount", path="header.tags"))
        out += header_tags
    return bytes(out), spans


def codec_bytes(enc: Encoded) -> bytes:
    """The broker codec's encoding of the same value (the cross-check of the span map)."""
    return codec(enc.name, enc.version).encode(enc.value)
