"""The coordinator runtime shared by the group coordinator and (next) the transaction coordinator.

- ``runtime``          ``CoordinatorRuntime``: ownership by partition leadership, loading, the
                       write -> await durable -> apply path, per-partition serialization; the
                       ``PartitionWriter`` and ``CoordinatorShard`` interfaces it works through.
- ``partition_writer`` ``ReplicaManagerWriter``: the ``PartitionWriter`` over the replica manager.
- ``hashing``          which partition of __consumer_offsets or __transaction_state owns an id
                       (Kafka's ``Utils.abs(String.hashCode) % partitions``).
- ``partition_rule``   which rule maps an id to its partition now (0.1.0's until the cluster's
                       metadata format level allows Kafka's), and the coordinators' reload when it
                       changes.
- ``rehash``, ``migration``, ``twin_reader``: the one-time move of state 0.1.0's rule put on
                       another partition.
"""
