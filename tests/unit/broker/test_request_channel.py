"""The bounded request channel and per-connection backpressure, over real loopback sockets.

A small in-process Reactor: a real ``RequestChannel`` and ``SocketServer`` (with their real
``Connection`` protocols), the handler loop running in a thread of its own, and an echo processor
in place of the dispatcher (it answers each request with its correlation id, or holds it when a
test wants requests left unanswered). Clients are plain blocking/non-blocking sockets. To make the
queue fill, a test blocks the handler loop (as a busy handler would) while the network loops keep
reading; then it releases the handler and checks that reading resumes and that every request got
its response, in order, on its own connection.
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.broker.network.connection import MAX_IN_FLIGHT
from odradek.broker.network.reactor import Endpoint, SocketServer, new_event_loop
from odradek.broker.network.request_channel import RequestChannel

LOOP_KINDS = ["uvloop", "asyncio"]


def request_frame(correlation_id: int, pad: int = 0) -> bytes:
    # ApiVersions v0 header shape (key 18, version 0, correlation id) plus opaque padding: the echo
    # processor only reads the correlation id.
    return struct.pack(">ihhi", 8 + pad, 18, 0, correlation_id) + bytes(pad)


class Reactor:
    """RequestChannel + SocketServer with the handler loop on a thread the test controls."""

    def __init__(self, *, threads: int, max_queued: int, loop_kind: str, max_queued_bytes: int = -1) -> None:
        self.loop = new_event_loop(loop_kind)
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-handler-loop", daemon=True)
        self.thread.start()
        self.hold = False
        self.held: list[tuple[Any, Any, int]] = []
        self.processed = 0
        self.max_queue_seen = 0
        self.max_bytes_seen = 0
        kwargs = {"max_queued_bytes": max_queued_bytes} if max_queued_bytes > 0 else {}
        self.channel = RequestChannel(self.loop, max_queued, self._process, **kwargs)
        self.server = SocketServer(
            self.loop,
            self.channel,
            [Endpoint("PLAINTEXT", "127.0.0.1", 0)],
            num_network_threads=threads,
            max_request_size=1 << 20,
            idle_ms=600_000,
            loop_kind=loop_kind,
        )
        self.run(self.server.start())
        self.port = self.server.bound_ports["PLAINTEXT"]

    def _process(self, conn: Any, slot: Any, frame: bytes) -> None:
        # Runs on the handler loop; the queue still holds what was submitted behind this request.
        self.max_queue_seen = max(self.max_queue_seen, len(self.channel.queue) + 1)
        # Counted from the queue itself (this frame plus those behind it), not from the channel's own
        # accounting, so that the test means the same thing with and without a byte bound.
        self.max_bytes_seen = max(self.max_bytes_seen, len(frame) + sum(len(f) for _, _, f in list(self.channel.queue)))
        self.processed += 1
        corr = struct.unpack_from(">i", frame, 4)[0]
        if self.hold:
            self.held.append((conn, slot, corr))
        else:
            self.channel.send(conn, slot, [struct.pack(">ii", 4, corr)])

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], Any]) -> Any:
        async def wrapper() -> Any:
            return fn()

        return self.run(wrapper())

    def stall(self) -> threading.Event:
        """Block the handler loop (a busy handler) until the returned event is set."""
        gate, entered = threading.Event(), threading.Event()

        def block() -> None:
            entered.set()
            gate.wait(30)

        self.loop.call_soon_threadsafe(block)
        assert entered.wait(5)
        return gate

    def answer_held(self, reverse: bool = False) -> None:
        def answer() -> None:
            held, self.held = self.held, []
            for conn, slot, corr in reversed(held) if reverse else held:
                self.channel.send(conn, slot, [struct.pack(">ii", 4, corr)])

        self.call(answer)

    def close(self) -> None:
        self.call(self.server.stop_accepting)
        self.run(self.server.close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def make_reactor() -> Iterator[Callable[..., Reactor]]:
    made: list[Reactor] = []

    def make(**kwargs: Any) -> Reactor:
        r = Reactor(**kwargs)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def connect(reactor: Reactor, n: int) -> list[socket.socket]:
    socks = [socket.create_connection(("127.0.0.1", reactor.port), timeout=5) for _ in range(n)]
    wait_until(lambda: len(reactor.server.connections()) == n, what="connections set up")
    return socks


def send_until_blocked(sock: socket.socket, data: bytes, settle: float = 0.3) -> int:
    """Send without blocking until the kernel refuses more for ``settle`` seconds; returns bytes sent."""
    sock.setblocking(False)
    sent = 0
    refused_since: float | None = None
    while sent < len(data):
        try:
            sent += sock.send(data[sent : sent + 65536])
            refused_since = None
        except BlockingIOError:
            now = time.monotonic()
            refused_since = refused_since or now
            if now - refused_since > settle:
                break
            time.sleep(0.01)
    return sent


def exchange(pending: dict[socket.socket, tuple[bytes, int]], expected: dict[socket.socket, list[int]],
             timeout: float = 30.0) -> dict[socket.socket, list[int]]:
    """Send each socket's remaining bytes and read responses until every expected one arrived.

    ``pending`` maps a socket to (all its request bytes, bytes already sent). Returns the
    correlation ids received per socket, in arrival order.
    """
    sel = selectors.DefaultSelector()
    state = {}
    for s, (data, sent) in pending.items():
        s.setblocking(False)
        state[s] = {"data": data, "sent": sent, "buf": bytearray(), "got": []}
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    deadline = time.monotonic() + timeout
    while any(len(st["got"]) < len(expected[s]) for s, st in state.items()):
        assert time.monotonic() < deadline, {len(st["got"]) for st in state.values()}
        for key, events in sel.select(0.1):
            s, st = key.fileobj, state[key.fileobj]
            if events & selectors.EVENT_WRITE:
                if st["sent"] < len(st["data"]):
                    try:
                        st["sent"] += s.send(st["data"][st["sent"] : st["sent"] + 262144])
                    except BlockingIOError:
                        pass
                else:
                    sel.modify(s, selectors.EVENT_READ)
            if events & selectors.EVENT_READ:
                chunk = s.recv(262144)
                assert chunk, "connection closed by the server"
                buf = st["buf"]
                buf += chunk
                pos = 0
                while len(buf) - pos >= 8:
                    st["got"].append(struct.unpack_from(">i", buf, pos + 4)[0])
                    pos += 8
                del buf[:pos]
    sel.close()
    return {s: st["got"] for s, st in state.items()}





@pytest.mark.parametrize("loop_kind", LOOP_KINDS)
def test_full_queue_stops_reading_and_resumes_when_space_frees(make_reactor, loop_kind) -> None:
    reactor = make_reactor(threads=2, max_queued=8, loop_kind=loop_kind)
    clients = connect(reactor, 3)
    per_client = 2500
    payloads = {s: b"".join(request_frame(i, pad=4088) for i in range(per_client)) for s in clients}  # 10 MB each
    gate = reactor.stall()
    try:
        sent = {s: send_until_blocked(s, payloads[s]) for s in clients}
        # The server stopped reading: the kernel refused the rest of every client's bytes...
        assert all(sent[s] < len(payloads[s]) for s in clients), sent
        conns = reactor.server.connections()
        # ...because every connection paused reading once the shared queue filled up...
        wait_until(lambda: all(c.read_paused for c in conns), what="all connections paused")
        queued = len(reactor.channel.queue)
        assert queued >= reactor.channel.max_queued
        # ...and, paused, nothing more is read: the queue does not grow.
        time.sleep(0.3)
        assert len(reactor.channel.queue) == queued
        assert reactor.processed == 0
    finally:
        gate.set()
    # Space frees: reading resumes, and every request gets its response, in order, per connection.
    # 30 MB through the stdlib asyncio loop takes ~8 s on an idle 2-core machine (uvloop: ~2 s), so
    # the bound only has to catch a lost wake-up, which stalls forever.
    got = exchange({s: (payloads[s], sent[s]) for s in clients}, {s: list(range(per_client)) for s in clients},
                   timeout=60)
    for s in clients:
        assert got[s] == list(range(per_client))
    assert reactor.processed == 3 * per_client
    wait_until(lambda: not any(c.read_paused for c in reactor.server.connections()), what="reading resumed")
    for s in clients:
        s.close()


def test_queue_never_holds_more_than_queued_max_requests(make_reactor) -> None:
    reactor = make_reactor(threads=2, max_queued=8, loop_kind="uvloop")
    clients = connect(reactor, 2)
    gate = reactor.stall()
    try:
        for s in clients:
            send_until_blocked(s, b"".join(request_frame(i, pad=56) for i in range(20000)), settle=0.2)
        wait_until(lambda: all(c.read_paused for c in reactor.server.connections()), what="paused")
        queued = len(reactor.channel.queue)
    finally:
        gate.set()
    # Each connection may be mid-frame when the bound is reached, but never a whole read ahead.
    assert queued <= reactor.channel.max_queued + len(clients), queued


@pytest.mark.parametrize("threads", [1, 2])
def test_connection_stops_reading_at_max_in_flight_and_resumes_on_responses(make_reactor, threads) -> None:
    reactor = make_reactor(threads=threads, max_queued=500, loop_kind="uvloop")
    reactor.hold = True
    (client,) = connect(reactor, 1)
    total = MAX_IN_FLIGHT + 10
    # One request at a time, each sent only once the previous one was read: each read is one frame.
    for i in range(MAX_IN_FLIGHT):
        client.sendall(request_frame(i))
        wait_until(lambda i=i: reactor.processed == i + 1, what=f"request {i} read")
    for i in range(MAX_IN_FLIGHT, total):
        client.sendall(request_frame(i))
    time.sleep(0.3)
    assert reactor.processed == MAX_IN_FLIGHT  # the rest waits in the socket, unread
    assert reactor.server.connections()[0].read_paused
    reactor.hold = False
    reactor.answer_held()
    got = exchange({client: (b"", 0)}, {client: list(range(total))})
    assert got[client] == list(range(total))
    assert reactor.processed == total
    client.close()


@pytest.mark.parametrize("threads", [1, 3])
def test_responses_completed_out_of_order_are_sent_in_request_order(make_reactor, threads) -> None:
    reactor = make_reactor(threads=threads, max_queued=500, loop_kind="uvloop")
    reactor.hold = True
    (client,) = connect(reactor, 1)
    client.sendall(b"".join(request_frame(i) for i in range(10)))
    wait_until(lambda: reactor.processed == 10, what="10 requests read")
    reactor.answer_held(reverse=True)  # the handler finishes the last request first
    got = exchange({client: (b"", 0)}, {client: list(range(10))})
    assert got[client] == list(range(10))
    client.close()


def test_client_vanishing_while_waiting_for_space_leaves_others_served(make_reactor) -> None:
    reactor = make_reactor(threads=2, max_queued=4, loop_kind="uvloop")
    leaver, stayer = connect(reactor, 2)
    per_client = 800
    stay_bytes = b"".join(request_frame(i, pad=4088) for i in range(per_client))
    gate = reactor.stall()
    try:
        send_until_blocked(leaver, b"".join(request_frame(i, pad=4088) for i in range(per_client)))
        sent = send_until_blocked(stayer, stay_bytes)
        wait_until(lambda: all(c.read_paused for c in reactor.server.connections()), what="paused")
        # The leaver resets its connection while it waits for queue space with requests queued.
        leaver.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        leaver.close()
        time.sleep(0.1)
    finally:
        gate.set()
    got = exchange({stayer: (stay_bytes, sent)}, {stayer: list(range(per_client))})
    assert got[stayer] == list(range(per_client))
    wait_until(lambda: len(reactor.server.connections()) == 1, what="the reset connection dropped")
    # The channel still works for newcomers.
    (fresh,) = [socket.create_connection(("127.0.0.1", reactor.port), timeout=5)]
    fresh.sendall(request_frame(77))
    assert fresh.recv(8, socket.MSG_WAITALL) == struct.pack(">ii", 4, 77)
    fresh.close()
    stayer.close()


def test_connection_paused_at_max_in_flight_resumes_after_queue_was_full(make_reactor) -> None:
    reactor = make_reactor(threads=2, max_queued=4, loop_kind="uvloop")
    reactor.hold = True
    waiting, filler = connect(reactor, 2)
    for i in range(MAX_IN_FLIGHT):
        waiting.sendall(request_frame(i))
        wait_until(lambda i=i: reactor.processed == i + 1, what=f"request {i} read")
    conn_w = next(c for c in reactor.server.connections() if c.slots)
    wait_until(lambda: conn_w.read_paused, what="paused at MAX_IN_FLIGHT")
    extra = 5
    waiting.sendall(b"".join(request_frame(i) for i in range(MAX_IN_FLIGHT, MAX_IN_FLIGHT + extra)))
    reactor.hold = False
    gate = reactor.stall()
    try:
        fill_bytes = b"".join(request_frame(i, pad=4088) for i in range(600))
        sent = send_until_blocked(filler, fill_bytes)
        # The kernel may take all the bytes before the network loop has read them: wait for it.
        wait_until(reactor.channel.is_full, what="request queue full")
        # The handler answers the held requests (as a handler task finishing would) while the
        # shared queue is still full: the waiting connection's MAX_IN_FLIGHT pause clears, but it
        # must stay paused for the full queue, and be woken when the queue drains.
        held, reactor.held = reactor.held, []
        for conn, slot, corr in held:
            reactor.channel.send(conn, slot, [struct.pack(">ii", 4, corr)])
        time.sleep(0.2)
    finally:
        gate.set()
    got = exchange({filler: (fill_bytes, sent), waiting: (b"", 0)},
                   {filler: list(range(600)), waiting: list(range(MAX_IN_FLIGHT + extra))}, timeout=5)
    assert got[waiting] == list(range(MAX_IN_FLIGHT + extra))
    assert got[filler] == list(range(600))


class _ScriptedPool:
    """A memory pool whose answers a test scripts; once they run out: memory for everyone."""

    def __init__(self, reserve_answers: list[bool] | None = None, spent_answers: list[bool] | None = None) -> None:
        self.size = 1
        self.reserve_answers = reserve_answers or []
        self.spent_answers = spent_answers or []

    def try_reserve(self, size: int) -> bool:
        return self.reserve_answers.pop(0) if self.reserve_answers else True

    def spent(self) -> bool:
        return self.spent_answers.pop(0) if self.spent_answers else False


class _DrainedBetweenChecks:
    """A channel whose queue is full when the connection frames and drained by the time it decides
    whether to pause: the interleaving the handler loop's thread can produce (and did, in
    test_full_queue_stops_reading_and_resumes_when_space_frees, once every few suite runs)."""

    def __init__(self) -> None:
        self.full_answers = [True]  # first look: full; every later look: drained
        self.pool = _ScriptedPool()
        self.submitted: list[bytes] = []
        self.waiters: list[Any] = []

    def is_full(self) -> bool:
        return self.full_answers.pop(0) if self.full_answers else False

    def submit(self, conn: Any, slot: Any, frame: bytes) -> bool:
        self.submitted.append(frame)
        return True

    def wait_for_space(self, conn: Any) -> None:
        self.waiters.append(conn)


def frame_three_requests_in_one_read(channel: _DrainedBetweenChecks) -> list[int]:
    """Three whole requests arrive in one read and the client sends nothing more: the correlation
    ids of the frames the connection submitted to ``channel``."""
    from odradek.broker.network.connection import Connection

    async def scenario() -> list[bytes]:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        conn = Connection(channel, 1 << 20)  # type: ignore[arg-type]
        transport, _ = await loop.connect_accepted_socket(lambda: conn, a)
        try:
            conn.data_received(b"".join(request_frame(i) for i in range(3)))
            return channel.submitted
        finally:
            transport.close()
            b.close()

    return [struct.unpack_from(">i", f, 4)[0] for f in asyncio.run(scenario())]


def test_requests_buffered_when_the_queue_drains_mid_check_are_still_framed() -> None:
    assert frame_three_requests_in_one_read(_DrainedBetweenChecks()) == [0, 1, 2]


class _NeverFull(_DrainedBetweenChecks):
    def __init__(self) -> None:
        super().__init__()
        self.full_answers = []


@pytest.mark.parametrize("chunking", ["whole", "one byte", "mid header", "mixed"])
def test_frames_split_any_way_across_reads_arrive_intact(chunking: str) -> None:
    """Frames are taken as views of the received bytes when nothing is buffered, and copied out of
    the buffer when they straddle reads: either way each submitted frame is exactly what the client
    sent, and stays so after later reads (the views share no mutable buffer)."""
    from odradek.broker.network.connection import Connection

    frames = [request_frame(i, pad) for i, pad in enumerate([0, 70_000, 3, 200_000, 0, 65_531, 1])]
    stream = b"".join(frames)
    if chunking == "whole":
        cuts = [len(stream)]
    elif chunking == "one byte":
        cuts = list(range(1, 40)) + [len(stream)]
    elif chunking == "mid header":
        cuts = [2, len(frames[0]) + 3, len(frames[0]) + 9, len(stream) - 5, len(stream)]
    else:
        cuts = [len(frames[0]) + len(frames[1]), len(stream) // 2, len(stream) // 2 + 1, len(stream) - 1, len(stream)]
    channel = _NeverFull()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        conn = Connection(channel, 1 << 20)  # type: ignore[arg-type]
        transport, _ = await loop.connect_accepted_socket(lambda: conn, a)
        try:
            start = 0
            for cut in cuts:
                conn.data_received(stream[start:cut])
                start = cut
            assert conn.pos == 0 and not conn.buf  # everything framed, nothing left over
        finally:
            transport.close()
            b.close()

    asyncio.run(scenario())
    assert [bytes(f) for f in channel.submitted] == [f[4:] for f in frames]
    # A frame kept as a view pins the whole read it came from: only large shares of a read are
    # viewed, so queued frames never pin more than 8x their own bytes.
    for f in channel.submitted:
        if isinstance(f, memoryview):
            assert len(f.obj) <= 8 * len(f)  # type: ignore[arg-type]
    if chunking == "whole":
        assert any(isinstance(f, memoryview) for f in channel.submitted)  # the large ones were not copied


# -- queued.max.request.bytes --------------------------------------------------------------------------


def queued_bytes(reactor: Reactor) -> int:
    """The bytes of the requests in the queue, counted from the queue itself."""
    return sum(len(f) for _, _, f in list(reactor.channel.queue))


# Network threads of their own: the test stalls the handler loop while they keep reading.
@pytest.mark.parametrize("threads", [2, 3])
def test_queued_request_bytes_are_bounded_and_every_request_is_answered(make_reactor, threads) -> None:
    bound, pad, per_client = 256 * 1024, 32 * 1024, 60
    reactor = make_reactor(threads=threads, max_queued=500, loop_kind="uvloop", max_queued_bytes=bound)
    clients = connect(reactor, 8)
    payloads = {s: b"".join(request_frame(i, pad=pad) for i in range(per_client)) for s in clients}  # ~2 MB each
    gate = reactor.stall()
    try:
        sent = {s: send_until_blocked(s, payloads[s]) for s in clients}
        # (The kernel's loopback buffers may take all of a client's bytes; the broker reads them
        # only up to the bound.)
        wait_until(lambda: all(c.read_paused for c in reactor.server.connections()), what="all paused")
        # Kafka's non-strict pool: a frame is taken while any space is left, so at most one frame over.
        held = queued_bytes(reactor)
        assert held <= bound - 1 + pad + 8, held
        assert len(reactor.channel.queue) < reactor.channel.max_queued  # the byte bound stopped reading
        time.sleep(0.2)
        assert queued_bytes(reactor) == held  # paused: nothing more is read
    finally:
        gate.set()
    got = exchange({s: (payloads[s], sent[s]) for s in clients}, {s: list(range(per_client)) for s in clients},
                   timeout=20)
    for s in clients:
        assert got[s] == list(range(per_client))  # nothing lost, in order
    assert reactor.max_bytes_seen <= bound - 1 + pad + 8, reactor.max_bytes_seen
    wait_until(lambda: reactor.channel.pool.used == 0, what="every reserved byte released")
    for s in clients:
        s.close()


class _ReserveRefusedThenDrained(_DrainedBetweenChecks):
    """The pool is spent when the connection asks for the first frame's memory (on the read and
    again on the buffered bytes), still spent at the first look before pausing, and released by
    the handler by the look after registering for the wake-up: nothing will wake the connection,
    so it must frame again by itself."""

    def __init__(self) -> None:
        super().__init__()
        self.full_answers = []
        self.pool = _ScriptedPool(reserve_answers=[False, False], spent_answers=[True])


def test_requests_refused_a_reservation_when_the_queue_drains_mid_check_are_still_framed() -> None:
    assert frame_three_requests_in_one_read(_ReserveRefusedThenDrained()) == [0, 1, 2]


def test_bytes_released_by_a_closed_connection_wake_a_connection_paused_on_the_byte_bound() -> None:
    """A frame reserved by a connection that closes before submitting releases its bytes without a
    request to drain: the channel must still wake the connections paused on those bytes."""
    from odradek.broker.network.connection import Connection

    async def scenario() -> tuple[bool, list[int]]:
        loop = asyncio.get_running_loop()
        processed: list[int] = []

        def process(conn: Any, slot: Any, frame: bytes) -> None:
            processed.append(struct.unpack_from(">i", frame, 4)[0])
            channel.send(conn, slot, None)

        channel = RequestChannel(loop, 500, process, max_queued_bytes=100)
        a, a_peer = socket.socketpair()
        b, b_peer = socket.socketpair()
        leaver, waiter = Connection(channel, 1 << 20), Connection(channel, 1 << 20)
        ta, _ = await loop.connect_accepted_socket(lambda: leaver, a)
        tb, _ = await loop.connect_accepted_socket(lambda: waiter, b)
        try:
            big = request_frame(1, pad=92)[4:]  # 100 bytes: reaches the bound
            assert channel.pool.try_reserve(len(big))  # the leaver framed it...
            waiter.data_received(request_frame(2))
            paused = waiter.read_paused and processed == []  # ...so the waiter pauses on the byte bound
            leaver.close()  # ...and the leaver closes before submitting it
            assert not channel.submit(leaver, None, big)  # type: ignore[arg-type]
            for _ in range(10):
                await asyncio.sleep(0)
            return paused and not waiter.read_paused, processed
        finally:
            ta.close()
            tb.close()
            a_peer.close()
            b_peer.close()

    woken, processed = asyncio.run(scenario())
    assert woken
    assert processed == [2]


# -- queued.max.request.bytes: requests still arriving (Kafka's NetworkReceive + SimpleMemoryPool) ----


def awaiting_memory(reactor: Reactor) -> list[Any]:
    return [c for c in reactor.server.connections() if c._awaiting_memory and c.read_paused]


def start_big_request(reactor: Reactor, big_sock: socket.socket, big: bytes) -> None:
    """Send the size and a part of ``big``: its whole announced size is reserved at once."""
    big_sock.sendall(big[:100_000])
    wait_until(lambda: reactor.channel.pool.used == len(big) - 4, what="the whole announced size reserved")


@pytest.mark.parametrize("threads", [1, 3])
def test_a_request_still_arriving_holds_its_whole_size_and_mutes_the_others(make_reactor, threads) -> None:
    """The pool is spent by a request of which only a part arrived: a connection that needs memory
    is muted (its request not taken), the request holding memory is still read to its end, and
    once processed its memory wakes the muted connection."""
    reactor = make_reactor(threads=threads, max_queued=500, loop_kind="uvloop", max_queued_bytes=64 * 1024)
    big_sock, small_sock = connect(reactor, 2)
    big, small = request_frame(1, pad=512 * 1024), request_frame(2)
    start_big_request(reactor, big_sock, big)
    small_sock.sendall(small)
    wait_until(lambda: len(awaiting_memory(reactor)) == 1, what="the small request's connection muted")
    time.sleep(0.2)
    assert reactor.processed == 0 and reactor.channel.pool.used == len(big) - 4
    got = exchange({big_sock: (big, 100_000), small_sock: (small, len(small))}, {big_sock: [1], small_sock: [2]})
    assert got == {big_sock: [1], small_sock: [2]}
    wait_until(lambda: reactor.channel.pool.used == 0, what="every reserved byte released")


@pytest.mark.parametrize("threads", [1, 3])
def test_a_client_gone_mid_request_gives_its_reservation_back(make_reactor, threads) -> None:
    reactor = make_reactor(threads=threads, max_queued=500, loop_kind="uvloop", max_queued_bytes=64 * 1024)
    big_sock, small_sock = connect(reactor, 2)
    big, small = request_frame(1, pad=512 * 1024), request_frame(2)
    start_big_request(reactor, big_sock, big)
    small_sock.sendall(small)
    wait_until(lambda: len(awaiting_memory(reactor)) == 1, what="the small request's connection muted")
    big_sock.close()
    got = exchange({small_sock: (small, len(small))}, {small_sock: [2]})
    assert got == {small_sock: [2]}  # woken by the release, not by a request of its own
    wait_until(lambda: reactor.channel.pool.used == 0, what="the reservation given back")
    assert reactor.processed == 1


@pytest.mark.parametrize("threads", [1, 3])
def test_requests_larger_than_the_pool_pipelined_on_one_connection_are_all_answered(make_reactor, threads) -> None:
    """Each request alone spends the pool: the connection waits for memory its own request holds,
    which the handler releases, so every request is answered, in order, one reservation at a time."""
    pad = 64 * 1024
    reactor = make_reactor(threads=threads, max_queued=500, loop_kind="uvloop", max_queued_bytes=16 * 1024)
    (sock,) = connect(reactor, 1)
    data = b"".join(request_frame(i, pad=pad) for i in range(20))
    got = exchange({sock: (data, 0)}, {sock: list(range(20))})
    assert got[sock] == list(range(20))
    assert reactor.max_bytes_seen <= pad + 8  # one request at a time: the pool's one over the bound
    wait_until(lambda: reactor.channel.pool.used == 0, what="every reserved byte released")
