"""FindCoordinator (api key 10): which broker coordinates a group.

Versions 0-6.
- v1: key_type (0 group, 1 transaction), error_message, throttle_time_ms.
- v2: same as v1.
- v3: flexible.
- v4: batched: coordinator_keys in, coordinators[] out (KIP-699).
- v5: same as v4 (may return TRANSACTION_ABORTABLE).
- v6: key type 2 (share, KIP-932): the share coordinator of key "groupId:topicId:partition" (the
  topic id in Kafka's base64 form), the leader of ``__share_group_state`` partition
  ``abs(hashCode(key)) % share.coordinator.state.topic.num.partitions``. Brokers send it (the
  persister); Kafka requires CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED), and
  answers INVALID_REQUEST for a key not of that form, or below v6. The first lookup creates
  ``__share_group_state`` (share.coordinator.state.topic.*) and answers COORDINATOR_NOT_AVAILABLE.

Group keys: the coordinator is the leader of ``__consumer_offsets`` partition
``abs(hashCode(group)) % offsets.topic.num.partitions``. As in Kafka, the first lookup creates
``__consumer_offsets`` (compacted, ``offsets.topic.num.partitions`` partitions) and answers
COORDINATOR_NOT_AVAILABLE; the client retries. The replication factor is
``offsets.topic.replication.factor`` (Kafka's default 3). In a cluster, as Kafka, the topic is not
created while fewer brokers are live than that (COORDINATOR_NOT_AVAILABLE until they are, and one
WARN line with Kafka's "Number of alive brokers ... does not meet the required replication factor"
and the remedy), so it never ends up less replicated than configured; a single node caps it at its one broker, so the
default of 3 works there (most single-node setups override it).
Transaction keys: the leader of ``__transaction_state`` partition
``abs(hashCode(transactional.id)) % transaction.state.log.num.partitions``; the first lookup
creates the topic the same way (compacted, ``transaction.state.log.*``, the same replication-factor
rule with ``transaction.state.log.replication.factor``, min.insync.replicas at most the replication
factor). Other key types get INVALID_REQUEST. A creation the controller cannot take (none elected
while etcd is away: the controller client's REQUEST_TIMED_OUT) answers COORDINATOR_NOT_AVAILABLE
too, as Kafka's auto topic creation does, and the next lookup tries again.

While the cluster's metadata format level is below the coordinators' migration (a rolling upgrade
from 0.1.0 not finished), both key types map by 0.1.0's rule, ``(hashCode & 0x7fffffff) % partitions``,
so old and new brokers name the same coordinator (broker/coordinator/partition_rule.py).

The coordinator is the partition's leader in the metadata; a leader that does not own the
partition yet (its log is still being made) answers COORDINATOR_NOT_AVAILABLE rather than naming
itself and then answering NOT_COORDINATOR.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.txn_common import txn_coordinator_of
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.coordinator.partition_rule import coordinator_partition
from odradek.broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator, coordinator_of
from odradek.broker.security import authz
from odradek.broker.share.share_coordinator import ShareCoordinator, parse_share_key
from odradek.broker.share.share_state_store import STATE_TOPIC
from odradek.broker.txn.coordinator import TransactionCoordinator
from odradek.broker.txn.shard import TXN_TOPIC
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.protocol.messages import Coordinator, FindCoordinatorRequest, FindCoordinatorResponse

API_KEY = 10
NAME = "FindCoordinator"
VERSIONS = (0, 6)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    metadata: BrokerMetadata
    controller_client: ControllerClient
    group_coordinator: GroupCoordinator
    txn_coordinator: TransactionCoordinator
    share_coordinator: ShareCoordinator
    authz: AuthHelper


GROUP = 0
TRANSACTION = 1
SHARE = 2

log = logging.getLogger(__name__)

# (topic, replication factor, live brokers) already logged as too few, so a retrying client adds no lines.
_reported_short: set[tuple[str, int, int]] = set()


async def _ensure_topic(services: Services, request: ApiRequest[FindCoordinatorRequest], topic: str) -> bool:
    """True if the internal topic exists; else start creating it and return False."""
    metadata = services.metadata
    if topic in metadata.image.topics:
        return True
    cfg = services.config
    live = len(metadata.image.live_broker_ids())
    if topic == OFFSETS_TOPIC:
        key = "offsets.topic.replication.factor"
        partitions = cfg["offsets.topic.num.partitions"]
        what, waiting = "the offsets topic", "consumer groups"
    else:
        key = "transaction.state.log.replication.factor"
        partitions = cfg["transaction.state.log.num.partitions"]
        what, waiting = "the transactions state topic", "transactional producers"
    rf = int(cfg[key])
    if cfg["metadata.store"] == "local":  # one node
        rf = min(rf, max(live, 1))
    elif live < rf:
        if (topic, rf, live) not in _reported_short:
            _reported_short.add((topic, rf, live))
            # A WARN: the clients only retry COORDINATOR_NOT_AVAILABLE, silently, so this line is the
            # one clue why a consumer group hangs. Kafka's words, then what to do.
            log.warning("Number of alive brokers '%d' does not meet the required replication factor '%d' for %s "
                        "(configured via '%s'). This error can be ignored if the cluster is starting up and not "
                        "all brokers are up yet. Until then %s wait and %s is not created: start more brokers, "
                        "or set %s to at most %d on every broker.", live, rf, what, key, waiting, topic, key,
                        max(live, 1))
        return False
    if topic == OFFSETS_TOPIC:
        configs = {"cleanup.policy": "compact", "compression.type": "producer",
                   "segment.bytes": str(cfg["offsets.topic.segment.bytes"])}
    else:
        configs = {"cleanup.policy": "compact", "compression.type": "uncompressed",
                   "unclean.leader.election.enable": "false",
                   "min.insync.replicas": str(min(cfg["transaction.state.log.min.isr"], rf)),
                   "segment.bytes": str(cfg["transaction.state.log.segment.bytes"])}
    try:
        result = await services.controller_client.create_internal_topic(topic, partitions, rf, configs)
    except KafkaApiError as exc:  # no controller answered: COORDINATOR_NOT_AVAILABLE, the client retries
        log.warning("could not create %s: %s", topic, exc.code.name)
        return False
    if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        log.warning("could not create %s: %s %s", topic, result.error_code, result.error_message)
    return False


async def _lookup(services: Services, request: ApiRequest[FindCoordinatorRequest], key_type: int,
                  key: str) -> Coordinator:
    entry: Coordinator = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.NONE,
                          "error_message": None}

    def error(code: ErrorCode) -> Coordinator:
        entry["error_code"] = code
        entry["error_message"] = code.name
        return entry

    if key_type == SHARE:
        return await _share_lookup(services, request, key, entry, error)
    coordinator: GroupCoordinator | TransactionCoordinator | None
    # Kafka: DESCRIBE on the group / transactional id.
    if key_type == GROUP and not services.authz.allowed(request, authz.DESCRIBE, authz.GROUP, key):
        return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if key_type == TRANSACTION and key and not services.authz.allowed(request, authz.DESCRIBE, authz.TRANSACTIONAL_ID, key):
        return error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if key_type == GROUP:
        topic = OFFSETS_TOPIC
        coordinator = coordinator_of(services.group_coordinator)
    elif key_type == TRANSACTION:
        topic = TXN_TOPIC
        coordinator = txn_coordinator_of(services.txn_coordinator)
        if not key:
            return error(ErrorCode.INVALID_REQUEST)
    else:
        return error(ErrorCode.INVALID_REQUEST)
    if coordinator is None:
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not await _ensure_topic(services, request, topic):
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    image = services.metadata.image
    partition = coordinator_partition(image, key, len(image.topics[topic].partitions))
    return _leader_entry(services, request, topic, partition,
                         coordinator.node_id if coordinator.runtime.state(partition) is None else None, entry, error)


async def _share_lookup(services: Services, request: ApiRequest[FindCoordinatorRequest], key: str,
                        entry: Coordinator, error: Callable[[ErrorCode], Coordinator]) -> Coordinator:
    """Key type 2: the leader of the key's ``__share_group_state`` partition (Kafka's KafkaApis)."""
    if request.api_version < 6 or parse_share_key(key) is None:
        return error(ErrorCode.INVALID_REQUEST)
    if not services.authz.cluster_allowed(request, authz.CLUSTER_ACTION):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    partition = services.share_coordinator.coordinator_partition(key)
    if partition is None:  # __share_group_state is being created
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    runtime = services.share_coordinator.store.runtime
    return _leader_entry(services, request, STATE_TOPIC, partition,
                         services.share_coordinator.store.node_id if runtime.state(partition) is None else None,
                         entry, error)


def _leader_entry(services: Services, request: ApiRequest[FindCoordinatorRequest], topic: str, partition: int,
                  not_loaded_here: int | None, entry: Coordinator,
                  error: Callable[[ErrorCode], Coordinator]) -> Coordinator:
    """The entry naming the leader of ``topic``-``partition``; ``not_loaded_here``: this broker's id
    when its coordinator does not own the partition yet (then it does not name itself)."""
    image = services.metadata.image
    state = image.partition(topic, partition)
    node = image.brokers.get(state.leader) if state is not None else None
    if node is None or node.fenced:
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if node.node_id == not_loaded_here:
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    # The coordinator's endpoint on the listener this request came in on (as Metadata answers; a SASL
    # client must not be sent to the PLAINTEXT inter-broker listener). Kafka: COORDINATOR_NOT_AVAILABLE
    # when the node has no such listener.
    endpoint = node.endpoint_for(request.listener)
    if endpoint is None:
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    entry.update({"node_id": node.node_id, "host": endpoint[0], "port": endpoint[1], "error_code": ErrorCode.NONE,
                  "error_message": None})
    return entry


async def handle(services: Services, request: ApiRequest[FindCoordinatorRequest]) -> FindCoordinatorResponse:
    body = request.body
    if request.api_version >= 4:
        return {"throttle_time_ms": 0,
                "coordinators": [await _lookup(services, request, body["key_type"], k) for k in body["coordinator_keys"]]}
    found = await _lookup(services, request, body["key_type"], body["key"])
    return {"throttle_time_ms": 0, "error_code": found["error_code"], "error_message": found["error_message"],
            "node_id": found["node_id"], "host": found["host"], "port": found["port"]}


def error_response(request: ApiRequest[FindCoordinatorRequest], code: int) -> FindCoordinatorResponse:
    if request.api_version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [
            {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": None}
            for k in request.body["coordinator_keys"]]}
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "node_id": -1, "host": "", "port": -1}
