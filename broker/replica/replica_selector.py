"""KIP-392 fetch from the closest replica: which replica a consumer should read a partition from.

Kafka's ``replica.selector.class``; the one implementation offered is Kafka's
org.apache.kafka.common.replica.RackAwareReplicaSelector, under that name, with Kafka's
ReplicaManager.findPreferredReadReplica around it:

- only the leader chooses, and only for consumers' fetches (Fetch v11+) naming a ``client.rack``;
- the candidates are the leader and the in-sync followers whose log end reached the fetch offset
  (an out-of-sync follower could keep the consumer behind forever), on live brokers;
- a candidate in the client's rack (``broker.rack``) wins; the leader first, else the most caught
  up follower (highest log end, then the one caught up most recently);
- the leader itself is never sent as a preferred replica: -1 means "read here".
"""

from __future__ import annotations

from odradek.broker.config.broker_config import RACK_AWARE_REPLICA_SELECTOR
from odradek.broker.replica.partition import Partition
from odradek.controller.image import MetadataImage

__all__ = ["RACK_AWARE_REPLICA_SELECTOR", "RackAwareReplicaSelector", "replica_selector"]


def replica_selector(class_name: str | None) -> RackAwareReplicaSelector | None:
    """The selector ``replica.selector.class`` names (the config accepts only Kafka's rack-aware
    one), None when unset: consumers read from leaders."""
    return RackAwareReplicaSelector() if class_name == RACK_AWARE_REPLICA_SELECTOR else None


class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector over our Partition and metadata image."""

    def preferred_read_replica(self, part: Partition, client_rack: str, fetch_offset: int, image: MetadataImage,
                               now_ms: int) -> int:
        """The follower ``part``'s consumer in ``client_rack`` should fetch from, or -1 (the leader)."""
        brokers = image.brokers
        leader = brokers.get(part.leader)
        if leader is not None and leader.rack == client_rack:
            return -1
        best = -1
        best_key = (-1, 0)
        for replica in part.isr:
            if replica == part.leader:
                continue
            reg = brokers.get(replica)
            if reg is None or reg.fenced or reg.rack != client_rack:
                continue
            log_end, caught_up_ms = part.follower_state(replica)
            if log_end < fetch_offset:
                continue
            key = (log_end, -(now_ms - caught_up_ms))
            if best < 0 or key > best_key:
                best, best_key = replica, key
        return best
