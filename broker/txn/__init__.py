"""The transaction coordinator (Kafka's kafka.coordinator.transaction) on the coordinator runtime.

``records`` (the __transaction_state formats), ``metadata`` (one transactional id's state and its
transitions), ``shard`` (one partition's loader), ``markers`` (WriteTxnMarkers to partition
leaders), ``coordinator`` (the API entry points and timers).
"""
