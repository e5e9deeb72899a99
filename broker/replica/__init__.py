"""This broker's replicas: partitions, the replica manager, its purgatories and fetch sessions.

The only door to a partition's data (Kafka's kafka.cluster.Partition / kafka.server.ReplicaManager):
handlers translate the wire to calls on :class:`~odradek.broker.replica.replica_manager.ReplicaManager`,
which reaches a partition's log only through :class:`~odradek.broker.replica.partition.Partition`.
"""
