"""The coordinator runtime shared by the group coordinator and (next) the transaction coordinator.

- ``runtime``          ``CoordinatorRuntime``: ownership by partition leadership, loading, the
                       write -> await durable -> apply path, per-partition serialization; the
                       ``PartitionWriter`` and ``CoordinatorShard`` interfaces it works through.
- ``partition_writer`` ``ReplicaManagerWriter``: the ``PartitionWriter`` over the replica manager.
"""
