"""Type stub of the optional native extension built from protocol/_record_scan.c (setup.py).

Same arguments and results as :func:`odradek.protocol.record_scan.scan_py`, its pure-Python twin.
"""

def scan(
    data: bytes | bytearray | memoryview, start: int, end: int, count: int, flags: int, /
) -> None | tuple[int, int, int, int] | list[tuple[int, int, int]]: ...
