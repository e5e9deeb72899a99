"""Type stub of the optional native extension built from protocol/_produce_codec.c (setup.py).

See :mod:`odradek.protocol.produce_codec`, which wires it into odradek.protocol.codec.
"""

import uuid
from collections.abc import Callable
from typing import Any

def init(error_class: type[Exception], uuid_from_bytes: Callable[[bytes], uuid.UUID], /) -> None: ...
def decode_request(view: memoryview, pos: int, flexible: bool, by_id: bool, /) -> tuple[dict[str, Any], int]: ...
def encode_response(message: dict[str, Any], out: bytearray, version: int, /) -> bool: ...
