"""Message codecs compiled from Kafka's schemas (protocol/schema_data.py).

Why our own codec: Kafka's JSON message definitions are the single source of truth for field
order, types, versions, nullability and tags. ``tools/gen_schema_data.py`` turns them into compact
tables; this module compiles, on first use, one specialised Python function per (message, version,
struct) that reads or writes exactly the fields of that version — straight-line code with runs of
fixed-width fields fused into one ``struct`` call. That is several times faster than walking a
schema per message, and far faster than generic dataclass codecs (the PyPI ``kio`` encoder took
~860 µs for a 4.6 KB Metadata response here, and its reader raises on unknown tagged fields, which
Kafka requires a receiver to skip).

Values are plain dicts keyed by Kafka's field names in snake_case (``throttle_time_ms``,
``partition_index``). Decoders fill in the default of every field the version lacks, so handlers
read ``req["isolation_level"]`` whatever the version. Encoders take ``m.get(name, default)``, so a
handler builds the newest shape once and each version writes the fields it has.

``records`` fields decode to a zero-copy ``memoryview`` into the request frame. When encoding, a
records value may be bytes or a *file region* (any object with ``size`` that is not a bytes-like
object): the encoder writes its length prefix and notes ``(position, region)`` in ``regions`` so
the connection can ``os.sendfile`` the region's bytes at that point of the frame (zero-copy Fetch).

An element of a struct array may also be an :class:`Encoded` value: bytes already in that
element's wire form for this version (made by :meth:`MessageCodec.element_encoder`), which the
encoder copies as they are. The Metadata handler caches each topic's entry that way, because
encoding a topic of 10,000 partitions field by field costs ~60 ms of the handler loop.

Rules for the generated readers (the wire rules are in protocol/primitives.py):
1. Unknown tagged fields are skipped, never an error.
2. Every length and count is checked against the bytes that remain before anything is allocated.
3. Any malformed input raises DecodeError; nothing else escapes ``decode``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from odradek.protocol import primitives as P
from odradek.protocol import produce_codec
from odradek.protocol.primitives import DecodeError
from odradek.protocol.schema_data import MESSAGES

ZERO_UUID = uuid.UUID(int=0)
OPEN = 32767

Field = tuple  # (name, kind, versions, nullable, tag, tagged, default, no_flex, children)


def _in(r: tuple[int, int] | None, v: int) -> bool:
    return r is not None and r[0] <= v <= r[1]


def _zero(kind: str, default: Any, nullable: bool) -> Any:
    """The value a field takes when absent: the schema default, else the type's zero."""
    if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return 0 if default is None else int(default)
    if kind == "float64":
        return 0.0 if default is None else float(default)
    if kind == "bool":
        return bool(default) if default is not None else False
    if kind == "string":
        if default is None:
            return None if nullable else ""
        return default
    if kind == "uuid":
        return ZERO_UUID
    if kind in ("bytes", "records"):
        return None if nullable or default is None and kind == "records" else b""
    return None


def _read_uuid(buf: bytes | bytearray | memoryview, pos: int) -> tuple[uuid.UUID, int]:
    if pos + 16 > len(buf):
        raise DecodeError("truncated uuid")
    return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def _write_records(out: bytearray, regions: list, value: Any, compact: bool) -> None:
    if value is None:
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
        return
    if isinstance(value, (bytes, bytearray, memoryview)):
        if compact:
            P.write_uvarint(out, len(value) + 1)
        else:
            out += P.INT32.pack(len(value))
        out += value
        return
    size = value.size
    if compact:
        P.write_uvarint(out, size + 1)
    else:
        out += P.INT32.pack(size)
    regions.append((len(out), value))


def _check_count(n: int, buf: bytes | bytearray | memoryview, pos: int) -> None:
    # Every element takes at least one byte, so a count beyond the remaining bytes is a lie;
    # refusing it here stops a hostile 2**31 count before any list is built.
    if n > len(buf) - pos:
        raise DecodeError(f"array count {n} exceeds the {len(buf) - pos} bytes left")


