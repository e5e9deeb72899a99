"""Controller clients for cluster mode: forward a broker's controller calls to the active controller.

Kafka's forwarding (KIP-590): any broker accepts CreateTopics, DeleteTopics, CreatePartitions,
(Incremental)AlterConfigs, AlterClientQuotas, ElectLeaders, UpdateFeatures and the reassignment APIs,
and sends them on to the controller; the client cannot tell which node did the work. Here that seam is the
``ControllerClient`` protocol, so forwarding happens below the handlers:

- ``ForwardingControllerClient`` turns each call into the Kafka request the controller node's own
  handler serves (over ``odradek.broker.network.inter_broker_client.NodeClient``) and decodes the response into the
  same ``odradek.controller.requests`` values the local controller returns, with the same codes and
  messages. When the target is unknown, unreachable, or answers NOT_CONTROLLER (it lost the lease),
  it re-reads the target and retries with exponential backoff until the deadline; then the call
  fails with REQUEST_TIMED_OUT, as Kafka's ForwardingManager answers a forwarded request whose
  controller never answered (``getErrorResponse(new TimeoutException())``).
- ``RoutingControllerClient`` is what a cluster-mode broker installs: it calls the controller in
  this process when that one is active, and forwards to the image's ``controller_id`` otherwise.
  It never forwards to itself: while the image names this node but its controller is not active
  (the lease was just lost, or is being taken), it waits and retries.

Differences from Kafka: Kafka wraps the client's request in an EnvelopeRequest (API 58) so the
controller sees the original principal and request; Odradek authorizes the client on the broker that
received the request and re-sends the decoded call as a plain request from this broker, marked by its client id
(``FORWARDING_CLIENT_ID_PREFIX``) so the controller node's handlers skip the broker-side
preprocessing done here (a BROKER config resource names this node, not the controller's); with an
authorizer the controller node checks CLUSTER_ACTION for such a request (what Kafka checks on an
Envelope), so the brokers' principal must be a super user or hold CLUSTER_ACTION. Broker
registration is not forwarded: in cluster mode brokers register through etcd (``register_broker``
works only where the controller is local).

Ownership: the broker's handler loop (NodeClient is not thread-safe).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from odradek.broker.metadata.controller_client import (
    FORWARDING_CLIENT_ID_PREFIX,
    ControllerClient,
    LocalControllerClient,
)
from odradek.broker.network.inter_broker_client import NodeClient, NodeUnavailableError
from odradek.broker.security import acl_wire
from odradek.controller.acls import AclCreateResult, AclDeleteResult
from odradek.controller.client_quotas import ClientQuotaAlteration, ClientQuotaAlterationResult
from odradek.controller.controller import Controller
from odradek.controller.image import MetadataImage
from odradek.controller.requests import (
    ZERO_UUID,
    AlterableConfig,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionResult,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionResult,
    FeatureUpdate,
    OngoingReassignment,
    ReassignmentResult,
    ReassignmentTarget,
    UpdateFeaturesResult,
)
from odradek.controller.scram_credentials import ScramAlterResult, ScramUpsertion
from odradek.protocol.acl_types import AclBinding, AclBindingFilter
from odradek.protocol.errors import ErrorCode, KafkaApiError

log = logging.getLogger(__name__)

T = TypeVar("T")

# (node id, host, port) of the active controller.
ControllerTarget = tuple[int, str, int]

DEFAULT_TIMEOUT_S = 30.0
INITIAL_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0

# The request versions a forwarding broker sends: the newest each handler serves.
CREATE_TOPICS = (19, 7)
DELETE_TOPICS = (20, 6)
CREATE_PARTITIONS = (37, 3)
ALTER_CONFIGS = (33, 2)
INCREMENTAL_ALTER_CONFIGS = (44, 1)
ALTER_USER_SCRAM_CREDENTIALS = (51, 0)
ELECT_LEADERS = (43, 2)
ALTER_PARTITION_REASSIGNMENTS = (45, 0)
LIST_PARTITION_REASSIGNMENTS = (46, 0)
CREATE_ACLS = (30, 3)
DELETE_ACLS = (31, 3)
ALTER_PARTITION = (56, 3)
ALTER_CLIENT_QUOTAS = (49, 1)
UPDATE_FEATURES = (57, 2)

TOPIC_CONFIG_SOURCE = 1  # DescribeConfigs ConfigSource.TOPIC_CONFIG: a topic's own override


# "This node is not (or no longer) the controller": retry on the current one. A controller that
# found a newer epoch in the metadata log answers STALE_CONTROLLER_EPOCH for the call that found it.
NOT_CONTROLLER_CODES = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.STALE_CONTROLLER_EPOCH})


def _all_items_not_controller(items: Sequence[dict[str, Any]]) -> bool:
    return bool(items) and all(i["error_code"] in NOT_CONTROLLER_CODES for i in items)


def _top_level_not_controller(response: dict[str, Any]) -> bool:
    return response["error_code"] in NOT_CONTROLLER_CODES


class ForwardingControllerClient:
    """``ControllerClient`` that sends every call to the node ``target()`` names."""

    def __init__(
        self,
        target: Callable[[], ControllerTarget | None],
        *,
        client_id: str = FORWARDING_CLIENT_ID_PREFIX,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        initial_backoff_s: float = INITIAL_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        self._target = target
        self._client_id = client_id
        self.timeout_s = timeout_s
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        # One connection, to the current controller; replaced when the controller moves.
        self._client: NodeClient | None = None

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # ----------------------------------------------------------------------------------------
    # The send loop

    async def _client_for(self, host: str, port: int) -> NodeClient:
        client = self._client
        if client is not None and (client.host, client.port) == (host, port):
            return client
        if client is not None:
            await client.close()  # the controller moved; requests still waiting on it fail and retry
        # A connect to a dead node must not eat the whole deadline: cap it, then retry.
        client = self._client = NodeClient(host, port, self._client_id, timeout_s=min(self.timeout_s, 5.0))
        return client

    async def _send(
        self,
        api: tuple[int, int],
        body: dict[str, Any],
        not_controller: Callable[[dict[str, Any]], bool],
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Send ``body`` to the controller and return its response, retrying as the module says."""
        api_key, version = api
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout_s if timeout_s is None else timeout_s)
        backoff = self._initial_backoff_s
        last: str = "no controller is known"
        while True:
            target = self._target()
            if target is not None:
                node_id, host, port = target
                remaining = deadline - loop.time()
                try:
                    client = await self._client_for(host, port)
                    response: dict[str, Any] = await client.request(api_key, version, body,
                                                                    timeout_s=max(remaining, 0.001))
                except NodeUnavailableError as exc:
                    # Also when the connection broke after the request was sent: it may have been
                    # applied, and the retry then answers e.g. TOPIC_ALREADY_EXISTS. Kafka's
                    # forwarding retries on disconnection the same way.
                    last = str(exc)
                else:
                    if not not_controller(response):
                        return response
                    last = f"node {node_id} is no longer the controller"
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("forwarding api %d to the controller timed out: %s", api_key, last)
                raise KafkaApiError(ErrorCode.REQUEST_TIMED_OUT, None)
            await asyncio.sleep(min(backoff, remaining))  # a last attempt at the deadline
            backoff = min(backoff * 2, self._max_backoff_s)

    # ----------------------------------------------------------------------------------------
    # Topics

    async def create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        body = {
            "topics": [
                {"name": t.name, "num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
                 "assignments": [{"partition_index": a.partition_index, "broker_ids": list(a.broker_ids)}
                                 for a in t.assignments],
                 "configs": [{"name": k, "value": v} for k, v in t.configs.items()]}
                for t in topics
            ],
            "timeout_ms": int(self.timeout_s * 1000),
            "validate_only": validate_only,
        }
        response = await self._send(CREATE_TOPICS, body, lambda r: _all_items_not_controller(r["topics"]))
        return [
            CreateTopicResult(
                name=t["name"],
                error_code=ErrorCode(t["error_code"]),
                error_message=t["error_message"],
                topic_id=t["topic_id"],
                num_partitions=t["num_partitions"],
                replication_factor=t["replication_factor"],
                configs={c["name"]: c["value"] for c in t["configs"] or ()
                         if c["config_source"] == TOPIC_CONFIG_SOURCE and c["value"] is not None},
            )
            for t in response["topics"]
        ]

    async def create_internal_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str] | None = None
    ) -> CreateTopicResult:
        # Internal-ness follows the name on the controller (Kafka's Topic.isInternal).
        request = CreatableTopic(name, num_partitions, replication_factor, (), dict(configs or {}))
        (result,) = await self.create_topics([request])
        return result

    async def delete_topics(
        self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()
    ) -> list[DeleteTopicResult]:
        body = {
            "topics": [{"name": n, "topic_id": ZERO_UUID} for n in names]
                      + [{"name": None, "topic_id": i} for i in topic_ids],
            "timeout_ms": int(self.timeout_s * 1000),
        }
        response = await self._send(DELETE_TOPICS, body, lambda r: _all_items_not_controller(r["responses"]))
        items = response["responses"]
        # The handler answers a refused request (delete.topic.enable=false) with the code on every
        # topic; the local controller raises it for the whole call.
        if items and all(i["error_code"] == ErrorCode.TOPIC_DELETION_DISABLED for i in items):
            raise KafkaApiError(ErrorCode.TOPIC_DELETION_DISABLED, items[0]["error_message"])
        return [DeleteTopicResult(i["name"], i["topic_id"], ErrorCode(i["error_code"]), i["error_message"])
                for i in items]

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False
    ) -> list[CreatePartitionsResult]:
        body = {
            "topics": [
                {"name": t.name, "count": t.count,
                 "assignments": None if t.assignments is None
                 else [{"broker_ids": list(a)} for a in t.assignments]}
                for t in topics
            ],
            "timeout_ms": int(self.timeout_s * 1000),
            "validate_only": validate_only,
        }
        response = await self._send(CREATE_PARTITIONS, body, lambda r: _all_items_not_controller(r["results"]))
        return [CreatePartitionsResult(r["name"], ErrorCode(r["error_code"]), r["error_message"])
                for r in response["results"]]

    # ----------------------------------------------------------------------------------------
    # Configs

    async def alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]:
        wire = []
        for r in resources:
            if not isinstance(r.configs, dict):
                raise TypeError("AlterConfigs takes a map of config values per resource")
            wire.append({"resource_type": r.resource_type, "resource_name": r.resource_name,
                         "configs": [{"name": k, "value": v} for k, v in r.configs.items()]})
        return await self._alter(ALTER_CONFIGS, wire, validate_only)

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]:
        wire = []
        for r in resources:
            if isinstance(r.configs, dict):
                raise TypeError("IncrementalAlterConfigs takes per-key operations per resource")
            ops: Sequence[AlterableConfig] = r.configs
            wire.append({"resource_type": r.resource_type, "resource_name": r.resource_name,
                         "configs": [{"name": op.name, "config_operation": int(op.op), "value": op.value}
                                     for op in ops]})
        return await self._alter(INCREMENTAL_ALTER_CONFIGS, wire, validate_only)

    async def alter_user_scram_credentials(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        body = {"deletions": [{"name": n, "mechanism": m} for n, m in deletions],
                "upsertions": [{"name": u.name, "mechanism": u.mechanism, "iterations": u.iterations,
                                "salt": u.salt, "salted_password": u.salted_password} for u in upsertions]}
        response = await self._send(ALTER_USER_SCRAM_CREDENTIALS, body,
                                    lambda r: _all_items_not_controller(r["results"]))
        return [ScramAlterResult(r["user"], r["error_code"], r["error_message"]) for r in response["results"]]

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> list[ClientQuotaAlterationResult]:
        body = {"entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in a.entity],
                             "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None}
                                     for k, v in a.ops]}
                            for a in alterations],
                "validate_only": validate_only}
        response = await self._send(ALTER_CLIENT_QUOTAS, body, lambda r: _all_items_not_controller(r["entries"]))
        return [ClientQuotaAlterationResult(tuple((e["entity_type"], e["entity_name"]) for e in r["entity"]),
                                            r["error_code"], r["error_message"])
                for r in response["entries"]]

    async def _alter(self, api: tuple[int, int], resources: list[dict[str, Any]],
                     validate_only: bool) -> list[AlterConfigsResult]:
        body = {"resources": resources, "validate_only": validate_only}
        response = await self._send(api, body, lambda r: _all_items_not_controller(r["responses"]))
        return [AlterConfigsResult(r["resource_type"], r["resource_name"], ErrorCode(r["error_code"]),
                                   r["error_message"])
                for r in response["responses"]]

    # ----------------------------------------------------------------------------------------
    # Leaders, reassignments, ISR changes

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[ElectionResult]:
        topic_partitions: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, index in partitions:
                by_topic.setdefault(topic, []).append(index)
            topic_partitions = [{"topic": t, "partitions": p} for t, p in by_topic.items()]
        body = {"election_type": int(election_type), "topic_partitions": topic_partitions,
                "timeout_ms": int(self.timeout_s * 1000)}

        def not_controller(r: dict[str, Any]) -> bool:
            if _top_level_not_controller(r):
                return True
            return _all_items_not_controller([p for t in r["replica_election_results"] for p in t["partition_result"]])

        response = await self._send(ELECT_LEADERS, body, not_controller)
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaApiError(ErrorCode(response["error_code"]), None)
        return [ElectionResult(t["topic"], p["partition_id"], ErrorCode(p["error_code"]), p["error_message"])
                for t in response["replica_election_results"] for p in t["partition_result"]]

    async def update_features(
        self, updates: Sequence[FeatureUpdate], validate_only: bool = False
    ) -> UpdateFeaturesResult:
        body = {"timeout_ms": int(self.timeout_s * 1000), "validate_only": validate_only,
                "feature_updates": [{"feature": u.feature, "max_version_level": u.max_version_level,
                                     "upgrade_type": u.upgrade_type} for u in updates]}
        response = await self._send(UPDATE_FEATURES, body, _top_level_not_controller)
        return UpdateFeaturesResult(ErrorCode(response["error_code"]), response["error_message"])

    async def alter_partition_reassignments(
        self, targets: Sequence[ReassignmentTarget]
    ) -> list[ReassignmentResult]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for t in targets:
            by_topic.setdefault(t.topic, []).append(
                {"partition_index": t.partition, "replicas": None if t.replicas is None else list(t.replicas)})
        body = {"timeout_ms": int(self.timeout_s * 1000),
                "topics": [{"name": n, "partitions": p} for n, p in by_topic.items()]}
        api = ALTER_PARTITION_REASSIGNMENTS
        if not all(t.allow_replication_factor_change for t in targets):
            # Only v1 carries the flag; v0 otherwise, which a controller of an older release serves.
            body["allow_replication_factor_change"] = False
            api = (api[0], 1)
        response = await self._send(api, body, _top_level_not_controller)
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaApiError(ErrorCode(response["error_code"]), response["error_message"])
        return [ReassignmentResult(t["name"], p["partition_index"], ErrorCode(p["error_code"]), p["error_message"])
                for t in response["responses"] for p in t["partitions"]]

    async def list_partition_reassignments(
        self, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[OngoingReassignment]:
        topics: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, index in partitions:
                by_topic.setdefault(topic, []).append(index)
            topics = [{"name": n, "partition_indexes": p} for n, p in by_topic.items()]
        body = {"timeout_ms": int(self.timeout_s * 1000), "topics": topics}
        response = await self._send(LIST_PARTITION_REASSIGNMENTS, body,
                                    _top_level_not_controller)
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaApiError(ErrorCode(response["error_code"]), response["error_message"])
        return [OngoingReassignment(t["name"], p["partition_index"], tuple(p["replicas"]),
                                    tuple(p["adding_replicas"]), tuple(p["removing_replicas"]))
                for t in response["topics"] for p in t["partitions"]]

    async def alter_partition(
        self, topic_id: uuid.UUID, partition: int, leader_id: int, leader_epoch: int, partition_epoch: int,
        new_isr: Sequence[int], broker_epochs: Mapping[int, int] | None = None,
    ) -> AlterPartitionResult:
        epochs = broker_epochs or {}
        body = {
            "broker_id": leader_id,
            "broker_epoch": -1,  # Kafka's default: the controller does not check the leader's epoch
            "topics": [{"topic_id": topic_id, "partitions": [{
                "partition_index": partition,
                "leader_epoch": leader_epoch,
                "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": epochs.get(b, -1)} for b in new_isr],
                "leader_recovery_state": 0,
                "partition_epoch": partition_epoch,
            }]}],
        }
        response = await self._send(ALTER_PARTITION, body, _top_level_not_controller)
        if response["error_code"] != ErrorCode.NONE:
            return AlterPartitionResult(ErrorCode(response["error_code"]))
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["partition_index"] == partition:
                    return AlterPartitionResult(ErrorCode(p["error_code"]), p["leader_id"], p["leader_epoch"],
                                                p["partition_epoch"], tuple(p["isr"]))
        return AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        body = {"creations": [acl_wire.creation_of(b) for b in bindings]}
        response = await self._send(CREATE_ACLS, body, lambda r: _all_items_not_controller(r["results"]))
        return [AclCreateResult(r["error_code"], r["error_message"]) for r in response["results"]]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        body = {"filters": [acl_wire.filter_to_wire(f) for f in filters]}
        response = await self._send(DELETE_ACLS, body, lambda r: _all_items_not_controller(r["filter_results"]))
        return [AclDeleteResult(r["error_code"], r["error_message"],
                                tuple(acl_wire.binding_from_matching_acl(m) for m in r["matching_acls"]))
                for r in response["filter_results"]]

    async def register_broker(
        self, node_id: int, host: str, port: int, rack: str | None = None, *, listener_name: str = "PLAINTEXT",
        endpoints: Sequence[tuple[str, str, int]] = (),
    ) -> int:
        raise KafkaApiError(ErrorCode.UNSUPPORTED_VERSION,
                            "Broker registration is not forwarded: cluster-mode brokers register through etcd.")


