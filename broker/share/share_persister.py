"""``SharePersister``: where a share-partition leader reads and writes its durable state - the
share coordinator that leads the state's ``__share_group_state`` partition, here or on another
broker (Kafka 4.4's DefaultStatePersister and PersisterStateManager).

The SharePartitionManager sees the same four calls as on ``ShareStateStore`` (``where``,
``read``, ``write``, ``delete``). Where this broker leads the state's partition they go to the
local store, as before. Where another broker leads it (the store answers ELSEWHERE) they become
the share coordinator's APIs over the inter-broker client (``NodeClient``), sent to the
partition's leader in the metadata image - the node FindCoordinator key type 2 would name:

- ``where`` starts a ReadShareGroupState (with the data partition's leader epoch, which the
  coordinator records: the old leader's writes are fenced from then on) and answers WAIT until it
  is back, then READY; ``read`` hands over its state once (None: the share-partition was never
  initialized, INVALID_REQUEST from the coordinator). So a share-partition acquires nothing
  before its state is read, as Kafka's SharePartition.maybeInitialize. A read the coordinator
  refuses (FENCED_LEADER_EPOCH: a newer leader read it) makes ``read`` raise Kafka's error for
  the share-partition's fetches (NOT_LEADER_OR_FOLLOWER), for a few seconds, then it is read again.
- ``write`` queues the state and answers a future, settled when the coordinator took this state or
  a later one (or refused it); one sender per share-partition sends the latest queued state, in
  order: InitializeShareGroupState first when the coordinator has none (Kafka's group coordinator
  initializes; here the first leader does, with state epoch 0), then
  WriteShareGroupState v1 (the whole in-flight window from the start offset and its
  delivery-complete count, so a later write supersedes an earlier one that was never sent).
- ``delete`` sends DeleteShareGroupState.
- ``summary`` (DescribeShareGroupOffsets) asks ReadShareGroupStateSummary v1 and waits for the answer.

NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, an unreachable node or
no leader are retried with the metadata of the time after a backoff (Kafka's persister: 100 ms
doubling to 5 s; it gives up after a few tries, Odradek keeps trying while the state is wanted:
a share-partition must not start from nothing because its coordinator was moving). Other errors
are final: a read's is the fetches' error (above), a write's is logged and is its future's
(FENCED_LEADER_EPOCH: a newer leader owns the share-partition).

When the state's partition comes to this broker while a remote operation retries, it stops: a
queued write goes to the local store if no write came after it (else it is simply superseded), a
delete too, and a read is dropped (the local store answers the next look).

Owned by the handler loop; no locks.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from odradek.broker.network.inter_broker_client import NodeClient, NodeClients, NodeUnavailableError
from odradek.broker.share.share_coordinator import MESSAGES, WRITE_UNINITIALIZED
from odradek.broker.share.share_state_records import ShareState, StateKey
from odradek.broker.share.share_state_store import STATE_TOPIC, ShareStateStore, Where
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata

log = logging.getLogger(__name__)

INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY = 83, 84, 85, 86, 87
RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT})
BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
# A read's answer not taken within this long is read again (the share-partition it was for may
# have gone and come back meanwhile: the state could have moved on).
READ_ANSWER_TTL_S = 5.0


class StateSummary(NamedTuple):
    """A share-partition's state as ReadShareGroupStateSummary v1 gives it."""

    start_offset: int  # -1: never initialized
    leader_epoch: int
    delivery_complete_count: int  # -1: unknown


NO_STATE = StateSummary(-1, 0, -1)


class ReadRefused(NamedTuple):
    """A ReadShareGroupState the share coordinator refused, as the share-partition's fetches
    answer it (Kafka's SharePartition.fetchPersisterError)."""

    code: ErrorCode
    message: str | None


# Kafka's SharePartition.fetchPersisterError: what a refused read makes of the share-partition's
# fetches. A leader fenced by a newer leader's epoch answers NOT_LEADER_OR_FOLLOWER (the client looks
# for the leader again) - never a fresh start, which would skip or redeliver what the state holds.
READ_REFUSALS = {
    ErrorCode.FENCED_LEADER_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_STATE_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.GROUP_ID_NOT_FOUND: ErrorCode.GROUP_ID_NOT_FOUND,
}