class _Compiler:
    """Builds the source of all functions for one (message, version)."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "P": P,
            "DecodeError": DecodeError,
            "_read_uuid": _read_uuid,
            "_write_records": _write_records,
            "_check_count": _check_count,
            "_UUID": uuid.UUID,
            "ZERO_UUID": ZERO_UUID,
            "Encoded": Encoded,
        }
        self.counter = 0

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"_{prefix}{self.counter}"

    def const(self, value: Any) -> str:
        if value is None or isinstance(value, (bool, int, float)):
            return repr(value)
        if isinstance(value, str):
            return repr(value)
        key = self.name("c")
        self.ns[key] = value
        return key

    # -- decoding -------------------------------------------------------------------------

    def default_expr(self, f: Field) -> str:
        name, kind, versions, nullable, tag, tagged, default, no_flex, children = f
        is_nullable = _in(nullable, self.version)
        if kind == "[]struct" or kind.startswith("[]"):
            return "None" if (default is None and is_nullable) else "[]"
        if kind == "struct":
            return f"{self.struct_defaults(children)}()"
        # A field this version lacks takes Kafka's default: null for fields that are nullable in
        # the versions that have them (their schema default is "null"; e.g. JoinGroup v4's
        # absent group_instance_id must read as None, not "", or it looks like a static member).
        return self.const(_zero(kind, default, is_nullable or nullable is not None))

    def struct_defaults(self, children: list[Field]) -> str:
        fn = self.name("mk")
        body = [f"def {fn}():", "    return {"]
        for c in children:
            body.append(f"        {c[0]!r}: {self.default_expr(c)},")
        body.append("    }")
        self.lines.extend(body)
        return fn

    def read_scalar(self, kind: str, flex: bool, target: str, ind: str, nullable: bool, b: str = "buf") -> list[str]:
        """Lines that read one non-fixed scalar into ``target`` and advance ``pos``."""
        if kind == "string":
            fn = "P.read_compact_string" if flex else "P.read_string"
        elif kind == "bytes":
            fn = "P.read_compact_bytes" if flex else "P.read_bytes"
        elif kind == "records":
            fn = "P.read_compact_records" if flex else "P.read_records"
        elif kind == "uuid":
            fn = "_read_uuid"
        else:
            raise ValueError(f"unsupported type {kind}")
        out = [f"{ind}{target}, pos = {fn}({b}, pos)"]
        if kind in ("string", "bytes") and not nullable:
            out.append(f"{ind}if {target} is None: raise DecodeError('non-nullable field is null')")
        return out

    def read_count(self, flex: bool, ind: str, b: str) -> list[str]:
        if flex:
            return [f"{ind}n, pos = P.read_uvarint({b}, pos)", f"{ind}n -= 1"]
        return [
            f"{ind}if pos + 4 > len({b}): raise DecodeError('truncated array length')",
            f"{ind}n = P.INT32.unpack_from({b}, pos)[0]",
            f"{ind}pos += 4",
        ]

    def read_field(self, f: Field, target: str, ind: str, b: str = "buf") -> list[str]:
        name, kind, versions, nullable, tag, tagged, default, no_flex, children = f
        v = self.version
        flex = self.flexible and not no_flex
        is_nullable = _in(nullable, v)
        if kind in P.FIXED_FORMATS:
            fmt, width = P.FIXED_FORMATS[kind]
            s = self.const(struct.Struct(">" + fmt))
            return [f"{ind}{target} = {s}.unpack_from({b}, pos)[0]", f"{ind}pos += {width}"]
        if kind == "struct":
            fn = self.compile_decoder(children)
            if is_nullable:
                return [
                    f"{ind}if pos + 1 > len({b}): raise DecodeError('truncated struct marker')",
                    f"{ind}if {b}[pos] == 255:",
                    f"{ind}    pos += 1",
                    f"{ind}    {target} = None",
                    f"{ind}else:",
                    f"{ind}    pos += 1",
                    f"{ind}    {target}, pos = {fn}({b}, pos)",
                ]
            return [f"{ind}{target}, pos = {fn}({b}, pos)"]
        if kind.startswith("[]"):
            elem = kind[2:]
            lines = self.read_count(flex, ind, b)
            null_value = "None" if is_nullable else "[]"
            lines += [
                f"{ind}if n < 0:",
                f"{ind}    if n != -1: raise DecodeError('invalid array length')",
                f"{ind}    {target} = {null_value}",
                f"{ind}else:",
                f"{ind}    _check_count(n, {b}, pos)",
            ]
            i2 = ind + "    "
            if elem == "struct":
                fn = self.compile_decoder(children)
                lines += [
                    f"{i2}lst = []",
                    f"{i2}for _ in range(n):",
                    f"{i2}    x, pos = {fn}({b}, pos)",
                    f"{i2}    lst.append(x)",
                    f"{i2}{target} = lst",
                ]
            elif elem in P.FIXED_FORMATS:
                fmt, width = P.FIXED_FORMATS[elem]
                lines += [
                    f"{i2}if pos + n * {width} > len({b}): raise DecodeError('truncated array')",
                    f"{i2}{target} = list(struct.unpack_from('>%d{fmt}' % n, {b}, pos))",
                    f"{i2}pos += n * {width}",
                ]
                self.ns["struct"] = struct
            else:
                lines += [f"{i2}lst = []", f"{i2}for _ in range(n):"]
                lines += self.read_scalar(elem, flex, "x", i2 + "    ", False, b)
                lines += [f"{i2}    lst.append(x)", f"{i2}{target} = lst"]
            return lines
        return self.read_scalar(kind, flex, target, ind, is_nullable, b)

    def compile_decoder(self, fields: list[Field]) -> str:
        v = self.version
        fn = self.name("d")
        body = [f"def {fn}(buf, pos):", "    m = {}"]
        regular = [f for f in fields if _in(f[2], v) and not (self.flexible and _in(f[5], v))]
        tagged = [f for f in fields if _in(f[2], v) and self.flexible and _in(f[5], v)]
        absent = [f for f in fields if not _in(f[2], v)]
        i = 0
        while i < len(regular):
            # Fuse a run of fixed-width fields into one struct call.
            run = []
            while i < len(regular) and regular[i][1] in P.FIXED_FORMATS:
                run.append(regular[i])
                i += 1
            if len(run) > 1:
                fmt = ">" + "".join(P.FIXED_FORMATS[f[1]][0] for f in run)
                s = self.const(struct.Struct(fmt))
                width = struct.calcsize(fmt)
                targets = ", ".join(f"m[{f[0]!r}]" for f in run)
                body.append(f"    ({targets},) = {s}.unpack_from(buf, pos)")
                body.append(f"    pos += {width}")
            elif run:
                body += self.read_field(run[0], f"m[{run[0][0]!r}]", "    ")
            if i < len(regular) and regular[i][1] not in P.FIXED_FORMATS:
                f = regular[i]
                body += self.read_field(f, f"m[{f[0]!r}]", "    ")
                i += 1
        for f in absent + tagged:
            body.append(f"    m[{f[0]!r}] = {self.default_expr(f)}")
        if self.flexible:
            if tagged:
                body += [
                    "    nt, pos = P.read_uvarint(buf, pos)",
                    "    for _ in range(nt):",
                    "        tag, pos = P.read_uvarint(buf, pos)",
                    "        size, pos = P.read_uvarint(buf, pos)",
                    "        P.need(buf, pos, size)",
                    "        end = pos + size",
                ]
                first = True
                for f in tagged:
                    kw = "if" if first else "elif"
                    first = False
                    body.append(f"        {kw} tag == {f[4]}:")
                    body.append("            sub = buf[:end]")
                    body += self.read_field(f, f"m[{f[0]!r}]", "            ", "sub")
                body.append("        pos = end")
            else:
                body.append("    pos = P.skip_tagged_fields(buf, pos)")
        body.append("    return m, pos")
        self.lines.extend(body)
        return fn

    # -- encoding -------------------------------------------------------------------------

    def write_value(self, f: Field, value: str, ind: str) -> list[str]:
        name, kind, versions, nullable, tag, tagged, default, no_flex, children = f
        flex = self.flexible and not no_flex
        is_nullable = _in(nullable, self.version)
        if kind in P.FIXED_FORMATS:
            fmt, _ = P.FIXED_FORMATS[kind]
            s = self.const(struct.Struct(">" + fmt))
            return [f"{ind}out += {s}.pack({value})"]
        if kind == "string":
            fn = "P.write_compact_string" if flex else "P.write_string"
            return [f"{ind}{fn}(out, {value})"]
        if kind == "bytes":
            fn = "P.write_compact_bytes" if flex else "P.write_bytes"
            return [f"{ind}{fn}(out, {value})"]
        if kind == "records":
            return [f"{ind}_write_records(out, regions, {value}, {flex})"]
        if kind == "uuid":
            return [f"{ind}out += ({value} or ZERO_UUID).bytes"]
        if kind == "struct":
            fn = self.compile_encoder(children)
            if is_nullable:
                return [
                    f"{ind}x = {value}",
                    f"{ind}if x is None:",
                    f"{ind}    out.append(255)",
                    f"{ind}else:",
                    f"{ind}    out.append(1)",
                    f"{ind}    {fn}(x, out, regions)",
                ]
            return [f"{ind}x = {value}", f"{ind}{fn}(x if x is not None else {{}}, out, regions)"]
        if kind.startswith("[]"):
            elem = kind[2:]
            lines = [f"{ind}lst = {value}", f"{ind}if lst is None:"]
            null_marker = "b'\\x00'" if flex else "b'\\xff\\xff\\xff\\xff'"
            lines.append(f"{ind}    out += {null_marker}")
            lines.append(f"{ind}else:")
            i2 = ind + "    "
            if flex:
                lines.append(f"{i2}P.write_uvarint(out, len(lst) + 1)")
            else:
                lines.append(f"{i2}out += P.INT32.pack(len(lst))")
            if elem == "struct":
                fn = self.compile_encoder(children)
                lines += [f"{i2}for x in lst:",
                          f"{i2}    if x.__class__ is Encoded:",
                          f"{i2}        out += x",
                          f"{i2}    else:",
                          f"{i2}        {fn}(x, out, regions)"]
            elif elem in P.FIXED_FORMATS:
                fmt, _ = P.FIXED_FORMATS[elem]
                self.ns["struct"] = struct
                lines += [f"{i2}out += struct.pack('>%d{fmt}' % len(lst), *lst)"]
            else:
                sub = (name, elem, versions, None, None, None, None, no_flex, None)
                lines += [f"{i2}for x in lst:"] + self.write_value(sub, "x", i2 + "    ")
            return lines
        raise ValueError(f"unsupported type {kind}")

    def encode_default(self, f: Field) -> str:
        name, kind, versions, nullable, tag, tagged, default, no_flex, children = f
        if kind.startswith("[]"):
            return "None" if (default is None and _in(nullable, self.version)) else "()"
        if kind == "struct":
            return "None"
        return self.const(_zero(kind, default, _in(nullable, self.version)))

    def compile_encoder(self, fields: list[Field]) -> str:
        v = self.version
        fn = self.name("e")
        body = [f"def {fn}(m, out, regions):", "    g = m.get"]
        regular = [f for f in fields if _in(f[2], v) and not (self.flexible and _in(f[5], v))]
        tagged = sorted(
            (f for f in fields if _in(f[2], v) and self.flexible and _in(f[5], v)), key=lambda f: f[4]
        )
        i = 0
        while i < len(regular):
            run = []
            while i < len(regular) and regular[i][1] in P.FIXED_FORMATS:
                run.append(regular[i])
                i += 1
            if run:
                fmt = ">" + "".join(P.FIXED_FORMATS[f[1]][0] for f in run)
                s = self.const(struct.Struct(fmt))
                args = ", ".join(f"g({f[0]!r}, {self.encode_default(f)})" for f in run)
                body.append(f"    out += {s}.pack({args})")
            if i < len(regular) and regular[i][1] not in P.FIXED_FORMATS:
                f = regular[i]
                body += self.write_value(f, f"g({f[0]!r}, {self.encode_default(f)})", "    ")
                i += 1
        if self.flexible:
            if not tagged:
                body.append("    out.append(0)")
            else:
                body.append("    tags = []")
                for f in tagged:
                    d = self.encode_default(f)
                    body.append(f"    val = g({f[0]!r}, {d})")
                    if f[1] == "struct":
                        cond = f"val and val != {self.struct_defaults(f[8])}()"
                    elif f[1].startswith("[]"):
                        cond = "val"
                    else:
                        cond = f"val != {d}"
                    body.append(f"    if {cond}:")
                    body.append("        outer = out")
                    body.append("        out = bytearray()")
                    body += self.write_value(f, "val", "        ")
                    body.append(f"        tags.append(({f[4]}, out))")
                    body.append("        out = outer")
                body += [
                    "    P.write_uvarint(out, len(tags))",
                    "    for tag, data in tags:",
                    "        P.write_uvarint(out, tag)",
                    "        P.write_uvarint(out, len(data))",
                    "        out += data",
                ]
        self.lines.extend(body)
        return fn

    def build_decoder(self, fields: list[Field]) -> Callable:
        fn = self.compile_decoder(fields)
        return self.build()[fn]

    def build(self) -> dict[str, Any]:
        source = "\n".join(self.lines)
        exec(compile(source, f"<kafka codec v{self.version}>", "exec"), self.ns)
        return self.ns


class Encoded(bytes):
    """One struct-array element already encoded for a given message version (see module doc)."""

    __slots__ = ()


class EncodedArray:
    """A whole struct array already encoded, held as a few large chunks rather than one object per
    element: ``len()`` is the element count (what the encoder writes as the array length) and
    iteration yields :class:`Encoded` chunks of consecutive elements, which the encoder copies.
    Lets a handler answer a request of a million topics in slices without a million objects."""

    __slots__ = ("chunks", "count")

    def __init__(self) -> None:
        self.chunks: list[Encoded] = []
        self.count = 0

    def append_chunk(self, chunk: bytes | bytearray, elements: int) -> None:
        if elements:
            self.chunks.append(Encoded(chunk))
            self.count += elements

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Encoded]:
        return iter(self.chunks)


class MessageCodec:
    """Encoder and decoder of one message at one version."""

    __slots__ = ("name", "version", "flexible", "_decode", "_encode", "_fields", "_element_encoders",
                 "_element_decoders")

    def __init__(self, name: str, version: int, messages: Mapping[str, dict] | None = None,
                 native: bool = True) -> None:
        # ``messages``: another schema table of the same shape (e.g. protocol/coordinator_schema_data.py
        # for __consumer_offsets records); default: the request/response table. ``native``: use a
        # native decoder/encoder where odradek.protocol.produce_codec has one (False: the generated code
        # only, which the tests compare the native one with).
        spec = (MESSAGES if messages is None else messages)[name]
        lo, hi = spec["valid"]
        if not lo <= version <= hi:
            raise ValueError(f"{name} has no version {version}")
        self.name = name
        self.version = version
        self.flexible = _in(spec["flexible"], version)
        comp = _Compiler(version, self.flexible)
        dec = comp.compile_decoder(spec["fields"])
        enc = comp.compile_encoder(spec["fields"])
        ns = comp.build()
        self._decode: Callable = ns[dec]
        self._encode: Callable = ns[enc]
        if native and messages is None:
            self._decode = produce_codec.native_decoder(name, version) or self._decode
            self._encode = produce_codec.native_encoder(name, version, self._encode) or self._encode
        self._fields: list = spec["fields"]
        self._element_encoders: dict[tuple[str, ...], Callable[[Mapping[str, Any]], Encoded]] = {}
        self._element_decoders: dict[tuple[str, ...], Callable] = {}

    def _struct_array_fields(self, path: tuple[str, ...]) -> list:
        fields = self._fields
        for name in path:
            match = [f for f in fields if f[0] == name and f[1] == "[]struct" and _in(f[2], self.version)]
            if not match:
                raise ValueError(f"{self.name} v{self.version} has no struct array {'.'.join(path)}")
            fields = match[0][8]
        return fields

    def element_decoder(self, *path: str) -> Callable[[memoryview, int], tuple[dict, int]]:
        """A function decoding one element of the top-level struct array at ``path`` from
        ``(buf, pos)`` to ``(element, end)``; raises DecodeError only. With
        :meth:`array_header` it lets a handler walk a huge array a slice at a time."""
        found = self._element_decoders.get(path)
        if found is not None:
            return found
        comp = _Compiler(self.version, self.flexible)
        decode_fields: Callable = comp.build_decoder(self._struct_array_fields(path))
        name, version = self.name, self.version

        def decode_element(buf: memoryview, pos: int) -> tuple[dict, int]:
            try:
                return decode_fields(buf, pos)
            except DecodeError:
                raise
            except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError, MemoryError) as exc:
                raise DecodeError(f"malformed {name} v{version}: {exc}") from None

        self._element_decoders[path] = decode_element
        return decode_element

    def element_encoder(self, *path: str) -> Callable[[Mapping[str, Any]], Encoded]:
        """A function encoding one element of the struct array at ``path`` (field names from the
        message root, e.g. ("topics",)) to :class:`Encoded` bytes, which this codec's encoder copies
        verbatim when it meets them in that array."""
        found = self._element_encoders.get(path)
        if found is not None:
            return found
        fields = self._struct_array_fields(path)
        comp = _Compiler(self.version, self.flexible)
        fn_name = comp.compile_encoder(fields)
        encode_fields: Callable = comp.build()[fn_name]

        def encode_element(element: Mapping[str, Any]) -> Encoded:
            out = bytearray()
            regions: list = []
            encode_fields(element, out, regions)
            if regions:
                raise ValueError("an Encoded element cannot hold file regions")
            return Encoded(out)

        self._element_encoders[path] = encode_element
        return encode_element

    def decode(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[dict, int]:
        """Decode at ``pos``; returns (message, end position). Raises DecodeError only."""
        if not isinstance(buf, memoryview):
            buf = memoryview(buf)
        try:
            return self._decode(buf, pos)
        except DecodeError:
            raise
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError, MemoryError) as exc:
            raise DecodeError(f"malformed {self.name} v{self.version}: {exc}") from None

    def encode_into(self, message: Mapping[str, Any], out: bytearray, regions: list | None = None) -> None:
        self._encode(message, out, regions if regions is not None else [])

    def encode(self, message: Mapping[str, Any]) -> bytes:
        out = bytearray()
        regions: list = []
        self._encode(message, out, regions)
        if regions:
            raise ValueError("message holds file regions; use encode_into with a regions list")
        return bytes(out)


def read_array_header(buf: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """The element count of the array at ``pos`` (-1 for null) and where its first element starts;
    a count beyond the bytes left is a DecodeError, as in the generated readers."""
    if flexible:
        n, pos = P.read_uvarint(buf, pos)
        n -= 1
    else:
        if pos + 4 > len(buf):
            raise DecodeError("truncated array length")
        n = P.INT32.unpack_from(buf, pos)[0]
        pos += 4
    if n < -1:
        raise DecodeError("invalid array length")
    if n > 0:
        _check_count(n, buf, pos)
    return n, pos


_CODECS: dict[tuple[str, int], MessageCodec] = {}


def codec(name: str, version: int) -> MessageCodec:
    """The (cached) codec for message ``name`` (e.g. "MetadataResponse") at ``version``."""
    key = (name, version)
    found = _CODECS.get(key)
    if found is None:
        found = _CODECS[key] = MessageCodec(name, version)
    return found


def valid_versions(name: str) -> tuple[int, int]:
    return MESSAGES[name]["valid"]


def is_flexible(name: str, version: int) -> bool:
    return _in(MESSAGES[name]["flexible"], version)
