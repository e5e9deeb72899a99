"""The broker daemon, folders in the order a request meets them (odradek/__init__.py has the layers).

    main.py           ``odradek``: parse the command line and the config, run one broker (or launcher/).
    server.py         The builder: constructs the broker's parts in dependency order and runs them.
    config/           Kafka's config definitions and defaults, server.properties parsing, listeners.
    network/          The acceptor and network loops (Kafka's SocketServer), connections, the request
                      channel and its memory pool, connection quotas; the inter-broker client.
    security/         TLS, SASL (sasl/), principals, the ACL authorizer and its checks (authz).
    quota/            Client quotas (produce, fetch, request time) and connection-creation rates.
    api/              The request seam (Kafka's KafkaApis): the dispatcher decodes a frame into a request,
                      the registry finds its handler in handlers/ (one module per Kafka API), and the
                      response is encoded back. request_types.py is what a handler sees.
    replica/          Partitions on this broker: the replica manager (append and read), the partition
                      state (leader epoch, ISR, high watermark), delayed produce and fetch, fetch
                      sessions, the follower's replica fetcher, log-dir moves.
    coordinator/      The coordinator runtime shared by the group and transaction coordinators: state
                      machines over a compacted topic's partitions (__consumer_offsets, __transaction_state).
    group/            The group coordinator: classic and consumer (KIP-848) groups, offsets.
    txn/              The transaction coordinator, producer ids and transaction markers.
    metadata/         The controller seam: the broker's metadata image and caches, topic configs, the
                      clients to the controller (embedded, or another node's) and broker registration.
    cluster/          Cluster mode: this node's registration, the metadata follower and the controller
                      candidate on etcd.
    client_telemetry/ KIP-714: client metrics subscriptions and the pushed metrics' exporter.
    runtime/          No Kafka semantics: the timing wheel, the purgatory, completion, metrics, RE2 regexes.
    faults/           Fault injection for tests (off unless configured) and the request journal.
    launcher/         ``odradek cluster``: several processes as one deployment, and the etcd binary.

A Produce, for example: network/reactor.py reads the frame, api/dispatcher.py decodes it and calls
api/handlers/produce.py, which appends through replica/replica_manager.py to the partition's
odradek.storage log; acks=all waits in runtime/purgatory.py for the followers' fetches.
tests/unit/test_layers.py holds the rules between these folders.
"""
