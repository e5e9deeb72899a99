"""The part of the embedded consumer protocol the coordinator reads: a member's subscribed topics.

Classic groups carry the client-side assignor's bytes opaquely; Kafka's broker only looks inside
for groups of protocol type "consumer", to learn which topics the group subscribes to (OffsetDelete
refuses GROUP_SUBSCRIBED_TO_TOPIC; offsets of unsubscribed topics expire while the group is
Stable). ConsumerProtocolSubscription (clients/.../common/message/ConsumerProtocolSubscription.json,
never flexible) starts::

    version  int16
    topics   int32 count, then count × (int16 length, utf-8 bytes)
    ...      user_data, owned_partitions, generation_id, rack_id (later versions; not needed here)

Malformed bytes yield ``None`` ("unknown"), as Kafka treats a subscription it cannot parse: the
group is then considered subscribed to nothing it can prove. Pure functions; any thread.
"""

from __future__ import annotations

import struct

PROTOCOL_TYPE = "consumer"


def subscribed_topics(metadata: bytes | None) -> set[str] | None:
    """The topics of one serialized ConsumerProtocolSubscription, or None if it does not parse."""
    if metadata is None:
        return None
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        if count < 0 or count > len(metadata):
            return None
        topics = set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(bytes(metadata[pos : pos + n]).decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
