"""Request headers (protocol/headers.py): every version's fields, and DecodeError for each way a
header can be malformed, before any handler sees the request."""

from __future__ import annotations

import pytest

from odradek.protocol.headers import RequestHeader, decode_request_header, encode_request_header, peek_api
from odradek.protocol.primitives import DecodeError


def _header(client_id: str | None, flexible: bool, tail: bytes = b"") -> memoryview:
    out = bytearray()
    encode_request_header(out, 0, 9, 1234, client_id, flexible)
    return memoryview(bytes(out) + tail)


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", ["producer-1", "", None, "ünïcode", "x" * 300])
def test_fields_and_body_offset(client_id: str | None, flexible: bool) -> None:
    frame = _header(client_id, flexible, b"BODY")
    header = decode_request_header(frame, flexible)
    assert header == RequestHeader(0, 9, 1234, client_id, len(frame) - 4)
    assert bytes(frame[header.body_offset:]) == b"BODY"
    assert peek_api(frame) == (0, 9, 1234)


def test_header_v0_has_no_client_id() -> None:
    frame = _header("ignored", False)
    assert decode_request_header(frame, False, header_v0=True) == RequestHeader(0, 9, 1234, None, 8)


def test_tagged_fields_are_skipped() -> None:
    frame = memoryview(bytes(_header("c", False)) + b"\x02\x00\x01X\x05\x00BODY")  # two tags, sizes 1 and 0
    assert decode_request_header(frame, True).body_offset == len(frame) - 4


@pytest.mark.parametrize("frame, flexible", [
    (b"", False),
    (b"\x00\x00\x00\x09\x00\x00", False),  # shorter than api key, version, correlation id
    (b"\x00\x00\x00\x09\x00\x00\x04\xd2\x00", False),  # half a client id length
    (b"\x00\x00\x00\x09\x00\x00\x04\xd2\x00\x05ab", False),  # a client id longer than the frame
    (b"\x00\x00\x00\x09\x00\x00\x04\xd2\xff\xfe", False),  # length -2
    (b"\x00\x00\x00\x09\x00\x00\x04\xd2\x00\x02\xc3\x28", False),  # not UTF-8
    (b"\x00\x00\x00\x09\x00\x00\x04\xd2\x00\x01c", True),  # no tagged-field section
    (b"\x00\x00\x00\x09\x00\x00\x04\xd2\x00\x01c\x01\x00\x05ab", True),  # a tag longer than the frame
    (b"\x00\x00\x00\x09\x00\x00\x04\xd2\x00\x01c\x80\x80\x80\x80\x80\x01", True),  # a 6-byte varint
])
def test_malformed_headers_are_decode_errors(frame: bytes, flexible: bool) -> None:
    with pytest.raises(DecodeError):
        decode_request_header(memoryview(frame), flexible)
