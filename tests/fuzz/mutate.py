"""Mutations of valid requests, and the deterministic case builder: (seed, index) → one frame.

A case starts as a valid request from tests/fuzz/generate.py (header + body, with the span map of
its length, count, tag and integer fields) and gets at most one mutation:

    valid        sent as generated (unknown tagged fields sprinkled into flexible versions)
    truncate     the frame ends after byte k (the frame size says so: a well-framed short request)
    length       a string/bytes length or array count set to -1, 0, 2^15-1, 2^31-1, ... ; compact
                 (varint) lengths to 2^31, 2^32, 2^63, ...
    overlong     a varint re-encoded with needless continuation bytes (up to 12 bytes)
    tags         a tagged-field count or size set huge
    integer      a fixed-width integer (header api key/version included) at its type's extremes
    bitflip      1-4 random bits flipped anywhere after the frame size
    records      Produce only: the record batch itself broken — a header field at extremes, a
                 record's varint (length, key/value length, header count) huge or negative, the
                 batch cut short, bits flipped — with the CRC recomputed most of the time so the
                 damage gets past the checksum
    trailing     junk bytes after a valid body
    framing      the frame size off by -8..8 from the bytes that follow (the request then eats into,
                 or leaves bytes before, the next request on the connection)

Every random choice comes from ``random.Random(f"{seed}:{index}")``, so a case is rebuilt exactly
from its (seed, index), whatever ran before it.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from typing import Any

from odradek.protocol import primitives as P
from odradek.protocol.batch_header import CRC_AT, HEADER_SIZE, InvalidBatchError, compute_crc
from odradek.protocol.codec import codec, is_flexible
from odradek.protocol.headers import decode_request_header, peek_api
from odradek.protocol.records import read_varint, read_varlong
from tests.fuzz.generate import Encoded, Span, encode_header, generate, request_name

MUTATIONS = ("valid", "truncate", "length", "overlong", "tags", "integer", "bitflip", "records", "trailing", "framing")
WEIGHTS = (12, 14, 24, 6, 6, 10, 12, 0, 4, 3)
RECORDS_WEIGHT = 30  # for requests that carry record batches (Produce)

LEN16 = (-1, 0, 2**15 - 1, -2, -(2**15), 1)
LEN32 = (-1, 0, 2**31 - 1, 2**15 - 1, -2, -(2**31), 1, 2**20)
UVAR = (0, 1, 2, 2**31, 2**31 - 1, 2**32, 2**32 + 1, 2**35, 2**63, 2**64 - 1, 2**31 + 2)
HUGE_TAGS = (2**31 - 1, 2**32 - 1, 2**63, 1_000_000, 255)
CLIENT_IDS = ("fuzz", None, "", "c" * 200)
# The harness sends this ApiVersions v0 request after each case: its answer proves the case was
# processed (see tests/fuzz/harness.py).
BARRIER_CORR = -1_234_567
BARRIER = struct.pack(">ihhih", 10, 18, 0, BARRIER_CORR, -1)
# ...except after a framing case, which gets zeros: what its frame leaves over then reads as a
# zero-size frame, which the broker refuses at once by closing (a barrier would be read as a size).
FRAMING_PAD = bytes(64)


@dataclass
class Case:
    seed: int
    index: int
    api_key: int
    version: int
    mutation: str
    detail: str
    frame: bytes  # size prefix included
    value: dict[str, Any]  # the generated value (before any mutation)
    decoded: dict[str, Any] | None = None  # what the broker's codec reads from the frame; None: undecodable

    def describe(self) -> str:
        return (f"seed={self.seed} case={self.index} api={self.api_key} v{self.version} "
                f"{self.mutation}: {self.detail}")


def overlong(value: int, size: int) -> bytes:
    """``value`` as an unsigned varint padded with continuation bytes to ``size`` bytes."""
    out = bytearray(P.uvarint_bytes(value))
    if len(out) >= size:
        return bytes(out)
    out[-1] |= 0x80
    out += b"\x80" * (size - len(out) - 1) + b"\x00"
    return bytes(out)


def _int_extremes(fmt: str) -> tuple[int, ...]:
    bits = struct.calcsize(fmt) * 8
    if fmt.isupper():
        return (0, 2**bits - 1, 2**(bits - 1))
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1, -1, 0)


def _replace(buf: bytes, span: Span, data: bytes) -> bytes:
    return buf[: span.pos] + data + buf[span.pos + span.size:]


def _zigzag(value: int) -> bytes:
    out = bytearray()
    P.write_varint(out, value)
    return bytes(out)


# Batch header fields: (offset, struct letter, name).
BATCH_FIELDS = ((0, "q", "base_offset"), (8, "i", "batch_length"), (12, "i", "leader_epoch"), (16, "b", "magic"),
                (21, "h", "attributes"), (23, "i", "last_offset_delta"), (27, "q", "base_timestamp"),
                (35, "q", "max_timestamp"), (43, "q", "producer_id"), (51, "h", "producer_epoch"),
                (53, "i", "base_sequence"), (57, "i", "records_count"))


def _record_varints(batch: bytes) -> list[tuple[int, int, str]]:
    """(pos, size, name) of each varint of the first records of an uncompressed batch."""
    found = []
    pos = HEADER_SIZE
    try:
        while pos < len(batch) and len(found) < 40:
            start = pos
            length, pos = read_varint(batch, pos)
            found.append((start, pos - start, "record_length"))
            if length <= 0:
                break
            end = pos + length
            pos += 1  # attributes
            for name in ("timestamp_delta", "offset_delta", "key_length", "value_length"):
                start = pos
                n, pos = (read_varlong if name == "timestamp_delta" else read_varint)(batch, pos)
                found.append((start, pos - start, name))
                if name in ("key_length", "value_length") and n > 0:
                    pos += n
            start = pos
            _count, pos = read_varint(batch, pos)
            found.append((start, pos - start, "headers_count"))
            pos = end
    except (InvalidBatchError, IndexError):
        pass
    return found


def mutate_records(blob: bytes, rng: random.Random, notes: list[str]) -> bytes:
    """Break the first batch of ``blob`` in one place (see module doc); notes say how."""
    if len(blob) < HEADER_SIZE:
        return blob
    size = struct.unpack_from(">i", blob, 8)[0] + 12
    batch, rest = bytearray(blob[:size]), blob[size:]
    how = rng.choice(("header", "header", "varint", "varint", "cut", "flip"))
    if how == "header":
        at, fmt, name = rng.choice(BATCH_FIELDS)
        value = rng.choice(_int_extremes(fmt) + (1, 2, 3))
        struct.pack_into(">" + fmt, batch, at, value)
        notes.append(f"batch {name}={value}")
    elif how == "varint" and not struct.unpack_from(">h", batch, 21)[0] & 7 and (varints := _record_varints(bytes(batch))):
        at, width, name = rng.choice(varints)
        value = rng.choice((-2, -1, 2**31 - 1, -(2**31), 2**63 - 1, 10_000, 0))
        data = _zigzag(value) if rng.random() < 0.8 else overlong(rng.choice((1, 2**32)), 11)
        batch[at: at + width] = data
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        notes.append(f"record {name} at {at} -> {data.hex()}")
    elif how == "cut":
        k = rng.randrange(len(batch))
        batch = batch[:k]
        notes.append(f"batch cut at {k}")
    else:
        for _ in range(rng.randint(1, 3)):
            bit = rng.randrange(HEADER_SIZE * 8 - 8, len(batch) * 8) if len(batch) > HEADER_SIZE else rng.randrange(len(batch) * 8)
            batch[bit // 8] ^= 1 << (bit % 8)
        notes.append("bits flipped in batch")
    if len(batch) >= HEADER_SIZE and rng.random() < 0.8:
        struct.pack_into(">I", batch, CRC_AT, compute_crc(batch, 0, len(batch)))
        notes.append("crc fixed")
    return bytes(batch) + rest


# Case indexes from SWEEP_BASE on are the truncation sweep: index SWEEP_BASE + api_key * SWEEP_STRIDE + k
# is one request of ``api_key`` at its highest served version, cut after byte k.
SWEEP_BASE = 1_000_000_000
SWEEP_STRIDE = 100_000
SWEEP_MAX_BODY = 400


def sweep_indexes(seed: int, apis: dict[int, tuple[int, int]]) -> list[int]:
    """Every truncation point of one valid request of each served API (highest version)."""
    out = []
    for api_key in sorted(apis):
        size = len(build_case(seed, SWEEP_BASE + api_key * SWEEP_STRIDE + SWEEP_STRIDE - 1, apis).frame) - 4
        out += [SWEEP_BASE + api_key * SWEEP_STRIDE + k for k in range(size)]
    return out


def build_case(seed: int, index: int, apis: dict[int, tuple[int, int]]) -> Case:
    """The case ``index`` of run ``seed`` over ``apis`` ({api_key: (min, max)} served)."""
    if index >= SWEEP_BASE:
        return _sweep_case(seed, index, apis)
    rng = random.Random(f"{seed}:{index}")
    api_key = rng.choice(sorted(apis))
    lo, hi = apis[api_key]
    version = rng.randint(lo, hi)
    has_records = api_key == 0
    weights = list(WEIGHTS)
    if has_records:
        weights[MUTATIONS.index("records")] = RECORDS_WEIGHT
    mutation = rng.choices(MUTATIONS, weights)[0]
    notes: list[str] = []
    hook = (lambda blob, r: mutate_records(blob, r, notes)) if mutation == "records" else None
    enc: Encoded = generate(rng, api_key, version, unknown_tags=mutation == "valid", records_hook=hook)
    flexible = is_flexible(enc.name, version)
    header, hspans = encode_header(api_key, version, index & 0x7FFFFFFF, rng.choice(CLIENT_IDS), flexible)
    spans = hspans + [Span(s.pos + len(header), s.size, s.kind, s.fmt, s.path) for s in enc.spans]
    payload = header + enc.body
    detail = "; ".join(notes) or "as generated"

    def pick(kinds: tuple[str, ...]) -> Span | None:
        chosen = [s for s in spans if s.kind in kinds]
        return rng.choice(chosen) if chosen else None

    if mutation == "truncate":
        k = rng.randrange(len(payload))
        payload = payload[:k]
        detail = f"cut at {k} of {len(header) + len(enc.body)}"
    elif mutation == "length" and (s := pick(("len16", "len32", "uvar"))):
        if s.kind == "len16":
            v = rng.choice(LEN16)
            data = struct.pack(">h", v)
        elif s.kind == "len32":
            v = rng.choice(LEN32)
            data = struct.pack(">i", v)
        else:
            v = rng.choice(UVAR)
            data = P.uvarint_bytes(v)
        payload = _replace(payload, s, data)
        detail = f"{s.path} {s.kind}={v}"
    elif mutation == "overlong" and (s := pick(("uvar", "tagcount", "tagsize"))):
        value = P.read_uvarint(payload, s.pos)[0]
        data = overlong(value, rng.randint(s.size + 1, 12))
        payload = _replace(payload, s, data)
        detail = f"{s.path} {s.kind}={value} as {len(data)} bytes"
    elif mutation == "tags" and (s := pick(("tagcount", "tagsize"))):
        v = rng.choice(HUGE_TAGS)
        payload = _replace(payload, s, P.uvarint_bytes(v))
        detail = f"{s.path} {s.kind}={v}"
    elif mutation == "integer" and (s := pick(("int",))):
        v = rng.choice(_int_extremes(s.fmt))
        payload = _replace(payload, s, struct.pack(">" + s.fmt, v))
        detail = f"{s.path}={v}"
    elif mutation == "framing":
        delta = rng.choice((-8, -4, -2, -1, 1, 2, 4, 8))
        detail = f"frame size {len(payload)}{delta:+d}"
        # What the broker frames: the payload cut short, or followed by the first of the zero
        # bytes the harness sends after a framing case (FRAMING_PAD, instead of the barrier).
        framed = (payload + FRAMING_PAD)[: len(payload) + delta]
        return Case(seed, index, api_key, version, mutation, detail, struct.pack(">i", len(payload) + delta) + payload,
                    enc.value, decode_as_broker(framed, apis))
    elif mutation == "trailing":
        payload += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        detail = "junk after the body"
    elif mutation in ("bitflip", "length", "overlong", "tags", "integer"):
        # bitflip, or a mutation whose field kind this request does not have
        buf = bytearray(payload)
        bits = [rng.randrange(len(buf) * 8) for _ in range(rng.randint(1, 4))]
        for bit in bits:
            buf[bit // 8] ^= 1 << (bit % 8)
        payload = bytes(buf)
        detail = f"bits {bits} flipped" + ("" if mutation == "bitflip" else f" (no {mutation} field)")
        mutation = "bitflip"
    return Case(seed, index, api_key, version, mutation, detail, struct.pack(">i", len(payload)) + payload,
                enc.value, decode_as_broker(payload, apis))


def decode_as_broker(payload: bytes, apis: dict[int, tuple[int, int]]) -> dict[str, Any] | None:
    """The body the broker's dispatcher would decode from ``payload`` (None: it would close)."""
    view = memoryview(payload)
    try:
        api_key, version, _ = peek_api(view)
        if api_key not in apis or not apis[api_key][0] <= version <= apis[api_key][1]:
            return None
        name = request_name(api_key)
        header = decode_request_header(view, is_flexible(name, version))
        return codec(name, version).decode(view, header.body_offset)[0]
    except P.DecodeError:
        return None


def _sweep_case(seed: int, index: int, apis: dict[int, tuple[int, int]]) -> Case:
    api_key, cut = divmod(index - SWEEP_BASE, SWEEP_STRIDE)
    version = apis[api_key][1]
    rng = random.Random(f"{seed}:sweep:{api_key}")
    # A request of at most SWEEP_MAX_BODY bytes (the first the rng makes), so the sweep stays short.
    enc = generate(rng, api_key, version)
    for _ in range(20):
        if len(enc.body) <= SWEEP_MAX_BODY:
            break
        enc = generate(rng, api_key, version)
    header, _ = encode_header(api_key, version, cut, "fuzz", is_flexible(enc.name, version))
    payload = header + enc.body
    if cut < len(payload):
        payload = payload[:cut]
    detail = f"cut at {cut} of {len(header) + len(enc.body)}" if cut < len(header) + len(enc.body) else "whole"
    return Case(seed, index, api_key, version, "truncate", detail, struct.pack(">i", len(payload)) + payload,
                enc.value, decode_as_broker(payload, apis))
