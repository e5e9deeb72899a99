"""The dispatcher (broker/api/dispatcher.py) over a real RequestChannel, SocketServer and Connection.

No broker: a handler loop in a thread of its own, a real listener on 127.0.0.1 and a small handler
registry of real Kafka schemas (ApiVersions is the real handler module; ListGroups, Metadata and
ListOffsets get test handlers, sync, async, failing, large). Clients are plain sockets speaking the
wire protocol (tests.support.wire). What is checked is what a client sees: the answer, its
correlation id and order, or the connection closing.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import sys
import threading
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.broker.api.dispatcher import LARGE_REQUEST_BYTES, OFF_LOOP_SWITCH_INTERVAL_S, Dispatcher
from odradek.broker.api.handlers import api_versions
from odradek.broker.api.registry import HandlerSpec, bind_handlers, spec_from_module
from odradek.broker.api.request_types import Later
from odradek.broker.network.reactor import Endpoint, SocketServer, new_event_loop
from odradek.broker.network.request_channel import RequestChannel
from odradek.controller.image import MetadataImage
from odradek.protocol.codec import codec
from odradek.protocol.errors import ErrorCode, KafkaApiError
from tests.support.wire import WireClient

LIST_GROUPS, METADATA, LIST_OFFSETS = 16, 3, 2


class Handlers:
    """Test handlers, and what they saw. ``behaviour`` picks what ListGroups does for a request
    whose states_filter names it: "sync" (default), "async:<seconds>", "none", "raise"."""

    def __init__(self) -> None:
        self.loop_thread: threading.Thread | None = None
        self.seen_large: list[int] = []
        self.off_loop: list[tuple[int, bool, float]] = []
        self.finished: list[tuple[str, bool]] = []
        self.completing = False

    def list_groups(self, request: Any) -> Any:
        (tag,) = request.body.get("states_filter") or ["sync"]
        response = {"error_code": 0, "throttle_time_ms": 0,
                    "groups": [{"group_id": tag, "protocol_type": "", "group_state": "", "group_type": ""}]}
        if tag == "raise":
            raise RuntimeError("handler bug")
        if tag == "async-raise":
            async def failing() -> dict:
                raise RuntimeError("handler bug")
            return failing()
        if tag in ("not-controller", "async-not-controller"):
            if tag == "not-controller":
                raise KafkaApiError(ErrorCode.NOT_CONTROLLER, "lease lost")

            async def lost() -> dict:
                raise KafkaApiError(ErrorCode.NOT_CONTROLLER, "lease lost")
            return lost()
        if tag == "none":
            return None
        if tag.startswith("later:") or tag == "later-not-controller":
            # A purgatory's answer (Fetch, acks=all Produce): a future completed from elsewhere,
            # the response built from its value.
            future = asyncio.get_running_loop().create_future()
            delay = 0.05 if tag == "later-not-controller" else float(tag.split(":")[1])
            asyncio.get_running_loop().call_later(delay, self._complete, future, tag)

            def finish(value: str) -> dict:
                self.finished.append((value, self.completing))
                if value == "later-not-controller":
                    raise KafkaApiError(ErrorCode.NOT_CONTROLLER, "lease lost")
                return response
            return Later(future, finish)
        if tag.startswith("async:"):
            async def later() -> dict:
                await asyncio.sleep(float(tag.split(":")[1]))
                return response
            return later()
        return response

    def _complete(self, future: asyncio.Future[str], tag: str) -> None:
        self.completing = True  # the answer must not be built inside this call
        future.set_result(tag)
        self.completing = False

    @staticmethod
    def list_groups_error(request: Any, code: int) -> dict:
        return {"error_code": code, "throttle_time_ms": 0, "groups": []}

    async def metadata_large(self, request: Any, buf: Any, body_offset: int) -> dict:
        body, _ = codec("MetadataRequest", request.api_version).decode(buf, body_offset)
        self.seen_large.append(len(body["topics"]))
        return {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1, "topics": []}

    def metadata(self, request: Any) -> dict:
        raise AssertionError("a large Metadata frame must go to handle_large")

    def list_offsets(self, request: Any) -> dict:
        partitions = request.body["topics"][0]["partitions"]
        on_loop = threading.current_thread() is self.loop_thread
        self.off_loop.append((len(partitions), on_loop, sys.getswitchinterval()))
        return {"throttle_time_ms": 0, "topics": [{"name": request.body["topics"][0]["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1, "offset": 7,
             "leader_epoch": -1} for p in partitions[:3]]}]}


class ApiVersionsParts:
    """What ApiVersions uses (its module's Services): an empty metadata image (v3+ reads its
    feature levels), node 1."""

    def __init__(self) -> None:
        self.node_id = 1
        self.metadata = SimpleNamespace(image=MetadataImage(), cluster_id=None)


class Harness:
    def __init__(self) -> None:
        self.calls = Handlers()
        registry = {
            18: spec_from_module(api_versions),
            LIST_GROUPS: HandlerSpec(LIST_GROUPS, "ListGroups", 0, 5, self.calls.list_groups, "ListGroupsRequest",
                                     "ListGroupsResponse", Handlers.list_groups_error),
            METADATA: HandlerSpec(METADATA, "Metadata", 0, 12, self.calls.metadata, "MetadataRequest",
                                  "MetadataResponse", None, self.calls.metadata_large),
            LIST_OFFSETS: HandlerSpec(LIST_OFFSETS, "ListOffsets", 1, 8, self.calls.list_offsets,
                                      "ListOffsetsRequest", "ListOffsetsResponse", None),
        }
        self.loop = new_event_loop("asyncio")
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-handler-loop", daemon=True)
        self.calls.loop_thread = self.thread
        self.thread.start()
        self.channel = RequestChannel(self.loop, 100, self._process)
        self.dispatcher = Dispatcher(bind_handlers(registry, ApiVersionsParts()), self.channel)  # type: ignore[arg-type]
        self.server = SocketServer(self.loop, self.channel, [Endpoint("PLAINTEXT", "127.0.0.1", 0)],
                                   num_network_threads=1, max_request_size=16 << 20, idle_ms=600_000,
                                   loop_kind="asyncio")
        self.run(self.server.start())
        self.port = self.server.bound_ports["PLAINTEXT"]

    def _process(self, conn: Any, slot: Any, frame: bytes) -> None:
        self.dispatcher.process(conn, slot, frame)

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def client(self) -> WireClient:
        return WireClient("127.0.0.1", self.port)

    def close(self) -> None:
        async def stop() -> None:
            self.server.stop_accepting()
            await self.server.close_all()

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


def list_groups(tag: str) -> dict:
    return {"states_filter": [tag], "types_filter": []}


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request frame with a v1 header (null client id) and ``body`` as is."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, -1) + body
    return struct.pack(">i", len(payload)) + payload


def test_sync_handler_answers_with_its_correlation_id(harness: Harness) -> None:
    with harness.client() as c:
        for version in (0, 4):  # classic and flexible response headers
            resp = c.request(LIST_GROUPS, version, list_groups("sync") if version >= 4 else {})
            assert resp["error_code"] == 0


def test_async_handler_result_is_awaited_and_others_keep_flowing(harness: Harness) -> None:
    with harness.client() as slow, harness.client() as fast:
        corr, data = slow.encode_request(LIST_GROUPS, 4, list_groups("async:0.5"))
        slow.send_raw(data)
        # The other connection is answered while the first handler waits.
        assert fast.request(LIST_GROUPS, 4, list_groups("sync"))["groups"][0]["group_id"] == "sync"
        assert slow.read_response(LIST_GROUPS, 4, corr)["groups"][0]["group_id"] == "async:0.5"


def test_a_later_answer_is_built_after_its_future_completes_without_a_task(harness: Harness) -> None:
    # Issue 31 item 3: a long-polled Fetch and an acks=all Produce answered through a coroutine in
    # an asyncio task each (three per replication round); a Later answer is its future's done
    # callback. The answer is built on a turn of its own, never inside the code that completed
    # the future (the append that woke a fetch), in request order, and a KafkaApiError there
    # answers its code.
    created = []

    def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop, **kwargs)

    harness.loop.call_soon_threadsafe(harness.loop.set_task_factory, counting_factory)
    with harness.client() as c:
        assert c.request(LIST_GROUPS, 4, list_groups("sync"))["error_code"] == 0  # the factory is in place
        created.clear()
        sent = []
        for tag in ("later:0.3", "sync", "later:0.1", "later-not-controller"):
            corr, data = c.encode_request(LIST_GROUPS, 4, list_groups(tag))
            c.send_raw(data)
            sent.append((corr, tag))
        answers = [c.read_response(LIST_GROUPS, 4, corr) for corr, _ in sent]
        tasks_for_later = list(created)
        assert c.request(LIST_GROUPS, 4, list_groups("async:0.05"))["error_code"] == 0
        assert len(created) == 1  # the counter sees a coroutine's task
    assert [a["groups"][0]["group_id"] if a["groups"] else a["error_code"] for a in answers] == [
        "later:0.3", "sync", "later:0.1", ErrorCode.NOT_CONTROLLER]
    assert sorted(harness.calls.finished) == [("later-not-controller", False), ("later:0.1", False),
                                              ("later:0.3", False)]
    assert tasks_for_later == [] and not harness.dispatcher.tasks


def test_responses_leave_in_request_order_on_one_connection(harness: Harness) -> None:
    with harness.client() as c:
        sent = []
        for tag in ("async:0.3", "sync", "none", "async:0.1", "sync"):
            corr, data = c.encode_request(LIST_GROUPS, 4, list_groups(tag))
            c.send_raw(data)
            sent.append((corr, tag))
        # "none" (like Produce acks=0) is answered with nothing; the rest in the order sent, although
        # the later ones finished first.
        for corr, tag in sent:
            if tag != "none":
                assert c.read_response(LIST_GROUPS, 4, corr)["groups"][0]["group_id"] == tag


@pytest.mark.parametrize("tag", ["raise", "async-raise"])
def test_handler_exception_answers_unknown_server_error_where_the_api_allows(
        harness: Harness, tag: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="odradek.broker.api.dispatcher"), harness.client() as c:
        resp = c.request(LIST_GROUPS, 4, list_groups(tag))
        assert resp["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR and resp["groups"] == []
        assert c.request(LIST_GROUPS, 4, list_groups("sync"))["error_code"] == 0  # connection still serves
    # One ERROR line naming the API, the code the client got and the traceback: what a log search
    # (and the fault suite's check of the brokers' logs) finds.
    (record,) = [r for r in caplog.records if r.name == "odradek.broker.api.dispatcher"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == "ListGroups v4 handler failed (UNKNOWN_SERVER_ERROR)"
    assert record.exc_info is not None and str(record.exc_info[1]) == "handler bug"


@pytest.mark.parametrize("tag", ["not-controller", "async-not-controller"])
def test_kafka_api_error_answers_its_code(harness: Harness, tag: str) -> None:
    """A controller that lost its lease raises NOT_CONTROLLER: the answer carries it (a forwarding
    broker retries elsewhere on it), not UNKNOWN_SERVER_ERROR."""
    with harness.client() as c:
        resp = c.request(LIST_GROUPS, 4, list_groups(tag))
        assert resp["error_code"] == ErrorCode.NOT_CONTROLLER and resp["groups"] == []


def test_handler_exception_without_an_error_shape_closes_the_connection(harness: Harness) -> None:
    def boom(request: Any) -> dict:
        raise RuntimeError("handler bug")

    spec = harness.dispatcher.handlers[LIST_OFFSETS]
    harness.dispatcher.handlers[LIST_OFFSETS] = HandlerSpec(LIST_OFFSETS, spec.name, spec.min_version,
                                                            spec.max_version, boom, spec.request_schema,
                                                            spec.response_schema, None)
    with harness.client() as c:
        corr, data = c.encode_request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": []})
        c.send_raw(data)
        assert c.is_closed_by_peer()


@pytest.mark.parametrize("frame", [
    raw_frame(9999, 0, 1),  # unknown api key
    raw_frame(LIST_GROUPS, 99, 1),  # unsupported version of anything but ApiVersions
    raw_frame(LIST_OFFSETS, 0, 1),  # below the served range
    struct.pack(">i", 3) + b"\x00\x10\x00",  # too short for a request header
], ids=["unknown-key", "version-too-new", "version-too-old", "short-header"])
def test_requests_we_cannot_answer_close_the_connection(harness: Harness, frame: bytes) -> None:
    with harness.client() as c:
        c.send_raw(frame)
        assert c.is_closed_by_peer()


def test_unsupported_api_versions_version_gets_a_v0_error_with_the_list(harness: Harness) -> None:
    with harness.client() as c:
        c.send_raw(raw_frame(18, 99, 42, b"\x00\x00garbage of a future version"))
        frame = c.recv_frame()
        assert struct.unpack_from(">i", frame)[0] == 42
        body, end = codec("ApiVersionsResponse", 0).decode(frame, 4)  # header v0, body v0
        assert end == len(frame) and body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]} == {
            18: api_versions.VERSIONS, LIST_GROUPS: (0, 5), METADATA: (0, 12), LIST_OFFSETS: (1, 8)}
        # The client retries with a version we serve, on the same connection.
        assert c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == 0


def test_malformed_body_closes_only_that_connection(harness: Harness) -> None:
    with harness.client() as bad, harness.client() as good:
        # ListGroups v4 (flexible): header v2 (its empty tag buffer), then a states_filter array of
        # four strings that the frame ends before.
        bad.send_raw(raw_frame(LIST_GROUPS, 4, 1, b"\x00\x05"))
        assert bad.is_closed_by_peer()
        assert good.request(LIST_GROUPS, 4, list_groups("sync"))["error_code"] == 0


def test_large_frame_goes_to_handle_large(harness: Harness) -> None:
    topics = [{"topic_id": uuid.UUID(int=0), "name": f"topic-{i:06d}"} for i in range(25_000)]
    body = {"topics": topics, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with harness.client() as c:
        corr, data = c.encode_request(METADATA, 12, body)
        assert len(data) > LARGE_REQUEST_BYTES
        c.send_raw(data)
        assert c.read_response(METADATA, 12, corr)["topics"] == []
        assert harness.calls.seen_large == [25_000]
    # A small frame of the same API goes to ``handle`` (which raises here, and Metadata has no error
    # shape in this registry: the connection closes).
    with harness.client() as c:
        c.send_raw(c.encode_request(METADATA, 12, {**body, "topics": topics[:10]})[1])
        assert c.is_closed_by_peer() and harness.calls.seen_large == [25_000]


def test_large_frame_of_an_off_loop_api_is_decoded_off_the_loop(harness: Harness) -> None:
    partitions = [{"partition_index": i, "current_leader_epoch": -1, "timestamp": -1} for i in range(20_000)]
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": partitions}]}
    with harness.client() as c, harness.client() as other:
        corr, data = c.encode_request(LIST_OFFSETS, 7, body)
        assert len(data) > LARGE_REQUEST_BYTES
        c.send_raw(data)
        resp = c.read_response(LIST_OFFSETS, 7, corr)
        assert [p["offset"] for p in resp["topics"][0]["partitions"]] == [7, 7, 7]
        # The handler itself runs on the handler loop, with the short GIL switch interval while
        # the large request is in progress; afterwards the interval is restored.
        count, on_loop, interval = harness.calls.off_loop[0]
        assert count == 20_000 and on_loop and interval == pytest.approx(OFF_LOOP_SWITCH_INTERVAL_S)
        assert sys.getswitchinterval() > OFF_LOOP_SWITCH_INTERVAL_S
        assert other.request(LIST_GROUPS, 4, list_groups("sync"))["error_code"] == 0


def test_close_during_an_async_handler_drops_the_answer_quietly(harness: Harness) -> None:
    c = harness.client()
    _, data = c.encode_request(LIST_GROUPS, 4, list_groups("async:0.2"))
    c.send_raw(data)
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    # The dispatcher finishes the task and finds the connection gone; the server keeps serving.
    with harness.client() as again:
        assert again.request(LIST_GROUPS, 4, list_groups("async:0.3"))["error_code"] == 0
    assert not harness.dispatcher.tasks



def test_request_version_record_is_a_dispatcher_step_not_a_replaced_method(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ODRADEK_REQUEST_VERSION_RECORD set (the suite's API coverage), each (api key, version)
    a handler exists for is written once, before it is handled; frames of unknown keys or of versions
    above the handler's are not. The record is the dispatcher's own step, chosen when it is built:
    ``process`` stays the class's method (it used to be replaced on the instance)."""
    record = tmp_path / "versions"
    monkeypatch.setenv("ODRADEK_REQUEST_VERSION_RECORD", str(record))
    h = Harness()
    try:
        assert "process" not in vars(h.dispatcher)
        assert h.channel.process == h.dispatcher.record_then_process
        for frame in (raw_frame(9999, 0, 1), raw_frame(LIST_GROUPS, 99, 1)):
            with h.client() as c:
                c.send_raw(frame)
                assert c.is_closed_by_peer()
        with h.client() as c:
            for version in (4, 4, 0):
                assert c.request(LIST_GROUPS, version, list_groups("sync") if version >= 4 else {})["error_code"] == 0
    finally:
        h.close()
    assert record.read_text() == "16 4\n16 0\n"


def test_without_the_record_the_channel_calls_process_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ODRADEK_REQUEST_VERSION_RECORD", raising=False)  # set by the suite's coverage runs
    h = Harness()
    try:
        assert h.dispatcher.version_record is None
        assert h.channel.process == h.dispatcher.process
    finally:
        h.close()
