"""One client connection: framing, request hand-off, ordered responses, backpressure, sendfile.

Theory of operation
1. Check, then parse: bytes accumulate until a whole frame (4-byte size + body) is present. The
   declared size is checked against ``socket.request.max.bytes`` (and for being negative) before
   anything is allocated for it; a bad size closes this connection only, as Kafka does.
   Once the size is known, the frame's whole size is reserved in the request memory pool
   (``queued.max.request.bytes``, broker/network/memory_pool.py) before more of it is read, as Kafka's
   NetworkReceive does; the reservation passes to the queued request, or is given back if the
   connection closes first. A connection that cannot reserve stops reading until memory frees; one
   whose frame holds its reservation keeps reading it, so no request that has memory waits for
   memory. While reading is paused, at most the bytes of one socket read (256 KiB with uvloop and
   asyncio) wait unreserved in ``buf`` per connection.
2. Each complete frame takes a *slot* in the connection's response queue, in arrival order, and
   goes to the shared request queue (broker/network/request_channel.py). Handlers may finish out of order
   (a long-poll fetch behind a quick metadata call); the queue releases responses strictly in
   request order, which Kafka guarantees to clients.
3. Backpressure: reading pauses while more than ``MAX_IN_FLIGHT`` requests of this connection
   await their responses, while the transport's write buffer is above its high-water mark
   (``pause_writing``), or while the shared request queue is full (``queued.max.requests``), or
   while the next frame waits for memory (``queued.max.request.bytes``, point 1), or while the
   connection is throttled (KIP-219: a client over its quota got its response with
   throttle_time_ms, and ``throttle`` mutes the channel that long); it resumes when all of those
   clear.
4. Zero-copy fetch: a response may contain file regions (segment bytes: the log's
   ``odradek.storage.results.FetchSlice``, sent as the log handed it out). They are written with
   ``os.sendfile`` straight from the segment file to the socket, but only once the transport's
   own buffer is empty so bytes stay in order. A region holds the segment's file handle, not a
   bare fd number (storage/file_handle.py), so however long it waits, it sends that file's bytes
   even if the segment was closed or deleted meanwhile. When the kernel buffer fills mid-region
   (EAGAIN), the connection waits for the socket to take bytes again, as Kafka's selector waits
   for OP_WRITE, and continues the region with sendfile: the loop watches a duplicate of the
   socket's fd (``add_writer``: uvloop and asyncio refuse a watch on a transport's own fd), and
   writing counts as paused meanwhile, so no more requests are read. A slow reader thus costs no
   memory for its region, and no region byte is copied through Python (issue 31: the earlier
   fallback, a 64 KiB ``pread`` written through the transport on each EAGAIN, carried a fifth of
   a fast consumer's bytes). Only where the loop cannot watch the fd is one bounded chunk
   (``REGION_CHUNK``) still read and written through the transport, whose ``resume_writing`` then
   continues the region. A file that ends before its region (cut under the
   broker) closes the connection with one error, as Kafka does; padding or another file's bytes
   would corrupt the client's stream.
5. TLS listeners (broker/security/tls_connection.py): the transport encrypts, so a region is never
   sendfile'd; it is read in ``REGION_CHUNK`` pieces and written through the TLS transport, which
   pauses the connection at ``TLS_WRITE_HIGH`` buffered bytes and resumes it once they all went out
   (the same bound for slow readers as point 4). The principal comes from the client certificate
   once the handshake is done (``connection_made`` is called only then).
6. All methods run on the connection's network loop. ``complete`` may be called from another
   thread only through ``loop.call_soon_threadsafe`` (the request channel does that).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from odradek.broker.runtime.reported_once import ReportedOnce
from odradek.broker.security.principal import ANONYMOUS, KafkaPrincipal
from odradek.broker.security.tls_connection import AUTH_FAILURES, TLS_WRITE_HIGH, PrincipalBuilder
from odradek.protocol import primitives as P
from odradek.storage.results import FetchSlice

if TYPE_CHECKING:
    from odradek.broker.network.request_channel import RequestChannel, ResponseChunk
    from odradek.broker.security.sasl.authenticator import SaslAuthenticator

log = logging.getLogger(__name__)
# (st_dev, st_ino) of segment files found cut under a fetch region: each is logged as an error once.
_REPORTED_TRUNCATIONS = ReportedOnce()

# Kafka itself mutes a channel while one request is being processed; clients pipeline up to
# max.in.flight.requests.per.connection (5 by default), so a small bound keeps them all flowing.
MAX_IN_FLIGHT = 32
# Compact the receive buffer once this much of its front has been consumed.
COMPACT_AT = 1 << 20


# Bytes of a region copied through the transport when sendfile meets a full socket and the loop
# cannot watch the socket for writability (TLS regions always go this way): enough to make the
# transport buffer (and so call pause_writing), small enough to bound a slow reader.
REGION_CHUNK = 64 * 1024

# After a last answer (a failed SASL authentication's), wait this long for the client to close
# before closing ourselves. Sending the answer and our FIN back to back lets them arrive in one
# read, and some clients (kafka-python 3's transport) then drop the answer with the connection,
# reporting "socket disconnected" instead of the authentication error.
CLOSE_LINGER_S = 1.0


class _Slot:
    __slots__ = ("chunks", "done")

    def __init__(self) -> None:
        self.chunks: list[ResponseChunk] | None = None
        self.done = False


class Connection(asyncio.Protocol):
    """asyncio protocol for one client socket (see the module docstring)."""

    def __init__(self, channel: RequestChannel, max_request_size: int, listener: str = "PLAINTEXT") -> None:
        self.channel = channel
        self.pool = channel.pool
        self.max_request_size = max_request_size
        # Bytes reserved in the pool for the frame at the head of the buffer while it arrives
        # (0: none); they pass to the request when it is submitted. A frame that arrives whole in
        # one read reserves as it is taken, without this.
        self._reserved = 0
        # The last framing pass stopped because the pool was spent when the head frame asked for
        # memory: reading stays paused until a release (Kafka's "mute due to memory pressure").
        self._awaiting_memory = False
        self.listener = listener
        # Who the client is (ACLs, quotas): ANONYMOUS until TLS or SASL says otherwise.
        self.principal: KafkaPrincipal = ANONYMOUS
        # TLS listeners: builds the principal from the client certificate (set by the SocketServer).
        self.tls_principal: PrincipalBuilder | None = None
        # The transport encrypts: fetch regions are copied through it, never sendfile'd.
        self.tls = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.transport: asyncio.Transport | None = None
        self.peer: str = "?"
        self.buf = bytearray()
        self.pos = 0
        self.slots: deque[_Slot] = deque()
        self.out_queue: deque[Any] = deque()
        # Bytes already sent of the head of out_queue when it is a FetchSlice (slices are the
        # log's immutable values, so the progress is kept here).
        self._region_sent = 0
        self.closed = False
        self.read_paused = False
        self.write_paused = False
        # KIP-219 mute (broker/quota): reading stops until the loop time ``throttled_until``.
        self.throttled = False
        self.throttled_until = 0.0
        # Pipelined requests allowed; client quotas set it to 1 for a client under a quota, as
        # Kafka reads one request per channel at a time, so a throttle stops the very next one.
        self.max_in_flight = MAX_IN_FLIGHT
        self._throttle_timer: asyncio.TimerHandle | None = None
        self.last_active = time.monotonic()
        self.sock_fd = -1
        # A duplicate of sock_fd the loop watches for writability while a region waits for a full
        # socket (point 4 of the module docstring); -1 until the first wait. ``_watching``: the
        # watch is on.
        self._watch_fd = -1
        self._watching = False
        self.on_close: Callable[[Connection], None] | None = None
        # What the client said it is in ApiVersions v3+ (KIP-511; Kafka's ClientInformation, "unknown"
        # until then): client telemetry subscriptions match on it.
        self.client_software_name = "unknown"
        self.client_software_version = "unknown"
        # The SASL state machine on SASL listeners (broker/security/sasl/authenticator.py), which the
        # dispatcher consults before any handler; None on other listeners.
        self.sasl: SaslAuthenticator | None = None

    # -- asyncio callbacks ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream socket's protocol is always given a (read-write) asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)
        self.loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        ssl_object = transport.get_extra_info("ssl_object") if self.tls_principal is not None else None
        if ssl_object is not None:
            self._tls_made(ssl_object)
            return
        sock = transport.get_extra_info("socket")
        self.sock_fd = sock.fileno() if sock is not None else -1
        # Zero water marks: the transport calls pause_writing as soon as the kernel refuses bytes
        # (uvloop writes immediately and buffers only the rest) and resume_writing when its
        # buffer is empty again, which is exactly when a file region may be sendfile'd without
        # reordering bytes, and when reading more requests makes sense again.
        self.transport.set_write_buffer_limits(high=0, low=0)

    def _tls_made(self, ssl_object: Any) -> None:
        """The TLS handshake is done: no sendfile (bytes must be encrypted), the principal from the
        client certificate. The transport pauses us at TLS_WRITE_HIGH buffered bytes and resumes
        once they all went out, which bounds what a slow reader costs (see _pump)."""
        self.tls = True
        self.sock_fd = -1
        self.transport.set_write_buffer_limits(high=TLS_WRITE_HIGH, low=0)  # type: ignore[union-attr]
        try:
            self.principal = self.tls_principal(ssl_object)  # type: ignore[misc]
        except ValueError as exc:  # NoMatchingRule, or a certificate we cannot read
            AUTH_FAILURES.failed("Failed authentication with %s on %s (%s): closing", self.peer, self.listener, exc)
            self.close()
            return
        log.debug("TLS connection from %s on %s (%s): principal %s", self.peer, self.listener,
                  ssl_object.version(), self.principal)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release_watch_fd()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        if self._reserved:
            # A frame cut off mid-way: its memory goes back (Kafka's NetworkReceive.close).
            self.channel.give_back(self, self._reserved)
            self._reserved = 0
        self.slots.clear()
        self.out_queue.clear()
        self._region_sent = 0
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        self.write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        # The client took what was buffered: a slow reader of a long response is not idle (Kafka's
        # selector counts writes as activity for connections.max.idle.ms too).
        self.last_active = time.monotonic()
        self.write_paused = False
        self._pump()
        self._on_input()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return  # lingering after a last answer (close_after_flush)
        self.last_active = time.monotonic()
        if self.pos == len(self.buf):
            # Nothing buffered (the usual case): whole frames are taken from ``data`` itself as
            # zero-copy views (it is an immutable bytes object, kept alive by its frames); only an
            # incomplete tail, or what the bounds hold back, is copied into ``buf``.
            used = self._take_frames(data, 0, True)
            self.buf.clear()
            self.pos = 0
            if used < len(data) and not self.closed:
                self.buf += memoryview(data)[used:]
        else:
            self.buf += data
        self._on_input()

    def _on_input(self) -> None:
        """Frame what is buffered (within the bounds), then pause or resume reading."""
        while True:
            self._frame_buffered()
            self._update_reading()
            # The handler loop drains the shared queue on its own thread: if it did so between the
            # two steps, framing stopped at a bound that no longer holds, and no wake-up was
            # registered (the queue was not full when _update_reading looked). Frame again, or
            # the buffered requests would wait for bytes the client may never send. The same
            # holds for memory released between a refused reservation and that look.
            if (self.closed or self._at_bound() or (self._awaiting_memory and self.pool.spent())
                    or not self._complete_frame_buffered()):
                return

    def _complete_frame_buffered(self) -> bool:
        available = len(self.buf) - self.pos
        return available >= 4 and available - 4 >= P.INT32.unpack_from(self.buf, self.pos)[0]

    def _at_bound(self) -> bool:
        # The bounds other than memory: a frame that holds its reservation waits only for these.
        return self.write_paused or self.throttled or len(self.slots) >= self.max_in_flight or self.channel.is_full()

    def _frame_buffered(self) -> None:
        # Frames are taken one at a time while both bounds hold, so the request queue and this
        # connection's pending responses never exceed them; the rest waits in ``buf`` until
        # complete()/on_queue_space()/resume_writing() call back here.
        buf = self.buf
        pos = self._take_frames(buf, self.pos, False)
        if pos == len(buf):
            buf.clear()
            pos = 0
        elif pos >= COMPACT_AT:
            del buf[:pos]
            pos = 0
        self.pos = pos

    def _take_frames(self, src: bytes | bytearray, pos: int, zero_copy: bool) -> int:
        """Submit the complete frames of ``src`` from ``pos`` while the bounds allow; returns the
        position after the last one taken. ``zero_copy`` (``src`` is immutable bytes): each frame
        of at least an eighth of ``src`` is a view into it; otherwise a copy, made in one step."""
        end = len(src)
        limit = self.max_request_size
        pool = self.pool
        # Whether framing stops for memory this time (read by _update_reading); set below if so.
        self._awaiting_memory = False
        with memoryview(src) as view:
            while end - pos >= 4 and not self.closed:
                size = P.INT32.unpack_from(src, pos)[0]
                if size < 0 or size > limit:
                    # Kafka's InvalidReceiveException: the connection is closed, nothing allocated.
                    log.warning(
                        "closing %s: request size %d outside [0, %d] (socket.request.max.bytes)",
                        self.peer,
                        size,
                        limit,
                    )
                    self.close()
                    return pos
                if end - pos - 4 < size:
                    # Incomplete (so size > 0): its whole size is reserved before more is read
                    # (Kafka's NetworkReceive.readFrom -> tryAllocate), unless another bound stops
                    # reading anyway (no memory is held for a frame that is not read now).
                    if not self._reserved and not self._at_bound():
                        if pool.try_reserve(size):
                            self._reserved = size
                        else:
                            self._awaiting_memory = True
                    break
                if self._at_bound():
                    break
                if self._reserved:
                    self._reserved = 0  # reserved while it arrived; the memory passes to the request
                elif size and not pool.try_reserve(size):
                    # _update_reading pauses and registers for the wake-up that follows a release.
                    self._awaiting_memory = True
                    break
                # A view keeps all of ``src`` alive (up to a whole read: 256 KiB with uvloop and
                # asyncio): only frames of at least an eighth of it are viewed (64 KiB produce
                # requests read four at a time are), so what queued requests pin stays within 8x
                # their bytes (queued.max.request.bytes); small frames are cheap to copy.
                if zero_copy and size * 8 >= end:
                    frame: bytes | memoryview = view[pos + 4 : pos + 4 + size]
                else:
                    frame = bytes(view[pos + 4 : pos + 4 + size])
                pos += 4 + size
                slot = _Slot()
                self.slots.append(slot)
                if not self.channel.submit(self, slot, frame):
                    return pos
        return pos

    # -- responses --------------------------------------------------------------------------

    def complete(self, slot: _Slot, chunks: list[ResponseChunk] | None) -> None:
        """Record a response (``None``: the request gets no response, e.g. acks=0)."""
        if self.closed:
            return
        slot.chunks = chunks
        slot.done = True
        slots = self.slots
        while slots and slots[0].done:
            head = slots.popleft()
            if head.chunks:
                self.out_queue.extend(head.chunks)
        self._pump()
        self._on_input()

    def _pump(self) -> None:
        transport = self.transport
        q = self.out_queue
        if transport is None or self.closed:
            return
        while q:
            chunk = q[0]
            if type(chunk) is not FetchSlice:
                q.popleft()
                transport.write(chunk)
                continue
            if self._watching:
                return  # the region waits for the socket to drain; _socket_writable pumps again
            if self.tls:
                # A region goes through the TLS transport chunk by chunk until it pauses us;
                # resume_writing pumps again once everything buffered went out.
                if self.write_paused:
                    return
            elif transport.get_write_buffer_size() > 0:
                # Earlier bytes are still queued in the transport, so the protocol is paused;
                # resume_writing pumps again once the buffer is empty.
                return
            if self._send_region(chunk):
                q.popleft()
                self._region_sent = 0
            elif self.closed:
                return

    def _send_region(self, region: FetchSlice) -> bool:
        """Send as much of ``region`` as the socket takes; True once all of it is sent.

        ``self._region_sent`` says how much of it earlier calls sent. On EAGAIN the socket is
        watched for writability and the caller stops until it drains (see the module docstring);
        where it cannot be watched, one bounded chunk goes through the transport instead and
        resume_writing continues from there.
        """
        fd = region.fd
        end = region.position + region.size
        position = region.position + self._region_sent
        sock_fd = self.sock_fd
        if sock_fd >= 0:
            try:
                while position < end:
                    n = os.sendfile(sock_fd, fd, position, end - position)
                    if n == 0:
                        self._region_truncated(region, position)
                        return False
                    position += n
                    self._region_sent += n
                    # A short count means the socket's buffer filled: asking again would only
                    # answer EAGAIN (a syscall and an exception, some 20 per 6.5 MiB Fetch), so
                    # the wait for writability starts now, as Kafka's does after a partial
                    # transferTo.
                    if position < end and self._wait_writable():
                        return False
                return True
            except BlockingIOError:
                if self._wait_writable():
                    return False
            except OSError as exc:
                log.debug("sendfile to %s failed: %s", self.peer, exc)
                self.close()
                return False
        n = min(end - position, REGION_CHUNK)
        try:
            data = os.pread(fd, n, position)
        except OSError as exc:
            log.error("reading a fetch region for %s failed: %s; closing the connection", self.peer, exc)
            self.close()
            return False
        if len(data) < n:
            self._region_truncated(region, position)
            return False
        self._region_sent += n
        self.transport.write(data)  # type: ignore[union-attr]
        return position + n == end

    def _wait_writable(self) -> bool:
        """Watch the full socket for writability; False where the loop cannot (then the caller
        copies a chunk). The watch is on a duplicate of the fd because both loops refuse
        ``add_writer`` on a fd their transport owns; epoll tells writability per open file, so
        the duplicate reports the socket's own state."""
        loop = self.loop
        if loop is None:
            return False
        try:
            if self._watch_fd < 0:
                self._watch_fd = os.dup(self.sock_fd)
            loop.add_writer(self._watch_fd, self._socket_writable)
        except (OSError, RuntimeError, NotImplementedError, ValueError) as exc:
            log.debug("cannot watch %s for writability (%s): copying region chunks", self.peer, exc)
            return False
        self._watching = True
        # As the transport's pause_writing: no more requests are read while the client does not
        # take its responses.
        self.pause_writing()
        return True

    def _socket_writable(self) -> None:
        self._stop_watching()
        if not self.closed:
            self.resume_writing()

    def _stop_watching(self) -> None:
        if self._watching:
            self._watching = False
            if self.loop is not None and not self.loop.is_closed():
                self.loop.remove_writer(self._watch_fd)

    def _release_watch_fd(self) -> None:
        self._stop_watching()
        if self._watch_fd >= 0:
            os.close(self._watch_fd)
            self._watch_fd = -1

    def _region_truncated(self, region: FetchSlice, position: int) -> None:
        # Kafka's FileRecords.writeTo: "truncated during write"; the channel is closed. The client
        # has the frame length already, so there is no way to finish the response honestly.
        # Logged once per file (each retrying client would log again; the read path does the same).
        try:
            st = os.fstat(region.fd)
            key: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            key = None
        if key is None or _REPORTED_TRUNCATIONS.first(key):
            log.error("segment file (fd %d) ends before its fetch region [%d, +%d): truncated under the broker; "
                      "closing %s", region.fd, position, region.position + region.size - position, self.peer)
        else:
            log.debug("closing %s: its fetch region's segment file was truncated under the broker", self.peer)
        self.close()

    def close_threadsafe(self, after_flush: bool = False) -> None:
        """Close from any thread: transports may only be touched on their own loop.
        ``after_flush``: once what the transport holds is written (close_after_flush)."""
        loop = self.loop
        if loop is None or self.closed:
            return
        close = self.close_after_flush if after_flush else self.close
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            close()
        else:
            try:
                loop.call_soon_threadsafe(close)
            except RuntimeError:
                pass  # the network loop is closed: shutting down

    # -- flow control -----------------------------------------------------------------------

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        channel = self.channel
        queue_full = channel.is_full()
        starved = self._awaiting_memory and self.pool.spent()
        if queue_full or starved:
            # Register first, then look again: a drain (which follows every release of memory)
            # between the two checks would otherwise leave this connection paused with nobody to
            # wake it.
            channel.wait_for_space(self)
            queue_full = channel.is_full()
            starved = self._awaiting_memory and self.pool.spent()
        should_pause = (self.write_paused or self.throttled or len(self.slots) >= self.max_in_flight or queue_full
                        or starved)
        if should_pause and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()
        elif not should_pause and self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def throttle(self, ms: int) -> None:
        """Stop reading for ``ms`` (KIP-219; called on this connection's loop just before the
        response carrying throttle_time_ms completes). Overlapping throttles end at the latest end."""
        loop = self.loop
        if self.closed or loop is None or ms <= 0:
            return
        end = loop.time() + ms / 1000.0
        if end <= self.throttled_until:
            return
        self.throttled_until = end
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_timer = loop.call_at(end, self._end_throttle)
        self.throttled = True
        self._update_reading()

    def _end_throttle(self) -> None:
        self._throttle_timer = None
        self.throttled = False
        self._on_input()

    def on_queue_space(self) -> None:
        self._on_input()

    def close_after_flush(self) -> None:
        """Close after the last answer (a failed SASL authentication's, which Kafka's delayed close
        sends first): nothing more is read or answered, what the transport holds is written, and
        the socket closes when the client closes it or after CLOSE_LINGER_S, whichever is first."""
        transport = self.transport
        if self.closed or transport is None:
            return
        self.closed = True
        self.out_queue.clear()
        if self.read_paused:
            # Reading must go on to see the client's FIN (data that comes is ignored: closed).
            self.read_paused = False
            transport.resume_reading()
        assert self.loop is not None
        self.loop.call_later(CLOSE_LINGER_S, transport.close)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._release_watch_fd()
            if self.transport is not None:
                self.transport.abort()
