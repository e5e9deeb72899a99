"""The request dispatcher (Kafka's KafkaApis): header → handler → response bytes.

Runs on the handler loop, which owns all broker state. For each framed request it
1. reads api key and version; an unknown key, or an unsupported version of anything but
   ApiVersions, closes the connection, as Kafka does (the client cannot parse a reply to a
   version it did not expect); so does an API served on the inter-broker listener only
   (``HandlerSpec.inter_broker_only``: what brokers send the controller) arriving on another;
2. decodes header and body with the schema-compiled codecs (protocol/codec.py); a malformed body
   closes that connection only;
3. calls the handler; a coroutine result is awaited as a task so other requests keep flowing.
   A frame over LARGE_REQUEST_BYTES for an API with ``handle_large`` (Metadata) is not decoded here:
   that coroutine decodes and answers it in slices, yielding between them, so one request of
   hundreds of thousands of elements cannot stall every other client for seconds. A large frame
   of an API in OFF_LOOP_APIS is decoded, and its answer encoded, in a worker thread (the loop
   keeps serving others); handlers with per-element loops (ListOffsets, DeleteRecords) yield
   between slices themselves;
4. encodes the response (header v0/v1 by flexibility, always v0 for ApiVersions) and hands the
   chunks back to the connection, which releases responses in request order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from odradek.broker.api.handlers import alter_user_scram_credentials, api_versions
from odradek.broker.api.registry import HandlerSpec
from odradek.broker.api.request_version_record import RequestVersionRecord
from odradek.protocol import primitives as P
from odradek.protocol.codec import codec, is_flexible
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.headers import API_VERSIONS_KEY, decode_request_header, peek_api, response_header
from odradek.protocol.primitives import DecodeError

if TYPE_CHECKING:
    from odradek.broker.api.request_types import BrokerServices
    from odradek.broker.network.connection import Connection
    from odradek.broker.network.request_channel import RequestChannel
    from odradek.broker.quota.client_quotas import ClientQuotas

log = logging.getLogger(__name__)
# Kafka's kafka.request.logger: at DEBUG, one line when a request is decoded and one when its
# response is handed to the connection (``--log-level DEBUG``). Read once, at start-up, so the
# hot path pays a single attribute test when it is off.
request_log = logging.getLogger("odradek.request")

# Frames above this size go to the API's ``handle_large`` when it has one (see module doc). Small
# requests, the hot path, pay one length comparison.
LARGE_REQUEST_BYTES = 256 << 10
# APIs whose large frames are decoded (and answered) off the loop. Only reads, and DeleteRecords
# (already asynchronous): a request handled later than one that arrived after it on the same
# connection must not change what that one sees, and for these it does not matter. Produce is not
# here (it decodes zero-copy, and its large frames are normal traffic), nor any other write.
OFF_LOOP_APIS = frozenset({
    2,  # ListOffsets
    9,  # OffsetFetch
    15,  # DescribeGroups
    21,  # DeleteRecords
    32,  # DescribeConfigs
    35,  # DescribeLogDirs
    75,  # DescribeTopicPartitions
})
# While a large request is worked on (decoded or encoded in a worker thread, answered in slices on
# the handler loop), some thread runs pure Python back to back, and the network threads wait for
# the GIL on every callback they run: at CPython's default 5 ms switch interval another client's
# ApiVersions + Metadata took 0.5-1.3 s during a 300,000-partition ListOffsets; at 1 ms, under
# 0.2 s. The interval is shortened only while such a request is in progress, so the hot path
# keeps the default.
OFF_LOOP_SWITCH_INTERVAL_S = 0.001
# What the catch-all logs, with the traceback, for a handler that raised something other than a
# KafkaApiError: the client gets UNKNOWN_SERVER_ERROR (or, where the API has no error response, a
# closed connection). Every such path is a bug to be answered with Kafka's specific error, so the
# line names the code for log searches; the fault suite fails a run on it
# (tests/support/fault_checker.py).
CATCH_ALL_LOG = "%s v%d handler failed (UNKNOWN_SERVER_ERROR)"


class Request:
    """One decoded request and where its response goes."""

    __slots__ = (
        "broker",
        "conn",
        "slot",
        "api_key",
        "api_version",
        "correlation_id",
        "client_id",
        "body",
        "spec",
        "received_at",
    )

    def __init__(self, broker: BrokerServices, conn: Connection, slot: Any, spec: HandlerSpec, header: Any,
                 body: dict):
        self.broker = broker
        self.conn = conn
        self.slot = slot
        self.spec = spec
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.correlation_id = header.correlation_id
        self.client_id = header.client_id
        self.body = body
        self.received_at = time.monotonic()


def encode_response(
    schema: str, version: int, correlation_id: int, body: dict, header_flexible: bool
) -> list[Any]:
    """Size-prefixed response frame as chunks: bytes, and file regions where records are sendfile'd."""
    out = bytearray(b"\x00\x00\x00\x00")
    out += response_header(correlation_id, header_flexible)
    regions: list[tuple[int, Any]] = []
    codec(schema, version).encode_into(body, out, regions)
    if not regions:
        P.INT32.pack_into(out, 0, len(out) - 4)
        return [out]
    P.INT32.pack_into(out, 0, len(out) - 4 + sum(region.size for _, region in regions))
    chunks: list[Any] = []
    start = 0
    view = memoryview(out)
    for at, region in regions:
        if at > start:
            chunks.append(view[start:at])
        if region.size:
            chunks.append(region)
        start = at
    if start < len(out):
        chunks.append(view[start:])
    return chunks


