"""The group coordinator: Kafka's classic consumer-group protocol and committed offsets.

Modules, each with one job:

- ``hashing``           which __consumer_offsets partition owns a group (Java String.hashCode).
- ``records``           the __consumer_offsets record formats (keys and values, Kafka's schemas).
- ``consumer_protocol`` the few bytes of the embedded consumer protocol the broker must read
                        (subscribed topics, for OffsetDelete and offset expiry).
- ``member``            one member of a classic group.
- ``classic_group``     a classic group's members, generation and state machine.
- ``keyed_timer``       named timeouts on the broker's timing wheel (session, join, sync).
- ``coordinator``       ``GroupCoordinator``: the APIs, persistence through the replica manager,
                        loading a partition, offset expiry.

Everything here is owned by the handler loop; there are no locks. KIP-848 consumer groups
(ConsumerGroupHeartbeat) can live beside classic groups: the coordinator's group map and the
partition loader are the places they would join.
"""
