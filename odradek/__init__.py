"""Odradek, a Kafka-compatible message broker: one installed package, four layers and the test tooling.

    odradek.protocol    Kafka's wire formats: the message codecs from Kafka's schemas, record batches,
                        compression, checksums. Imports nothing else of Odradek.
    odradek.storage     Kafka's on-disk log: segments, indexes, producer state, the cleaner. Imports protocol.
    odradek.controller  Cluster metadata: the metadata log and image, elections, placement, the etcd store
                        and lease. Imports protocol and storage.
    odradek.broker      The daemon: network, the request seam (api/), replication, the coordinators,
                        security, quotas. Imports everything below it.
    odradek.testing     A real broker or cluster for other projects' tests, and the pytest fixtures.
                        Nothing in the four runtime packages imports it.

In a checkout the four runtime packages are the top-level folders broker/, protocol/, storage/ and
controller/; odradek/ links to them, and an install copies them under odradek/ (pyproject.toml).
tests/unit/test_layers.py holds the layers to this map.
"""

__version__ = "0.2.0"
