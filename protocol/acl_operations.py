"""Authorized-operations bitfields, as Metadata, DescribeCluster, DescribeGroups and
ConsumerGroupDescribe report them (KIP-430).

Each bit is an AclOperation code (Kafka's org.apache.kafka.common.acl.AclOperation): READ 3,
WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10,
ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12. Without an authorizer, like Kafka, Odradek reports every
operation the resource type supports (AclEntry.supportedOperations, the constants below) when the
client asks, and Integer.MIN_VALUE when it does not; with one, the principal's operations
(broker/security/authz.py).
"""

from __future__ import annotations

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12

# "Not requested" (Integer.MIN_VALUE in Kafka).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _bits(*ops: int) -> int:
    return sum(1 << op for op in ops)


TOPIC_OPERATIONS = _bits(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = _bits(CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
                           IDEMPOTENT_WRITE)
GROUP_OPERATIONS = _bits(READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