class _ControllerIsLocal(Exception):
    """Internal: this node's controller became active while a forwarded call was waiting."""


class RoutingControllerClient:
    """Cluster mode's ``ControllerClient``: the local controller when active, else the image's."""

    def __init__(
        self,
        node_id: int,
        local: Callable[[], Controller | None],
        image: Callable[[], MetadataImage],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        initial_backoff_s: float = INITIAL_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        self.node_id = node_id
        self._local = local
        self._image = image
        self.timeout_s = timeout_s
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._forwarding = ForwardingControllerClient(
            self._remote_target, client_id=f"{FORWARDING_CLIENT_ID_PREFIX}-broker-{node_id}", timeout_s=timeout_s,
            initial_backoff_s=initial_backoff_s, max_backoff_s=max_backoff_s)

    async def close(self) -> None:
        await self._forwarding.close()

    def _active_local(self) -> Controller | None:
        controller = self._local()
        return controller if controller is not None and controller.is_active else None

    def _remote_target(self) -> ControllerTarget | None:
        if self._active_local() is not None:
            raise _ControllerIsLocal
        image = self._image()
        controller_id = image.controller_id
        if controller_id < 0 or controller_id == self.node_id:
            # No controller yet, or the image still names us after our lease was lost: never
            # forward to ourselves; wait for the image to name the new controller.
            return None
        broker = image.brokers.get(controller_id)
        return None if broker is None else (controller_id, broker.host, broker.port)

    async def _route(self, call: Callable[[Any], Awaitable[T]]) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        backoff = self._initial_backoff_s
        while True:
            local = self._active_local()
            if local is None:
                try:
                    return await call(self._forwarding)
                except _ControllerIsLocal:
                    continue
            try:
                return await call(LocalControllerClient(local))
            except KafkaApiError as exc:
                # Lost the lease during the call: the next controller (maybe remote) takes it.
                if exc.code not in NOT_CONTROLLER_CODES or loop.time() >= deadline:
                    raise
            await asyncio.sleep(min(backoff, max(deadline - loop.time(), 0.0)))
            backoff = min(backoff * 2, self._max_backoff_s)

    async def create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        return await self._route(lambda c: c.create_topics(topics, validate_only))

    async def create_internal_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str] | None = None
    ) -> CreateTopicResult:
        return await self._route(lambda c: c.create_internal_topic(name, num_partitions, replication_factor, configs))

    async def delete_topics(
        self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()
    ) -> list[DeleteTopicResult]:
        return await self._route(lambda c: c.delete_topics(names, topic_ids))

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], validate_only: bool = False
    ) -> list[CreatePartitionsResult]:
        return await self._route(lambda c: c.create_partitions(topics, validate_only))

    async def alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]:
        return await self._route(lambda c: c.alter_configs(resources, validate_only))

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool = False
    ) -> list[AlterConfigsResult]:
        return await self._route(lambda c: c.incremental_alter_configs(resources, validate_only))

    async def alter_user_scram_credentials(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        return await self._route(lambda c: c.alter_user_scram_credentials(deletions, upsertions))

    async def alter_client_quotas(
        self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
    ) -> list[ClientQuotaAlterationResult]:
        return await self._route(lambda c: c.alter_client_quotas(alterations, validate_only))

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[ElectionResult]:
        return await self._route(lambda c: c.elect_leaders(election_type, partitions))

    async def update_features(
        self, updates: Sequence[FeatureUpdate], validate_only: bool = False
    ) -> UpdateFeaturesResult:
        return await self._route(lambda c: c.update_features(updates, validate_only))

    async def alter_partition_reassignments(
        self, targets: Sequence[ReassignmentTarget]
    ) -> list[ReassignmentResult]:
        return await self._route(lambda c: c.alter_partition_reassignments(targets))

    async def list_partition_reassignments(
        self, partitions: Sequence[tuple[str, int]] | None = None
    ) -> list[OngoingReassignment]:
        return await self._route(lambda c: c.list_partition_reassignments(partitions))

    async def alter_partition(
        self, topic_id: uuid.UUID, partition: int, leader_id: int, leader_epoch: int, partition_epoch: int,
        new_isr: Sequence[int], broker_epochs: Mapping[int, int] | None = None,
    ) -> AlterPartitionResult:
        return await self._route(lambda c: c.alter_partition(topic_id, partition, leader_id, leader_epoch,
                                                             partition_epoch, new_isr, broker_epochs))

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        return await self._route(lambda c: c.create_acls(bindings))

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        return await self._route(lambda c: c.delete_acls(filters))

    async def register_broker(
        self, node_id: int, host: str, port: int, rack: str | None = None, *, listener_name: str = "PLAINTEXT",
        endpoints: Sequence[tuple[str, str, int]] = (),
    ) -> int:
        local = self._active_local()
        if local is None:
            raise KafkaApiError(ErrorCode.NOT_CONTROLLER,
                                "Broker registration is local-mode only: cluster-mode brokers register through etcd.")
        return await LocalControllerClient(local).register_broker(node_id, host, port, rack,
                                                                  listener_name=listener_name, endpoints=endpoints)


def _check_protocol(f: ForwardingControllerClient, r: RoutingControllerClient) -> tuple[ControllerClient, ...]:
    """Static check (mypy) that both classes satisfy the ControllerClient protocol."""
    return (f, r)