def _retrieved(future: asyncio.Future[None]) -> None:
    """A write's refusal is logged where it happens; nobody need await its future."""
    if not future.cancelled():
        future.exception()


def write_outcome(written: asyncio.Future[None]) -> KafkaApiError | None:
    """A finished write's outcome: None when durable, else its refusal - a cancelled write or an
    error other than a KafkaApiError as UNKNOWN_SERVER_ERROR."""
    if written.cancelled():
        return KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "the share state write was cancelled")
    exc = written.exception()
    if exc is None or isinstance(exc, KafkaApiError):
        return exc
    return KafkaApiError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))


class Retry(Exception):
    """The coordinator could not be reached or answered a retriable error."""


class Abandoned(Exception):
    """A remote read no longer needed: the state's partition is led here now."""


class SharePersister:
    def __init__(self, store: ShareStateStore, metadata: BrokerMetadata, timeout_s: float = 30.0) -> None:
        self.store = store
        self.metadata = metadata
        self.node_id = store.node_id
        self.timeout_s = timeout_s
        self._clients = NodeClients(f"broker-{self.node_id}-share-persister")
        self._reads: dict[StateKey, asyncio.Task[ShareState | ReadRefused | None]] = {}
        self._answers: dict[StateKey, tuple[float, ShareState | ReadRefused | None]] = {}
        self._pending: dict[StateKey, ShareState] = {}  # the latest state not yet sent, per share-partition
        # Writes asked per share-partition (local or remote): a queued remote write older than the
        # latest is superseded, and one the local store can now take goes there only if it is the latest.
        self._writes: dict[StateKey, int] = {}
        self._senders: dict[StateKey, asyncio.Task[None]] = {}
        self._state_epochs: dict[StateKey, int] = {}  # known initialized at the coordinator, with this epoch
        # The remote writes not yet answered, oldest first: (write number, its future).
        self._waiters: dict[StateKey, list[tuple[int, asyncio.Future[None]]]] = {}
        self._closed = False

    # ------------------------------------------------------------------------------------------
    # what the SharePartitionManager calls

    def where(self, key: StateKey) -> Where:
        where = self.store.where(key)
        if where is not Where.ELSEWHERE:
            return where
        answer = self._answers.get(key)
        if answer is not None:
            if time.monotonic() - answer[0] < READ_ANSWER_TTL_S:
                return Where.READY
            del self._answers[key]
        if key not in self._reads and not self._closed:
            task = asyncio.get_running_loop().create_task(self._read(key))
            self._reads[key] = task
            task.add_done_callback(lambda t: self._read_done(key, t))
        return Where.WAIT

    def read(self, key: StateKey) -> ShareState | None:
        """The state a finished read brought (once), None for a share-partition never initialized;
        KafkaApiError for a read the coordinator refused - answered to every fetch until the answer
        is READ_ANSWER_TTL_S old, then read again."""
        answer = self._answers.get(key)
        if answer is not None:
            if isinstance(answer[1], ReadRefused):
                raise KafkaApiError(answer[1].code, answer[1].message)
            del self._answers[key]
            return answer[1]
        state = self.store.read(key)
        if state is not None:
            # Read here, with no request: the share coordinator's own checks (Kafka's
            # readStateAndMaybeUpdateLeaderEpoch): a newer leader's epoch fences this one, an older
            # one is replaced by this leader's.
            leader_epoch = self._leader_epoch(key)
            if state.leader_epoch > leader_epoch:
                log.warning("could not read the share state of %s %s-%s at leader epoch %s: it holds leader "
                            "epoch %s (FENCED_LEADER_EPOCH)", key[0], key[1], key[2], leader_epoch,
                            state.leader_epoch)
                raise KafkaApiError(READ_REFUSALS[ErrorCode.FENCED_LEADER_EPOCH], MESSAGES[ErrorCode.FENCED_LEADER_EPOCH])
            if state.leader_epoch < leader_epoch:
                self.store.record_leader_epoch(key, leader_epoch)
        return state

    def write(self, key: StateKey, state: ShareState) -> asyncio.Future[None] | None:
        """Write ``state``; the future answers once the share coordinator holds it (or a later
        write), or its refusal as a KafkaApiError. None when nothing was written (the state's
        partition is loading here)."""
        seq = self._writes[key] = self._writes.get(key, 0) + 1
        where = self.store.where(key)
        if where is not Where.ELSEWHERE:
            self._pending.pop(key, None)
            return self._write_here(key, seq, state)  # (settling the earlier remote writes it supersedes)
        self._pending[key] = state
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter.add_done_callback(_retrieved)
        self._waiters.setdefault(key, []).append((seq, waiter))
        if self._closed:
            self._settle(key, seq, KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the broker is shutting down"))
        elif key not in self._senders:
            task = asyncio.get_running_loop().create_task(self._send_writes(key))
            self._senders[key] = task
            task.add_done_callback(lambda _t: self._senders.pop(key, None))
        return waiter

    def delete(self, key: StateKey) -> None:
        self._pending.pop(key, None)
        self._settle(key, self._writes.get(key, 0), KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                                  "the share-partition's state was deleted"))
        self._answers.pop(key, None)
        if self.store.where(key) is not Where.ELSEWHERE:
            self.store.delete(key)
            return
        self._state_epochs.pop(key, None)
        if not self._closed:
            asyncio.get_running_loop().create_task(self._delete(key))

    async def summary(self, key: StateKey, timeout_s: float = 5.0) -> StateSummary | None:
        """What the share coordinator keeps for ``key`` - ReadShareGroupStateSummary v1 where another
        broker leads the state's partition; start offset -1 when there is no state (Kafka's answer for
        a share-partition never initialized); None when the coordinator did not answer within
        ``timeout_s`` (it is moving or loading)."""
        where = self.store.where(key)
        if where is Where.READY:
            state = self.store.read(key)
            return (StateSummary(state.start_offset, state.leader_epoch, state.delivery_complete_count)
                    if state is not None else NO_STATE)
        if where is not Where.ELSEWHERE:
            return NO_STATE if where is Where.ABSENT else None
        try:
            part = await asyncio.wait_for(self._retrying(key, READ_SUMMARY, 1, {"leader_epoch": 0}, "summary"),
                                          timeout_s)
        except TimeoutError:
            return None
        if part is None or part["error_code"] != ErrorCode.NONE:
            return None
        return StateSummary(int(part["start_offset"]), int(part["leader_epoch"]), int(part["delivery_complete_count"]))

    def idle(self, key: StateKey) -> bool:
        """No write or delete of ``key`` waits to be sent to another broker's share coordinator
        (so what the coordinator holds is all the share-partition's leader wrote)."""
        return key not in self._pending and key not in self._senders

    async def reinitialize(self, key: StateKey, start_offset: int, timeout_s: float = 10.0) -> tuple[int, str | None]:
        """AlterShareGroupOffsets at the group coordinator, for a state whose partition another
        broker leads (Kafka's GroupCoordinatorService.alterShareGroupOffsets, then the persister's
        initializeState): the share coordinator's state of ``key`` starts over at ``start_offset``
        with the next state epoch. (error code, message); COORDINATOR_NOT_AVAILABLE when the share
        coordinator did not answer within ``timeout_s``."""
        async def run() -> tuple[int, str | None]:
            summary = await self._retrying(key, READ_SUMMARY, 0, {"leader_epoch": 0}, "summary")
            if summary is None:
                return ErrorCode.NOT_COORDINATOR, None  # the state's partition moved here meanwhile
            # A share-partition never initialized answers an error: its first state epoch is then 0.
            epoch = summary["state_epoch"] + 1 if summary["error_code"] == ErrorCode.NONE else 0
            part = await self._retrying(key, INITIALIZE, 0, {"state_epoch": epoch, "start_offset": start_offset},
                                        "initialize")
            if part is None:
                return ErrorCode.NOT_COORDINATOR, None
            if part["error_code"] == ErrorCode.NONE:
                self._state_epochs[key] = epoch  # (a share-partition led here writes with it from now on)
            return part["error_code"], part["error_message"]
        try:
            return await asyncio.wait_for(run(), timeout_s)
        except TimeoutError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None

    async def close(self) -> None:
        self._closed = True
        for task in [*self._reads.values(), *self._senders.values()]:
            task.cancel()
        for key in list(self._waiters):
            self._settle(key, self._writes.get(key, 0),
                         KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the broker is shutting down"))
        await self._clients.close()

    # ------------------------------------------------------------------------------------------
    # the remote operations

    async def _read(self, key: StateKey) -> ShareState | ReadRefused | None:
        leader_epoch = self._leader_epoch(key)
        part = await self._retrying(key, READ, 0, {"leader_epoch": leader_epoch}, "read")
        if part is None:
            raise Abandoned()  # the state's partition is led here now: the local store answers
        if part["error_code"] != ErrorCode.NONE:
            self._state_epochs.pop(key, None)
            if part["error_code"] == ErrorCode.INVALID_REQUEST:
                return None  # never initialized: this leader initializes it
            log.warning("could not read the share state of %s %s-%s at leader epoch %s: %s %s", key[0], key[1],
                        key[2], leader_epoch, ErrorCode(part["error_code"]).name, part["error_message"])
            code = READ_REFUSALS.get(part["error_code"], ErrorCode.UNKNOWN_SERVER_ERROR)
            return ReadRefused(code, part["error_message"])  # (Kafka keeps the coordinator's message)
        self._state_epochs[key] = part["state_epoch"]
        return ShareState(part["start_offset"], part["state_epoch"], leader_epoch,
                          batches=[(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
                                   for b in part["state_batches"]])

    def _read_done(self, key: StateKey, task: asyncio.Task[ShareState | ReadRefused | None]) -> None:
        if self._reads.get(key) is task:
            del self._reads[key]
        if not task.cancelled() and task.exception() is None:
            self._answers[key] = (time.monotonic(), task.result())

    async def _send_writes(self, key: StateKey) -> None:
        while (state := self._pending.pop(key, None)) is not None:
            seq = self._writes.get(key, 0)
            if key not in self._state_epochs:
                part = await self._retrying(key, INITIALIZE, 0, {
                    "state_epoch": state.state_epoch, "start_offset": state.start_offset}, "initialize")
                if part is None:
                    self._write_locally(key, state, seq)
                    continue
                if not self._ok(key, part, "initialize"):
                    self._settle(key, seq, KafkaApiError(part["error_code"], part["error_message"]))
                    continue
                self._state_epochs[key] = state.state_epoch
            part = await self._retrying(key, WRITE, 1, {
                "state_epoch": self._state_epochs.get(key, 0), "leader_epoch": state.leader_epoch,
                "start_offset": state.start_offset, "delivery_complete_count": state.delivery_complete_count,
                "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": c}
                                  for f, la, s, c in state.batches]}, "write",
                superseded=functools.partial(self._superseded, key, seq))
            if part is None:
                self._write_locally(key, state, seq)
                continue
            if part["error_message"] == WRITE_UNINITIALIZED and key in self._state_epochs:
                # The coordinator has no state (deleted meanwhile): initialize it again.
                self._state_epochs.pop(key, None)
                self._pending.setdefault(key, state)
                continue
            if self._ok(key, part, "write"):
                self._settle(key, seq, None)
            else:
                self._settle(key, seq, KafkaApiError(part["error_code"], part["error_message"]))

    def _superseded(self, key: StateKey, seq: int) -> bool:
        return self._writes.get(key, 0) != seq

    def _write_locally(self, key: StateKey, state: ShareState, seq: int) -> None:
        """A queued write the remote coordinator did not take: superseded (nothing to do), or the
        state's partition is led here now - the local store takes it if it is still the latest."""
        if self._writes.get(key, 0) == seq and key not in self._pending \
                and self.store.where(key) is not Where.ELSEWHERE:
            self._write_here(key, seq, state)

    def _write_here(self, key: StateKey, seq: int, state: ShareState) -> asyncio.Future[None] | None:
        """Write number ``seq`` to the local store; the writes of ``key`` up to it answer as it
        does (COORDINATOR_LOAD_IN_PROGRESS when the store could not take it: None)."""
        written = self.store.write(key, state)
        if written is None:
            self._settle(key, seq, KafkaApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                                 "the share state's partition is loading here"))
        elif key in self._waiters:
            written.add_done_callback(lambda f: self._settle(key, seq, write_outcome(f)))
        return written

    def _settle(self, key: StateKey, seq: int, error: KafkaApiError | None) -> None:
        """The writes of ``key`` up to ``seq`` are done: durable (``error`` None) or refused."""
        waiters = self._waiters.get(key)
        if not waiters:
            return
        done = [w for s, w in waiters if s <= seq]
        left = [(s, w) for s, w in waiters if s > seq]
        if left:
            self._waiters[key] = left
        else:
            del self._waiters[key]
        for waiter in done:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    async def _delete(self, key: StateKey) -> None:
        part = await self._retrying(key, DELETE, 0, {}, "delete")
        if part is None:
            self.store.delete(key)  # led here now
        else:
            self._ok(key, part, "delete")

    def _ok(self, key: StateKey, part: dict[str, Any], what: str) -> bool:
        if part["error_code"] == ErrorCode.NONE:
            return True
        log.warning("could not %s the share state of %s %s-%s: %s %s", what, key[0], key[1], key[2],
                    ErrorCode(part["error_code"]).name, part["error_message"])
        return False

    async def _retrying(self, key: StateKey, api: int, version: int, fields: dict[str, Any], what: str,
                        superseded: Any = None) -> Any:
        """The partition's answer of ``api``, retried while the coordinator is away or moving;
        None when ``superseded()`` says a newer request replaces it, or the state's partition is
        now led here (the local store serves it)."""
        backoff = BACKOFF_S
        while True:
            if self.store.where(key) is not Where.ELSEWHERE:
                return None
            try:
                return await self._send(key, api, version, fields)
            except Retry as exc:
                log.debug("retrying the share state %s of %s %s-%s: %s", what, key[0], key[1], key[2], exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
            if superseded is not None and superseded():
                return None

    async def _send(self, key: StateKey, api: int, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        client = self._coordinator(key)
        if client is None:
            raise Retry("no leader of its state partition")
        body = {"group_id": key[0], "topics": [{"topic_id": key[1], "partitions": [{"partition": key[2], **fields}]}]}
        try:
            response = await client.request(api, version, body, self.timeout_s)
        except NodeUnavailableError as exc:
            raise Retry(str(exc)) from None
        results = response["results"]
        if not results or not results[0]["partitions"]:
            raise Retry("an empty answer")
        part: dict[str, Any] = results[0]["partitions"][0]
        if part["error_code"] in RETRIABLE:
            raise Retry(ErrorCode(part["error_code"]).name)
        return part

    def _coordinator(self, key: StateKey) -> NodeClient | None:
        """The connection to the leader of the state's partition (another broker)."""
        p = self.store.state_partition(key)
        image = self.metadata.image
        state = image.partition(STATE_TOPIC, p) if p is not None else None
        if state is None or state.leader < 0 or state.leader == self.node_id:
            return None  # no leader, or this broker is about to load it (the local store then serves)
        reg = image.brokers.get(state.leader)
        if reg is None or reg.fenced:
            return None
        return self._clients.get(state.leader, reg.host, reg.port)

    def _leader_epoch(self, key: StateKey) -> int:
        topic = self.metadata.image.topic_by_id(key[1])
        part = topic.partitions.get(key[2]) if topic is not None else None
        return part.leader_epoch if part is not None else 0

