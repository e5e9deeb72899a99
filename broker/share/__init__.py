"""Share groups' data path on the partition leaders (KIP-932, Kafka's queues).

- ``share_partition``          ``SharePartition``: one (group, topic-partition)'s records in flight,
                               their states, delivery counts and acquisition locks
- ``share_session``            ``ShareSessionCache``: which partitions each member fetches here
- ``share_partition_manager``  ``SharePartitionManager``: ShareFetch's reads and acquisitions,
                               acknowledgements, releases (closed sessions and connections)
- ``delayed_share_fetch``      ``DelayedShareFetch``: a ShareFetch waiting in the ShareFetch
                               purgatory for records to acquire (appends, releases, expired locks)
- ``share_metrics``            ``ShareMetrics``: Kafka's share-group metrics for /metrics
- ``share_state_records``      ``__share_group_state``'s ShareSnapshot / ShareUpdate records
- ``share_state_store``        ``ShareStateStore``: share-partitions' durable state on the
                               coordinator runtime over ``__share_group_state``
- ``share_coordinator``        ``ShareCoordinator``: the share coordinator's operations (APIs
                               83-87) on the state partitions this broker leads
- ``share_persister``          ``SharePersister``: where a share-partition leader reads and writes
                               its state (the local store, or the coordinator on another broker)
- ``partition_end_offsets``    ``PartitionEndOffsets``: a partition's latest offset wherever it is
                               led, for the share-group lag DescribeShareGroupOffsets answers

Membership and assignment live on the group coordinator (broker/group/share_group.py).
"""
