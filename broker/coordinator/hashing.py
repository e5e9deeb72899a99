"""Which partition of ``__consumer_offsets`` coordinates a group, and of ``__transaction_state`` a
transactional id.

Kafka (GroupCoordinatorService.partitionFor, TransactionStateManager.partitionFor, both asked by
KafkaApis for FindCoordinator): ``Utils.abs(id.hashCode()) % partitions``, where ``hashCode`` is
Java's ``String.hashCode`` (``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in wrapping
32-bit arithmetic; a character outside the BMP is two code units, a surrogate pair) and
``Utils.abs`` is ``n == Integer.MIN_VALUE ? 0 : Math.abs(n)``: the absolute value, except that
MIN_VALUE (whose ``Math.abs`` is itself, negative) maps to 0. Clients, tools and other brokers
compute the same partition, so this must match Java bit for bit. (Share groups' state partition,
``__share_group_state``, is the same function over the key "groupId:topicId:partition", the topic
id in Kafka's base64 form: broker/share/share_state_store.py.)

Before this rule was fixed, ``legacy_partition_for`` was used: ``(hashCode & 0x7fffffff) %
partitions``. For a non-negative hash, and for MIN_VALUE, both give the same partition; for every
other negative hash the masked value is ``hash + 2**31`` instead of ``-hash``, another partition.
broker/coordinator/rehash.py moves the state written under the old rule (it keeps
``legacy_partition_for`` for that), once the cluster's metadata format level says every broker runs
a release with Kafka's rule; until then every broker routes by the old one
(broker/coordinator/partition_rule.py, the only caller that picks between the two).

Pure functions; any thread may call them.
"""

from __future__ import annotations

_MIN_INT = -(1 << 31)


def java_string_hash_code(s: str) -> int:
    """Java's ``String.hashCode``: a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    # Each UTF-16 code unit is two bytes, big-endian; surrogate pairs count as two units, as in Java.
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def utils_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``|n|``, and 0 for ``Integer.MIN_VALUE``."""
    return 0 if n == _MIN_INT else abs(n)


def partition_for(key: str, num_partitions: int) -> int:
    """The coordinator partition of a group id or transactional id (Kafka's partitionFor)."""
    return utils_abs(java_string_hash_code(key)) % num_partitions


def legacy_partition_for(key: str, num_partitions: int) -> int:
    """The partition the releases before the fix used (``hashCode & 0x7fffffff``): where their
    data dirs hold a key's records. For moving that state, and for routing while a cluster may
    still run such a release (broker/coordinator/partition_rule.py)."""
    return (java_string_hash_code(key) & 0x7FFFFFFF) % num_partitions
