"""odradek.protocol.checksum: the CRC-32C every batch check uses, and its agreement with the portable library."""

from __future__ import annotations

import crc32c as icrar
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import checksum
from odradek.protocol.checksum import crc32c

# RFC 3720 appendix B.4 test vectors, and the classic check value of "123456789".
VECTORS = [
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"123456789", 0xE3069283),
    (b"", 0),
]


@pytest.mark.parametrize(("data", "expected"), VECTORS)
def test_known_vectors(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected


def test_the_fast_library_is_the_one_in_use() -> None:
    # crc32c-rs is a declared dependency; falling back silently would cost the append path 3x.
    assert checksum.IMPLEMENTATION == "crc32c_rs"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=70_000), st.integers(min_value=0, max_value=2**32 - 1), st.data())
def test_agrees_with_the_portable_library_whole_and_in_pieces(data: bytes, seed: int, draw: st.DataObject) -> None:
    assert crc32c(data) == icrar.crc32c(data)
    assert crc32c(data, seed) == icrar.crc32c(data, seed)
    cut = draw.draw(st.integers(min_value=0, max_value=len(data)))
    assert crc32c(data[cut:], crc32c(data[:cut])) == crc32c(data)


def test_accepts_every_buffer_the_broker_passes() -> None:
    payload = bytes(range(256)) * 300
    expected = icrar.crc32c(payload[21:])
    assert crc32c(memoryview(payload)[21:]) == expected
    assert crc32c(bytearray(payload)[21:]) == expected
    assert crc32c(memoryview(bytearray(payload))[21:]) == expected


def test_rejects_what_is_not_bytes() -> None:
    with pytest.raises(TypeError):
        crc32c("not bytes")  # type: ignore[arg-type]
