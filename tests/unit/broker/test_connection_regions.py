"""File regions (a Fetch response's record bytes) sent to clients that read slower than the broker
writes, over real loopback sockets and a real segment-like file (broker/network/connection.py,
point 4 of its docstring).

A small in-process server: a real ``RequestChannel`` and ``SocketServer`` with their real
``Connection`` protocols, and a processor in place of the dispatcher that answers each request with
a frame whose body is a correlation id and a ``FetchSlice`` of a file (the shape of a Fetch
response: header bytes, then a region). The connection's transport is wrapped in a counter of the
bytes written through it: the region's bytes must all go by sendfile, never through Python, however
often the client's socket fills (issue 31: each full socket used to cost a 64 KiB pread copied
through the transport, a fifth of a fast consumer's bytes).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.network.reactor import Endpoint, SocketServer, new_event_loop
from odradek.broker.network.request_channel import RequestChannel
from odradek.storage.file_handle import FileHandle
from odradek.storage.results import FetchSlice

LOOP_KINDS = ["uvloop", "asyncio"]
REGION = 16 << 20  # far more than a loopback socket's buffers hold


class CountingTransport:
    """The connection's real transport, with the bytes handed to ``write`` counted."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self.inner = inner
        self.written = 0

    def write(self, data: Any) -> None:
        self.written += len(data)
        self.inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RegionServer:
    """Answers request ``corr`` with ``[size, corr]`` + the file region (the whole file)."""

    def __init__(self, path: Path, loop_kind: str) -> None:
        self.file = FileHandle(os.open(path, os.O_RDONLY))
        self.size = path.stat().st_size
        self.transports: list[CountingTransport] = []
        self.loop = new_event_loop(loop_kind)
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-handler-loop", daemon=True)
        self.thread.start()
        self.channel = RequestChannel(self.loop, 16, self._process)
        self.server = SocketServer(self.loop, self.channel, [Endpoint("PLAINTEXT", "127.0.0.1", 0)],
                                   num_network_threads=1, max_request_size=1 << 20, idle_ms=600_000,
                                   loop_kind=loop_kind)
        self._run(self.server.start())
        self.port = self.server.bound_ports["PLAINTEXT"]

    def _process(self, conn: Any, slot: Any, frame: bytes) -> None:
        if not isinstance(conn.transport, CountingTransport):
            conn.transport = CountingTransport(conn.transport)
            self.transports.append(conn.transport)
        corr = struct.unpack_from(">i", frame, 4)[0]
        head = struct.pack(">ii", 4 + self.size, corr)
        self.channel.send(conn, slot, [head, FetchSlice(self.file, 0, self.size)])

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def close(self) -> None:
        async def stop() -> None:
            self.server.stop_accepting()

        self._run(stop())
        self._run(self.server.close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def region_file(tmp_path: Path) -> Path:
    # Recognisable bytes: each 4-byte word is its own index, so a byte out of place shows.
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(struct.pack(">I", i) for i in range(REGION // 4)))
    return path


@pytest.fixture
def make_server(region_file: Path) -> Iterator[Callable[[str], RegionServer]]:
    made: list[RegionServer] = []

    def make(loop_kind: str) -> RegionServer:
        s = RegionServer(region_file, loop_kind)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def request(corr: int) -> bytes:
    return struct.pack(">ihhi", 8, 1, 12, corr)  # Fetch v12's header shape; the processor reads the id only


def read_exactly(s: socket.socket, n: int, pause_every: int = 0) -> bytes:
    """``n`` bytes; with ``pause_every``, a short sleep after each that many bytes (a slow reader,
    whose socket the broker keeps filling)."""
    buf = bytearray()
    next_pause = pause_every
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 256 << 10))
        assert chunk, f"closed after {len(buf)} of {n} bytes"
        buf += chunk
        if pause_every and len(buf) >= next_pause:
            time.sleep(0.002)
            next_pause += pause_every
    return bytes(buf)


def slow_client(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)  # before connect: the window stays small
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    return s


@pytest.mark.parametrize("loop_kind", LOOP_KINDS)
def test_a_slow_readers_region_goes_by_sendfile_only(make_server, region_file: Path, loop_kind: str) -> None:
    server = make_server(loop_kind)
    expected = region_file.read_bytes()
    with slow_client(server.port) as s:
        # Two pipelined requests: the second's answer waits behind the first's region and must
        # follow it whole, in order.
        s.sendall(request(1) + request(2))
        for corr in (1, 2):
            size, got_corr = struct.unpack(">ii", read_exactly(s, 8))
            assert (size, got_corr) == (4 + REGION, corr)
            assert read_exactly(s, REGION, pause_every=1 << 20) == expected
    (transport,) = server.transports
    # Only the two 8-byte heads went through the transport; the old code copied a 64 KiB chunk of
    # the region through it each time the socket filled (hundreds of times here).
    assert transport.written == 16


@pytest.mark.parametrize("loop_kind", LOOP_KINDS)
def test_a_client_gone_while_its_region_waits_leaves_no_descriptor(make_server, loop_kind: str) -> None:
    server = make_server(loop_kind)
    with slow_client(server.port) as s:  # a first exchange, so the loops' own descriptors exist
        s.sendall(request(0))
        read_exactly(s, 8 + REGION)
    time.sleep(0.2)
    fds_before = len(os.listdir("/proc/self/fd"))
    for corr in range(5):
        s = slow_client(server.port)
        s.sendall(request(corr))
        read_exactly(s, 1 << 20)  # the response is under way and the socket full again
        time.sleep(0.1)
        s.close()
    deadline = time.monotonic() + 5
    while server.server.connections() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not server.server.connections()
    # Each waiting connection watched a duplicate of its socket's fd: it is closed with it.
    assert len(os.listdir("/proc/self/fd")) <= fds_before
    # The server still answers.
    with slow_client(server.port) as s:
        s.sendall(request(9))
        assert struct.unpack(">ii", read_exactly(s, 8)) == (4 + REGION, 9)
        assert len(read_exactly(s, REGION)) == REGION


@pytest.mark.parametrize("loop_kind", LOOP_KINDS)
def test_a_full_socket_is_waited_on_not_asked_again(make_server, region_file: Path, loop_kind: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # sendfile returns what fitted; the connection waits for the socket to drain instead of calling
    # it again straight away to be told EAGAIN (the old loop did, once per full socket).
    calls: list[int] = []
    refused: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        calls.append(count)
        try:
            return real_sendfile(out_fd, in_fd, offset, count)
        except BlockingIOError:
            refused.append(count)
            raise

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    server = make_server(loop_kind)
    with slow_client(server.port) as s:
        s.sendall(request(1))
        assert struct.unpack(">ii", read_exactly(s, 8)) == (4 + REGION, 1)
        assert read_exactly(s, REGION, pause_every=1 << 20) == region_file.read_bytes()
    assert len(calls) >= 5  # the socket filled again and again
    assert len(refused) <= 1, f"{len(refused)} of {len(calls)} sendfile calls met a full socket"
