"""The group coordinator: classic groups, KIP-848 consumer groups and committed offsets.

Modules, each with one job:

- ``records``           the __consumer_offsets record formats (keys and values, Kafka's schemas).
- ``consumer_group_records`` the KIP-848 records.
- ``share_group_records`` the KIP-932 share-group records (``share_group`` writes and replays them).
- ``streams_records``   the KIP-1071 streams-group records.
- ``group_record_framing`` the key/value framing those two families share.
- ``consumer_protocol`` the few bytes of the embedded consumer protocol the broker must read
                        (subscribed topics, for OffsetDelete and offset expiry).
- ``member``            one member of a classic group.
- ``classic_group``     a classic group's members, generation and state machine.
- ``keyed_timer``       named timeouts on the broker's timing wheel (session, join, sync).
- ``context``           ``GroupConfig`` and ``GroupContext``: what the parts share (config, the
                        coordinator runtime, the timer, the metadata view, the group id space).
- ``errors``            how a failed __consumer_offsets write is answered.
- ``shard``             ``GroupShard``: one partition's loading and unloading on the runtime.
- ``classic_manager``   the classic protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ...
- ``consumer_group``    KIP-848 consumer groups: ConsumerGroupHeartbeat/Describe.
- ``offset_manager``    OffsetCommit/Fetch/Delete and offset expiry.
- ``coordinator``       ``GroupCoordinator``: wires the parts on a CoordinatorRuntime
                        (broker/coordinator/runtime.py) and routes the APIs.

Every write goes through the runtime: write -> await durable -> apply. Everything here is owned by
the handler loop; there are no locks.
"""
