"""KIP-951 leader discovery: where a partition's leader is now, told to a client that asked the wrong broker.

Produce v10+ and Fetch v16+ carry, for a partition refused with NOT_LEADER_OR_FOLLOWER (Fetch: or
FENCED_LEADER_EPOCH), a ``current_leader`` tagged field (leader id and leader epoch) and, once per
response, ``node_endpoints``: the host, port and rack of each leader named, on the listener the
request came in on. A client that gets them moves its batches or its fetch position to the new
leader at once instead of waiting for a Metadata refresh (the Java producer retries without its
backoff). Lower versions get neither, as in Kafka.

The rules are Kafka's (KafkaApis.getCurrentLeader):
1. The leader and epoch come from the partition as this broker hosts it (leader or follower, its
   log dir online); a partition not hosted here is looked up in the metadata image; an unknown
   one is (-1, -1).
2. The endpoint is the leader's registration on the request's listener, and only for a leader that
   is registered and not fenced; a leader of -1 (none) or one without that listener names no
   endpoint, while ``current_leader`` still says (-1, epoch).
3. Only the error paths build these (``CurrentLeaders`` is made for the first refused partition),
   so a response without such an error is encoded as before (the native Produce encoder takes it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.replica_manager import ReplicaManager

    # Produce's and Fetch's structs of these fields are alike, so one type serves both answers.
    from odradek.protocol.messages import ProduceResponseLeaderIdAndEpoch, ProduceResponseNodeEndpoint

# Produce's and Fetch's first versions with the fields (KIP-951).
PRODUCE_FROM_VERSION = 10
FETCH_FROM_VERSION = 16


class CurrentLeaders:
    """The current leaders of one response's refused partitions and the endpoints they need."""

    __slots__ = ("_replica_manager", "_metadata", "_listener", "_endpoints")

    def __init__(self, replica_manager: ReplicaManager, metadata: BrokerMetadata, listener: str) -> None:
        self._replica_manager = replica_manager
        self._metadata = metadata
        self._listener = listener
        self._endpoints: dict[int, ProduceResponseNodeEndpoint] = {}

    def leader_of(self, topic: str, index: int) -> ProduceResponseLeaderIdAndEpoch:
        """``current_leader`` for ``topic``-``index``; its leader's endpoint joins ``node_endpoints``."""
        part = self._replica_manager.partitions.get((topic, index))
        image = self._metadata.image
        if part is not None and not part.offline:
            leader, epoch = part.leader, part.leader_epoch
        else:
            state = image.partition(topic, index)
            leader, epoch = (state.leader, state.leader_epoch) if state is not None else (-1, -1)
        if leader >= 0 and leader not in self._endpoints:
            registration = image.brokers.get(leader)
            if registration is not None and not registration.fenced:
                endpoint = registration.endpoint_for(self._listener)
                if endpoint is not None:
                    self._endpoints[leader] = {"node_id": leader, "host": endpoint[0], "port": endpoint[1],
                                               "rack": registration.rack}
        return {"leader_id": leader, "leader_epoch": epoch}

    def node_endpoints(self) -> list[ProduceResponseNodeEndpoint]:
        """Every endpoint named so far, by node id (Kafka's order is its hash map's)."""
        return [self._endpoints[node] for node in sorted(self._endpoints)]
