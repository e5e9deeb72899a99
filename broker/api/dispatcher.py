"""The request dispatcher (Kafka's KafkaApis): header → handler → response bytes.

Runs on the handler loop, which owns all broker state. For each framed request it
1. reads api key and version; an unknown key, or an unsupported version of anything but
   ApiVersions, closes the connection, as Kafka does (the client cannot parse a reply to a
   version it did not expect); so does an API served on the inter-broker listener only
   (``HandlerSpec.inter_broker_only``: what brokers send the controller) arriving on another;
2. decodes header and body with the schema-compiled codecs (protocol/codec.py); a malformed body
   closes that connection only;
3. calls the handler (with client quotas: inside the quotas' step, which bounds a fetch and
   counts the handler's time); a coroutine result is awaited as a task so other requests keep flowing.
   A frame over LARGE_REQUEST_BYTES for an API with ``handle_large`` (Metadata) is not decoded here:
   that coroutine decodes and answers it in slices, yielding between them, so one request of
   hundreds of thousands of elements cannot stall every other client for seconds. A large frame
   of an API in OFF_LOOP_APIS is decoded, and its answer encoded, in a worker thread (the loop
   keeps serving others); handlers with per-element loops (ListOffsets, DeleteRecords) yield
   between slices themselves;
4. encodes the response (header v0/v1 by flexibility, always v0 for ApiVersions; with client
   quotas, after the quotas' step has recorded it and set its throttle) and hands the chunks back to
   the connection, which releases responses in request order. A handler answering
   CLOSE_CONNECTION (broker/api/request_types.py) gets its connection closed here instead.

Before all this, while the test suite records which request versions it sent
(broker/api/request_version_record.py), the channel hands each frame to ``record_then_process``,
which notes its pair first; otherwise the channel calls ``process`` itself. A connection on a SASL
listener hands the frame to its authenticator, which
answers the authentication exchange itself (through :meth:`Dispatcher.send`) and lets the rest
through. Handlers get their collaborators from the registry (broker/api/registry.py), not from
the dispatcher or the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from odradek.broker.api.handlers import alter_user_scram_credentials, api_versions
from odradek.broker.api.registry import HandlerSpec
from odradek.broker.api.request_types import CLOSE_CONNECTION, CloseConnection, Later
from odradek.broker.api.request_version_record import RequestVersionRecord
from odradek.protocol.codec import codec, is_flexible
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.headers import API_VERSIONS_KEY, decode_request_header, peek_api
from odradek.protocol.primitives import DecodeError
from odradek.protocol.response_frame import encode_response

if TYPE_CHECKING:
    from odradek.broker.api.request_types import ApiRequest, ClientSession
    from odradek.broker.network.connection import Connection
    from odradek.broker.network.request_channel import RequestChannel
    from odradek.broker.quota.client_quotas import ClientQuotas
    from odradek.broker.runtime.metrics import BrokerMetrics
    from odradek.broker.security.principal import KafkaPrincipal

__all__ = ["CATCH_ALL_LOG", "Dispatcher", "Request", "encode_response"]

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
    """One decoded request and where its response goes (``conn`` and ``slot``: the dispatcher's
    own; a handler sees the request as an ApiRequest, which has neither)."""

    __slots__ = (
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

    def __init__(self, conn: Connection, slot: Any, spec: HandlerSpec, header: Any, body: dict[str, Any]):
        self.conn = conn
        self.slot = slot
        self.spec = spec
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.correlation_id = header.correlation_id
        self.client_id = header.client_id
        self.body = body
        self.received_at = time.monotonic()

    # What the request carries of its connection (Kafka's RequestContext), read only by the few
    # handlers that need it, so the hot path does not pay to copy them.
    @property
    def principal(self) -> KafkaPrincipal:
        return self.conn.principal

    @property
    def peer(self) -> str:
        return self.conn.peer

    @property
    def listener(self) -> str:
        return self.conn.listener

    @property
    def session(self) -> ClientSession:
        return self.conn


class _PreEncoded:
    """A response already encoded off the loop (large requests); ``body`` is kept for the trace log."""

    __slots__ = ("chunks", "body")

    def __init__(self, chunks: list[Any], body: dict[str, Any]) -> None:
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
    def __init__(self, handlers: dict[int, HandlerSpec], channel: RequestChannel | None = None, *,
                 inter_broker_listener: str | None = None, metrics: BrokerMetrics | None = None):
        """``handlers``: the bound registry (broker/api/registry.py ``bind_handlers``);
        ``inter_broker_listener``: where the inter-broker-only APIs are served; ``metrics``: None
        when odradek.metrics.port is negative."""
        self.channel = channel
        self.inter_broker_listener = inter_broker_listener
        self.metrics = metrics
        self.trace = request_log.isEnabledFor(logging.DEBUG)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.short_gil_switch = _ShortGilSwitch()
        # Client quotas (broker/quota/client_quotas.py), set by ``set_quotas`` only while some
        # quota exists: the quotas' steps (around the handler, before the response is encoded)
        # then run; without one each costs a test of this attribute.
        self.quotas: ClientQuotas | None = None
        # The APIs served on the inter-broker listener only stay out of ``handlers``, so the lookup
        # every request makes is unchanged; they are looked up when that one finds nothing.
        self.handlers = {key: spec for key, spec in handlers.items() if not spec.inter_broker_only}
        self.inter_broker_handlers = {key: spec for key, spec in handlers.items() if spec.inter_broker_only}
        # The test suite's record of the request versions it exercised (broker/api/request_version_record.py),
        # only while its variable is set: the channel then hands frames to ``record_then_process``.
        # Chosen here, once, rather than tested per request, so a broker without it pays nothing.
        self.version_record = RequestVersionRecord.from_environment(handlers)
        if channel is not None:  # this dispatcher handles what the channel queues
            channel.process = self.process if self.version_record is None else self.record_then_process

    def record_then_process(self, conn: Connection, slot: Any, frame: bytes | memoryview) -> None:
        """Step 0, only while the suite's request-version record is on: note the frame's (api key,
        version), then handle it as ``process`` does."""
        record = self.version_record
        if record is not None:
            record.note(frame)
        self.process(conn, slot, frame)

    def process(self, conn: Connection, slot: Any, frame: bytes | memoryview) -> None:
        # Step 1, SASL listeners: the connection's authenticator sees every frame first (one
        # attribute test elsewhere); it answers the authentication exchange itself, through this
        # dispatcher's ``send`` and ``close``, and lets the rest through.
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
        request = Request(conn, slot, spec, header, body)
        if self.trace:
            request_log.debug("request %s %s v%d corr=%d client=%s: %s", conn.peer, spec.name, api_version,
                              header.correlation_id, header.client_id,
                              alter_user_scram_credentials.loggable(body)
                              if api_key == alter_user_scram_credentials.API_KEY else body)
        quotas = self.quotas
        try:
            result = spec.handle(request) if quotas is None else quotas.run_handler(spec.handle, request, conn)
        except KafkaApiError as exc:
            self._fail(request, exc)
            return
        except Exception:
            log.exception(CATCH_ALL_LOG, spec.name, api_version)
            self._fail(request)
            return
        # Most handlers answer synchronously with a dict (or None for acks=0); checking that first
        # skips isawaitable's ABC machinery on every request (~1-2 % of the produce path).
        if result is None or type(result) is dict:
            self.respond(request, result)
        elif result is CLOSE_CONNECTION:
            self._close_unanswered(request)
        elif type(result) is Later:
            result.future.add_done_callback(functools.partial(self._finish_later, request, result.finish))
        elif inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self.tasks.add(task)
            task.add_done_callback(functools.partial(self._finish_async, request))
        else:  # a dict subclass
            self.respond(request, result)  # type: ignore[arg-type]

    def _close_unanswered(self, request: Request) -> None:
        """A handler's CLOSE_CONNECTION: the connection is closed, and the request still counts as
        answered (metrics, quotas), with nothing to send."""
        self._close(request.conn)
        self.respond(request, None)

    def _inter_broker_spec(self, conn: Connection, api_key: int) -> HandlerSpec | None:
        """The handler of an API served on the inter-broker listener only, when ``conn`` is on that
        listener; else None, logged (the caller closes the connection)."""
        spec = self.inter_broker_handlers.get(api_key)
        if spec is None:
            log.warning("closing %s: unknown or unsupported api key %d", conn.peer, api_key)
            return None
        listener = self.inter_broker_listener
        if conn.listener != listener:
            log.warning("closing %s: %s (api key %d) is served on the inter-broker listener %s only, not on %s",
                        conn.peer, spec.name, api_key, listener, conn.listener)
            return None
        return spec

    def _process_large(self, conn: Connection, slot: Any, spec: HandlerSpec, header: Any, view: memoryview) -> None:
        request = Request(conn, slot, spec, header, {})  # body: filled in below
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
        quotas = self.quotas
        result = spec.handle(request) if quotas is None else quotas.run_handler(spec.handle, request, request.conn)
        if result is not None and type(result) is not dict and inspect.isawaitable(result):
            result = await result
        if result is None or isinstance(result, CloseConnection):
            return result
        header_flexible = spec.api_key != API_VERSIONS_KEY and is_flexible(spec.response_schema, request.api_version)
        chunks = await asyncio.to_thread(encode_response, spec.response_schema, request.api_version,
                                         request.correlation_id, result, header_flexible)
        return _PreEncoded(chunks, result)

    def _finish_async(self, request: Request, task: asyncio.Task[Any]) -> None:
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
        if result is CLOSE_CONNECTION:
            self._close_unanswered(request)
            return
        if type(result) is _PreEncoded:
            self._record(request)
            if self.trace:
                request_log.debug("response %s %s v%d corr=%d after %.1f ms: %s", request.conn.peer,
                                  request.spec.name, request.api_version, request.correlation_id,
                                  (time.monotonic() - request.received_at) * 1000, result.body)
            self._send(request.conn, request.slot, result.chunks)
            return
        self.respond(request, result)

    def _finish_later(self, request: Request, finish: Callable[[Any], Any], future: asyncio.Future[Any]) -> None:
        """A :class:`Later` answer: its future is done; build the response from its result."""
        if future.cancelled():
            self._close(request.conn)
            return
        try:
            result = finish(future.result())
        except KafkaApiError as exc:
            self._fail(request, exc)
            return
        except Exception:
            log.exception(CATCH_ALL_LOG, request.spec.name, request.api_version)
            self._fail(request)
            return
        if result is CLOSE_CONNECTION:
            self._close_unanswered(request)
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
        metrics = self.metrics
        if metrics is not None:
            count, latency, kafka_count, kafka_time = metrics.for_api(request.spec.name, request.api_version)
            elapsed = time.monotonic() - request.received_at
            count.inc()
            latency.observe(elapsed)
            kafka_count.inc()
            kafka_time.observe(elapsed * 1000)

    def set_quotas(self, quotas: ClientQuotas | None) -> None:
        """Set client quotas (or remove them: None): while set, every handler runs inside the quotas'
        step (request time, the fetch size bound) and every response goes through their throttle."""
        self.quotas = quotas

    def respond(self, request: Request, body: dict[str, Any] | None) -> None:
        quotas = self.quotas
        if quotas is not None:
            body, throttle_ms = quotas.on_response(request, body)
            if throttle_ms:
                # Muted first: the response's completion frames the next buffered request otherwise.
                self._throttle(request.conn, throttle_ms)
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
        body = api_versions.unsupported_version_response(self.handlers)
        self._send(conn, slot, encode_response("ApiVersionsResponse", 0, correlation_id, body, False))

    def send(self, conn: Connection, slot: Any, chunks: list[Any] | None) -> None:  # the SASL step's
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


if TYPE_CHECKING:
    def _request_is_an_api_request(request: Request) -> ApiRequest[Any]:
        # Checked by mypy only: the dispatcher's Request must keep satisfying the handlers' protocol.
        return request