class _PreEncoded:
    """A response already encoded off the loop (large requests); ``body`` is kept for the trace log."""

    __slots__ = ("chunks", "body")

    def __init__(self, chunks: list[Any], body: dict) -> None:
        self.chunks = chunks
        self.body = body


class _ShortGilSwitch:
    """Shortens the interpreter's switch interval while at least one off-loop job runs (entered
    and left on the handler loop only, so the count needs no lock)."""

    def __init__(self) -> None:
        self.jobs = 0
        self.saved = sys.getswitchinterval()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        if self.jobs == 0:
            self.saved = sys.getswitchinterval()
            sys.setswitchinterval(min(self.saved, OFF_LOOP_SWITCH_INTERVAL_S))
        self.jobs += 1
        try:
            yield
        finally:
            self.jobs -= 1
            if self.jobs == 0:
                sys.setswitchinterval(self.saved)


class Dispatcher:
    def __init__(self, broker: BrokerServices, handlers: dict[int, HandlerSpec],
                 channel: RequestChannel | None = None):
        self.broker = broker
        self.handlers = handlers
        self.channel = channel
        self.trace = request_log.isEnabledFor(logging.DEBUG)
        self.tasks: set[asyncio.Task] = set()
        self.short_gil_switch = _ShortGilSwitch()
        # Client quotas (broker/quota/client_quotas.py), installed by ``set_quotas`` only while
        # some quota exists; without one the request path is exactly as if quotas did not exist.
        self.quotas: ClientQuotas | None = None
        # The APIs served on the inter-broker listener only stay out of ``handlers``, so the lookup
        # every request makes is unchanged; they are looked up when that one finds nothing.
        self._plain_inter_broker = {key: spec for key, spec in handlers.items() if spec.inter_broker_only}
        self._plain_handlers = {key: spec for key, spec in handlers.items() if not spec.inter_broker_only}
        self.handlers = self._plain_handlers
        self.inter_broker_handlers = self._plain_inter_broker
        # The test suite's record of the request versions it exercised (broker/api/request_version_record.py):
        # when its variable is set, every frame goes through it first; unset, ``process`` is the class's.
        record = RequestVersionRecord.from_environment(handlers)
        if record is not None:
            self.process = record.wrap(self.process)  # type: ignore[method-assign,assignment]

    def process(self, conn: Connection, slot: Any, frame: bytes | memoryview) -> None:
        # SASL listeners: the connection's authenticator sees every frame first (one attribute test
        # elsewhere); it answers the authentication exchange itself and lets the rest through.
        sasl = conn.sasl
        if sasl is not None and sasl.intercept(self, conn, slot, frame):
            return
        try:
            api_key, api_version, correlation_id = peek_api(frame)
        except DecodeError:
            log.warning("closing %s: frame of %d bytes is too short for a request header", conn.peer, len(frame))
            self._close(conn)
            return
        spec = self.handlers.get(api_key)
        if spec is None:
            spec = self._inter_broker_spec(conn, api_key)
            if spec is None:
                self._close(conn)
                return
        if not spec.supports(api_version):
            if api_key == API_VERSIONS_KEY:
                self._unsupported_api_versions(conn, slot, correlation_id)
                return
            log.warning(
                "closing %s: %s v%d not supported (%d-%d)",
                conn.peer,
                spec.name,
                api_version,
                spec.min_version,
                spec.max_version,
            )
            self._close(conn)
            return
        view = memoryview(frame)
        try:
            header = decode_request_header(view, is_flexible(spec.request_schema, api_version))
            if len(frame) > LARGE_REQUEST_BYTES and (spec.handle_large is not None or api_key in OFF_LOOP_APIS):
                self._process_large(conn, slot, spec, header, view)
                return
            body, _ = codec(spec.request_schema, api_version).decode(view, header.body_offset)
        except DecodeError as exc:
            log.warning("closing %s: malformed %s v%d request: %s", conn.peer, spec.name, api_version, exc)
            self._close(conn)
            return
        request = Request(self.broker, conn, slot, spec, header, body)
        if self.trace:
            request_log.debug("request %s %s v%d corr=%d client=%s: %s", conn.peer, spec.name, api_version,
                              header.correlation_id, header.client_id,
                              alter_user_scram_credentials.loggable(body)
                              if api_key == alter_user_scram_credentials.API_KEY else body)
        try:
            result = spec.handle(request)
        except KafkaApiError as exc:
            self._fail(request, exc)
            return
        except Exception:
            log.exception(CATCH_ALL_LOG, spec.name, api_version)
            self._fail(request)
            return
        # Most handlers answer synchronously with a dict (or None for acks=0); checking that first
        # skips isawaitable's ABC machinery on every request (~1-2 % of the produce path).
        if result is not None and type(result) is not dict and inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self.tasks.add(task)
            task.add_done_callback(functools.partial(self._finish_async, request))
        else:
            self.respond(request, result)

    def _inter_broker_spec(self, conn: Connection, api_key: int) -> HandlerSpec | None:
        """The handler of an API served on the inter-broker listener only, when ``conn`` is on that
        listener; else None, logged (the caller closes the connection)."""
        spec = self.inter_broker_handlers.get(api_key)
        if spec is None:
            log.warning("closing %s: unknown or unsupported api key %d", conn.peer, api_key)
            return None
        listener = self.broker.config.inter_broker_listener_name
        if conn.listener != listener:
            log.warning("closing %s: %s (api key %d) is served on the inter-broker listener %s only, not on %s",
                        conn.peer, spec.name, api_key, listener, conn.listener)
            return None
        return spec

    def _process_large(self, conn: Connection, slot: Any, spec: HandlerSpec, header: Any, view: memoryview) -> None:
        request = Request(self.broker, conn, slot, spec, header, {})  # body: filled in below
        if spec.handle_large is not None:
            work = spec.handle_large(request, view, header.body_offset)
        else:
            work = self._decode_off_loop_then_handle(request, view, header.body_offset)
        task = asyncio.ensure_future(self._with_short_gil_switch(work))
        self.tasks.add(task)
        task.add_done_callback(functools.partial(self._finish_async, request))

    async def _with_short_gil_switch(self, work: Any) -> Any:
        with self.short_gil_switch.active():
            return await work

    async def _decode_off_loop_then_handle(self, request: Request, view: memoryview, offset: int) -> Any:
        """Decode in a worker thread (the codec is pure), run the handler on the loop, and encode
        its answer in a worker thread too (the handler is done with it; a response of 400,000
        partitions takes ~0.5 s to encode)."""
        spec = request.spec
        request_codec = codec(spec.request_schema, request.api_version)
        request.body, _ = await asyncio.to_thread(request_codec.decode, view, offset)
        result = spec.handle(request)
        if result is not None and type(result) is not dict and inspect.isawaitable(result):
            result = await result
        if result is None:
            return None
        header_flexible = spec.api_key != API_VERSIONS_KEY and is_flexible(spec.response_schema, request.api_version)
        chunks = await asyncio.to_thread(encode_response, spec.response_schema, request.api_version,
                                         request.correlation_id, result, header_flexible)
        return _PreEncoded(chunks, result)

    def _finish_async(self, request: Request, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            self._close(request.conn)
            return
        exc = task.exception()
        if isinstance(exc, DecodeError):  # from a handle_large that decodes its own body
            log.warning("closing %s: malformed %s v%d request: %s", request.conn.peer, request.spec.name,
                        request.api_version, exc)
            self._close(request.conn)
            return
        if isinstance(exc, KafkaApiError):
            self._fail(request, exc)
            return
        if exc is not None:
            log.error(CATCH_ALL_LOG, request.spec.name, request.api_version, exc_info=exc)
            self._fail(request)
            return
        result = task.result()
        if type(result) is _PreEncoded:
            self._record(request)
            if self.trace:
                request_log.debug("response %s %s v%d corr=%d after %.1f ms: %s", request.conn.peer,
                                  request.spec.name, request.api_version, request.correlation_id,
                                  (time.monotonic() - request.received_at) * 1000, result.body)
            self._send(request.conn, request.slot, result.chunks)
            return
        self.respond(request, result)

    def _fail(self, request: Request, error: KafkaApiError | None = None) -> None:
        """A handler error: Kafka answers UNKNOWN_SERVER_ERROR where the API allows, or the code of a
        ``KafkaApiError`` (NOT_CONTROLLER from a controller that lost its lease: a forwarding broker
        must see it to retry elsewhere)."""
        spec = request.spec
        if error is not None:
            log.info("%s v%d failed: %s %s", spec.name, request.api_version, error.code.name, error.message or "")
        if spec.error_response is not None:
            try:
                code = ErrorCode.UNKNOWN_SERVER_ERROR if error is None else error.code
                self.respond(request, spec.error_response(request, code))
                return
            except Exception:
                log.exception("building the error response failed")
        self._close(request.conn)

    def _record(self, request: Request) -> None:
        metrics = self.broker.metrics
        if metrics is not None:
            count, latency, kafka_count, kafka_time = metrics.for_api(request.spec.name, request.api_version)
            elapsed = time.monotonic() - request.received_at
            count.inc()
            latency.observe(elapsed)
            kafka_count.inc()
            kafka_time.observe(elapsed * 1000)

    def set_quotas(self, quotas: ClientQuotas | None) -> None:
        """Install client quotas (or remove them: None). While installed, every handler runs inside
        the quotas' wrapper (request time, the fetch size bound) and ``respond`` is the throttling
        one; without quotas neither costs anything, not even a test."""
        self.quotas = quotas
        if quotas is None:
            self.handlers = self._plain_handlers
            self.inter_broker_handlers = self._plain_inter_broker
            self.__dict__.pop("respond", None)
        else:
            self.handlers = quotas.wrap_handlers(self._plain_handlers)
            self.inter_broker_handlers = quotas.wrap_handlers(self._plain_inter_broker)
            self.respond = self._respond_with_quotas  # type: ignore[method-assign]

    def _respond_with_quotas(self, request: Request, body: dict | None) -> None:
        quotas = self.quotas
        if quotas is None:  # removed while this request was in flight
            Dispatcher.respond(self, request, body)
            return
        body, throttle_ms = quotas.on_response(request, body)
        if throttle_ms:
            # Muted first: the response's completion frames the next buffered request otherwise.
            self._throttle(request.conn, throttle_ms)
        Dispatcher.respond(self, request, body)

    def respond(self, request: Request, body: dict | None) -> None:
        self._record(request)
        if body is None:
            chunks = None
        else:
            spec = request.spec
            header_flexible = spec.api_key != API_VERSIONS_KEY and is_flexible(
                spec.response_schema, request.api_version
            )
            chunks = encode_response(
                spec.response_schema, request.api_version, request.correlation_id, body, header_flexible
            )
        if self.trace:
            request_log.debug("response %s %s v%d corr=%d after %.1f ms: %s", request.conn.peer, request.spec.name,
                              request.api_version, request.correlation_id,
                              (time.monotonic() - request.received_at) * 1000, body)
        self._send(request.conn, request.slot, chunks)

    def _throttle(self, conn: Connection, ms: int) -> None:
        """Mute ``conn`` for ``ms`` on its own loop, before the response is completed there (FIFO
        callbacks), so no further request of this connection is read meanwhile."""
        loop = conn.loop
        if loop is None or conn.closed:
            return
        if self.channel is None or loop is self.channel.handler_loop:
            conn.throttle(ms)
        else:
            loop.call_soon_threadsafe(conn.throttle, ms)

    def _unsupported_api_versions(self, conn: Connection, slot: Any, correlation_id: int) -> None:
        body = api_versions.unsupported_version_response(self.handlers, self.broker)
        self._send(conn, slot, encode_response("ApiVersionsResponse", 0, correlation_id, body, False))

    def send(self, conn: Connection, slot: Any, chunks: list[Any] | None) -> None:
        """Hand an encoded response to the connection (the SASL authenticator answers through it)."""
        self._send(conn, slot, chunks)

    def close(self, conn: Connection) -> None:
        self._close(conn)

    def _close(self, conn: Connection) -> None:
        if self.channel is not None:
            self.channel.close(conn)
        else:
            conn.close()

    def _send(self, conn: Connection, slot: Any, chunks: list[Any] | None) -> None:
        if self.channel is not None:
            self.channel.send(conn, slot, chunks)
        else:
            conn.complete(slot, chunks)
