"""The broker: wires configuration, controller, storage, the Reactor and the handlers together.

Start-up order (each step only needs the ones before it):
0. the ``.lock`` of every log dir and of the metadata dir (odradek.storage.log_dir_lock), before anything
   reads or writes there or contacts the metadata store: a second process on a live node's dirs
   stops here having changed nothing (main exits 1 naming the dir and the holder's PID);
1. the metadata view and the controller: the embedded one takes its epoch-fenced lease and replays
   the metadata log (metadata.store=local), or the node joins the etcd cluster;
2. the replica manager: log dirs and the clean-shutdown marker check (storage.LogManager), local
   logs for every partition the image says this broker hosts;
3. the coordinators, on the replica manager's partitions;
4. the request path: the request channel, the handlers bound to their collaborators, the
   dispatcher that consumes the channel, client quotas;
5. the socket server: sockets bound (so a port 0 is known), this broker registered with its
   advertised endpoint, then the acceptor and network loops start — only now do clients get in.
Each part is constructed with the parts it uses (:meth:`Broker.start` reads in this order);
nothing is set on a part after its construction.

Shutdown reverses it: stop accepting, let in-flight requests finish (bounded), close connections,
flush and close logs (writing the clean-shutdown marker), release the controller lease, and last
the dirs' locks.

Disk faults (see odradek.storage.log_manager and odradek.broker.replica.log_dir_failures): a log dir that hits an
I/O error goes offline and its partitions answer KAFKA_STORAGE_ERROR; when no online log dir is
left, or the metadata log's dir failed, the broker calls :meth:`Broker.fail` — Kafka's "Shutdown
broker because all log dirs in ... have failed" — which logs that one line and runs the normal
shutdown; the process exits 1. A shutdown that meets a faulty disk (a read-only file system found
only when the logs are closed) goes on with the remaining steps and ends with one ERROR line
naming what could not be done, instead of a traceback; the process then exits 1 as well, and the
next start recovers those logs as after a crash.

All broker state is owned by the handler loop (the loop ``start`` runs on); blocking file work
goes to ``io_pool`` (``num.io.threads`` threads).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from odradek.broker.api.dispatcher import Dispatcher
from odradek.broker.api.handlers import all_handlers
from odradek.broker.api.registry import Collaborators, HandlerSpec, bind_handlers
from odradek.broker.client_telemetry.exporter import ClientTelemetryExporter
from odradek.broker.client_telemetry.manager import ClientMetricsManager
from odradek.broker.config.broker_config import BrokerConfig, parse_ip_overrides
from odradek.broker.coordinator import partition_rule
from odradek.broker.coordinator.partition_writer import ReplicaManagerWriter
from odradek.broker.faults.admin_endpoint import FaultAdminServer
from odradek.broker.faults.injection import FaultInjector
from odradek.broker.group.context import GroupConfig
from odradek.broker.group.coordinator import GroupCoordinator
from odradek.broker.metadata.broker_metadata import BrokerMetadata, metadata_dir_of
from odradek.broker.metadata.broker_registration import advertised_endpoint, register_this_broker
from odradek.broker.metadata.controller_client import LocalControllerClient
from odradek.broker.metadata.embedded_controller import EmbeddedController
from odradek.broker.metadata.topic_config_view import config_layers, effective_broker_config
from odradek.broker.network.connection_rates import ConnectionRates, listener_rates
from odradek.broker.network.reactor import Endpoint, SocketServer
from odradek.broker.network.request_channel import RequestChannel
from odradek.broker.quota.client_quotas import ClientQuotas
from odradek.broker.quota.metrics import QuotaMetrics
from odradek.broker.replica.fetch_session import FetchSessionCache
from odradek.broker.replica.replica_manager import ReplicaManager
from odradek.broker.runtime.metrics import BrokerMetrics
from odradek.broker.runtime.timing_wheel import AsyncReaper, Timer
from odradek.broker.security import tls
from odradek.broker.security.authz import AuthHelper, build_authorizer, load_acls
from odradek.broker.security.sasl import inter_broker
from odradek.broker.security.sasl.settings import inter_broker_sasl, listener_settings
from odradek.broker.security.sasl.setup import sasl_authenticators
from odradek.broker.share.partition_end_offsets import PartitionEndOffsets
from odradek.broker.share.share_coordinator import ShareCoordinator
from odradek.broker.share.share_partition_manager import ShareConfig, SharePartitionManager
from odradek.broker.share.share_persister import SharePersister
from odradek.broker.share.share_state_store import ShareStateStore
from odradek.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from odradek.broker.txn.producer_ids import ProducerIdManager
from odradek.protocol.errors import KafkaApiError
from odradek.storage.errors import KafkaStorageError
from odradek.storage.log_dir_lock import LogDirLocks

if TYPE_CHECKING:
    from odradek.broker.cluster.cluster_node import ClusterNode
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.txn.producer_ids import ProducerIdSource

log = logging.getLogger(__name__)

SHUTDOWN_DRAIN_SECONDS = 5.0


class Broker:
    # Built by start() before the first request is served (the handlers' Collaborators,
    # broker/api/registry.py); shutdown() looks up which of them exist, as start may have failed.
    metadata: BrokerMetadata
    controller_client: ControllerClient
    replica_manager: ReplicaManager
    fetch_sessions: FetchSessionCache
    share_coordinator: ShareCoordinator
    share_persister: SharePersister
    partition_end_offsets: PartitionEndOffsets
    producer_ids: ProducerIdSource

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.handlers = all_handlers()
        self.authorizer = build_authorizer(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.io_pool = ThreadPoolExecutor(max_workers=config["num.io.threads"], thread_name_prefix="odradek-io")
        self.socket_server: SocketServer | None = None
        self.dispatcher: Dispatcher | None = None
        self.client_quotas: ClientQuotas | None = None
        # The controller in this process (life cycle only); handlers reach it through controller_client.
        self.embedded_controller: EmbeddedController | None = None
        # Cluster mode (metadata.store=etcd://...): this node's cluster parts; None on one node.
        self.cluster: ClusterNode | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self.share_state: ShareStateStore | None = None
        # Delayed operations (long-poll fetches, joins, heartbeats) share one timing wheel, driven
        # by the handler loop.
        self.metrics: BrokerMetrics | None = None  # when odradek.metrics.port >= 0
        # Tests only (broker/faults/injection.py): when odradek.testing.faults.enable, and its HTTP endpoint.
        self.faults: FaultInjector | None = None
        self.fault_admin: FaultAdminServer | None = None
        # Client telemetry (KIP-714): subscriptions and clients; what they push is served on
        # /metrics by the exporter, which exists when /metrics does.
        self.client_metrics = ClientMetricsManager(lambda: self.metadata.image, config["telemetry.max.bytes"])
        self.client_telemetry: ClientTelemetryExporter | None = None
        self.timer = Timer()
        self.reaper: AsyncReaper | None = None
        self.started = False
        self._background: list[asyncio.Task[Any]] = []
        self._unsubscribe_limits: Any = None
        self._applied_overrides: dict[str, int] = {}
        # Set by a signal (odradek.broker.main) or by fail(); the serving coroutine waits on it.
        self.stop_requested = asyncio.Event()
        self.stopping = False
        self.fatal_reason: str | None = None
        self.dir_locks: LogDirLocks | None = None

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Build the broker in dependency order, then open the listeners (the module docstring's
        steps). Each part is constructed with the parts it uses, all built above it; nothing is set
        on a part afterwards. What follows a part's construction is a subscription (a listener told
        of leaderships, markers, metadata) or starting it."""
        t0 = time.monotonic()
        loop = self.loop = asyncio.get_running_loop()
        config = self.config
        self._lock_data_dirs()
        # Before anything connects to another broker (replica fetchers start with the logs, before
        # the listeners): its inter-broker listener may be SASL, SSL or both.
        inter_broker.configure(inter_broker_sasl(config, listener_settings(config)))
        tls.set_inter_broker_tls(tls.inter_broker_client_tls(config))
        self.reaper = AsyncReaper(self.timer, loop)
        self.reaper.start()
        # Metadata and the controller.
        self.metadata = BrokerMetadata(metadata_dir_of(config))
        if config["metadata.store"] == "local":
            await self._start_local_controller()
        else:
            await self._join_cluster()
        if self.authorizer is not None:
            self._follow_acls(self.authorizer)
        if config["odradek.metrics.port"] >= 0:  # served once the listeners are up (_start_metrics)
            self.metrics = BrokerMetrics()
            self.client_telemetry = ClientTelemetryExporter()
        # Storage and replicas.
        rm = self.replica_manager = ReplicaManager(
            config, self.metadata, self.timer, self.io_pool, self.fail, lambda: self.stopping,
            alter_partition=self.controller_client.alter_partition,  # ISR changes (KIP-497)
            on_offline_replicas=self.cluster.report_offline_replicas if self.cluster is not None else None,
            metrics=self.metrics)
        for log_dir, exc in self.dir_locks.failed.items() if self.dir_locks is not None else ():
            # Kafka's "Disk error while locking directory": the dir starts offline, the others serve.
            log.error("Disk error while locking log dir %s, it is offline: %s", log_dir, exc)
            rm.log_manager.report_dir_failure(log_dir, exc)
        await rm.start()
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        # Coordinators, on the replica manager's partitions.
        # Share-partitions' durable state (KIP-932's share coordinator) on __share_group_state.
        self.share_state = ShareStateStore(
            ReplicaManagerWriter(rm), self.metadata, self.controller_client, self.node_id,
            config["share.coordinator.state.topic.num.partitions"],
            int(config["share.coordinator.state.topic.replication.factor"]),
            int(config["share.coordinator.state.topic.min.isr"]), config["share.coordinator.state.topic.segment.bytes"],
            config["metadata.store"] == "local",
            config["share.coordinator.snapshot.update.records.per.snapshot"],
            config["share.coordinator.state.topic.prune.interval.ms"],
            config["share.coordinator.cold.partition.snapshot.interval.ms"])
        await self.share_state.start()
        self.share_coordinator = ShareCoordinator(self.share_state, self.metadata)
        # Where the share-partitions led here read and write their state: here or another broker.
        self.share_persister = SharePersister(self.share_state, self.metadata)
        # The partitions' latest offsets for share-group lag, wherever they are led.
        self.partition_end_offsets = PartitionEndOffsets(rm, self.metadata, self.node_id)
        self.share_partitions = SharePartitionManager(ShareConfig.from_broker_config(config), rm, self.metadata,
                                                      store=self.share_persister)
        rm.on_resign(self.share_partitions.on_resign)
        self.group_coordinator = GroupCoordinator(GroupConfig.from_broker_config(config), ReplicaManagerWriter(rm),
                                                  self.timer, self.metadata, self.node_id, producers=rm)
        rm.on_txn_marker(self.group_coordinator.on_transaction_completed)
        await self.group_coordinator.start()
        self.txn_coordinator = TransactionCoordinator(TxnConfig.from_broker_config(config), ReplicaManagerWriter(rm),
                                                      rm, self.metadata, self.producer_ids, self.node_id)
        await self.txn_coordinator.start()
        # Both coordinators reload when the metadata format level changes their partition rule.
        partition_rule.follow(self.metadata, [self.group_coordinator, self.txn_coordinator])
        # The request path: the dispatcher consumes the channel it is built on (no relay).
        channel = RequestChannel(loop, config["queued.max.requests"],
                                 max_queued_bytes=config["queued.max.request.bytes"])
        handlers = self._faulty_handlers(bind_handlers(self.handlers, self._collaborators()))
        self.dispatcher = Dispatcher(handlers, channel, inter_broker_listener=config.inter_broker_listener_name,
                                     metrics=self.metrics)
        self.client_quotas = self._client_quotas(self.dispatcher)
        # The network.
        endpoints = [Endpoint(lst.name, lst.host, lst.port,
                              tls.server_tls(config, lst.name) if tls.is_tls(lst.security_protocol) else None)
                     for lst in config.listeners]
        limits = self._connection_limits()
        self.socket_server = SocketServer(
            loop,
            channel,
            endpoints,
            num_network_threads=config["num.network.threads"],
            max_request_size=config["socket.request.max.bytes"],
            idle_ms=config["connections.max.idle.ms"],
            loop_kind=config["odradek.event.loop"],
            backlog=config["socket.listen.backlog.size"],
            send_buffer_bytes=config["socket.send.buffer.bytes"],
            receive_buffer_bytes=config["socket.receive.buffer.bytes"],
            max_connections=limits[0],
            max_connections_per_ip=limits[1],
            max_connections_per_ip_overrides=limits[2],
            sasl_authenticators=sasl_authenticators(config, lambda: self.metadata.image,
                                                    config["socket.request.max.bytes"]),
            connection_rates=self._connection_rates(),
        )
        self.socket_server.disconnect_listeners.append(self.share_partitions.on_disconnect)
        self._applied_overrides = limits[2]
        # max.connections and the per-IP limits are dynamic broker configs (Kafka's
        # DynamicConnectionQuota): IncrementalAlterConfigs/AlterConfigs changes apply at once.
        self._unsubscribe_limits = self.metadata.subscribe(self._on_metadata_delta)
        # Register the bound endpoint before accepting: a client that connects the moment the port
        # opens must already find this broker in Metadata and DescribeCluster (Kafka likewise
        # opens its client listeners only once the broker is registered and unfenced).
        # Before the listeners bind (a connect then succeeds already): a test that sees the broker's
        # port open can set its faults at once.
        if self.faults is not None and config["odradek.testing.faults.port"] >= 0:
            self._start_fault_admin()
        self.socket_server.bind()
        if self.cluster is None:
            await register_this_broker(self.controller_client, config, self.socket_server.bound_ports)
        else:
            endpoint = advertised_endpoint(config, self.socket_server.bound_ports)
            if endpoint is not None:
                await self.cluster.register(endpoint)
        await self.socket_server.start_accepting()
        if config["odradek.metrics.port"] >= 0:
            self._start_metrics()
        self.started = True
        log.info(
            "Odradek broker %d started in %.0f ms, listening on %s",
            self.node_id,
            (time.monotonic() - t0) * 1000,
            ", ".join(f"{e.name}://{e.host}:{self.socket_server.bound_ports[e.name]}" for e in endpoints),
        )

    def _lock_data_dirs(self) -> None:
        """Take the ``.lock`` of every log dir, then of the metadata dir (odradek.storage.log_dir_lock).

        Raises LogDirInUseError when another process holds one (nothing is held then); an I/O error
        on the metadata dir stops the start (KafkaStorageError), one on a log dir leaves that dir to
        start offline (see start)."""
        metadata_dir = metadata_dir_of(self.config)
        self.dir_locks = LogDirLocks.acquire([*self.config.log_dirs, metadata_dir])
        if (exc := self.dir_locks.failed.get(metadata_dir)) is not None:
            raise KafkaStorageError(f"Disk error while locking the metadata log dir {metadata_dir}: {exc}")

    async def _start_local_controller(self) -> None:
        """metadata.store=local: the controller in this process, its client, producer ids from the metadata dir."""
        self.embedded_controller = EmbeddedController(self.config, self.metadata.metadata_dir)
        self.embedded_controller.add_publisher(self.metadata)
        await self.embedded_controller.start()
        self.controller_client = LocalControllerClient(self.embedded_controller.controller)
        self.producer_ids = ProducerIdManager(self.metadata.metadata_dir)

    async def _join_cluster(self) -> None:
        """Cluster mode: cluster id, metadata followed from etcd, controller candidate (odradek.broker.cluster)."""
        # Imported here: etcd's gRPC client (about 140 ms to import) is loaded only by a broker that uses it.
        from odradek.broker.cluster.cluster_node import ClusterNode
        from odradek.broker.cluster.producer_id_blocks import EtcdProducerIdManager

        self.cluster = ClusterNode(self.config, self.metadata, self.stop_requested.is_set)
        await self.cluster.start()
        self.controller_client = self.cluster.controller_client()
        assert self.cluster.keys is not None
        self.producer_ids = EtcdProducerIdManager(self.cluster.etcd, self.cluster.keys)

    def _follow_acls(self, authorizer: Any) -> None:
        """The authorizer holds the image's ACLs: loaded now, reloaded by each delta that changes them."""
        load_acls(authorizer, self.metadata.image)

        def on_delta(delta: Any) -> None:
            if delta.acls_changed:
                load_acls(authorizer, self.metadata.image)

        self.metadata.subscribe(on_delta)

    def _connection_limits(self) -> tuple[int, int, dict[str, int]]:
        """max.connections, max.connections.per.ip and its overrides, dynamic values applied."""
        cfg = effective_broker_config(
            self.config, config_layers(self.config, self.metadata.image.broker_configs, self.node_id))
        try:
            overrides = parse_ip_overrides(cfg["max.connections.per.ip.overrides"])
        except ValueError:
            overrides = parse_ip_overrides(self.config["max.connections.per.ip.overrides"])
        return cfg["max.connections"], cfg["max.connections.per.ip"], overrides

    def _collaborators(self) -> Collaborators:
        """What the handlers use of this broker (each handler gets the few its module names,
        broker/api/registry.py): everything here is built before the first request."""
        assert self.group_coordinator is not None and self.txn_coordinator is not None
        return Collaborators(
            config=self.config, node_id=self.node_id, metadata=self.metadata,
            controller_client=self.controller_client, replica_manager=self.replica_manager,
            fetch_sessions=self.fetch_sessions, group_coordinator=self.group_coordinator,
            share_partitions=self.share_partitions, share_coordinator=self.share_coordinator,
            share_persister=self.share_persister, partition_end_offsets=self.partition_end_offsets,
            txn_coordinator=self.txn_coordinator, producer_ids=self.producer_ids,
            client_metrics=self.client_metrics, io_pool=self.io_pool, authz=AuthHelper(self.authorizer),
            metrics=self.metrics, client_telemetry=self.client_telemetry)

    def _faulty_handlers(self, handlers: dict[int, HandlerSpec]) -> dict[int, HandlerSpec]:
        """The handler registry, run through fault injection and the request journal when
        odradek.testing.faults.enable is set (broker/faults/injection.py); otherwise the plain registry, so
        the request path is exactly as without the feature."""
        if not self.config["odradek.testing.faults.enable"]:
            if self.config["odradek.testing.faults.port"] >= 0:
                log.warning("odradek.testing.faults.port is set but odradek.testing.faults.enable is not: "
                            "no fault injection endpoint")
            return handlers

        def topic_name_of(topic_id: Any) -> str | None:
            topic = self.metadata.image.topics_by_id.get(topic_id)
            return None if topic is None else topic.name

        self.faults = FaultInjector(handlers, self.config["odradek.testing.journal.max.entries"], topic_name_of)
        log.warning("fault injection is on (odradek.testing.faults.enable): for tests only")
        return self.faults.wrap_handlers(handlers)

    def _start_fault_admin(self) -> None:
        assert self.faults is not None
        self.fault_admin = FaultAdminServer(self.faults, self.config["odradek.testing.faults.host"],
                                            self.config["odradek.testing.faults.port"])
        self.fault_admin.start()
        log.info("fault injection endpoint on http://%s:%d/faults", self.config["odradek.testing.faults.host"],
                 self.fault_admin.port)

    def _client_quotas(self, dispatcher: Dispatcher) -> ClientQuotas:
        """Client quotas from the metadata image (broker/quota): the dispatcher holds them only
        while one exists, so without quotas the request path pays nothing for them."""
        quotas = ClientQuotas(self.config["quota.window.num"], self.config["quota.window.size.seconds"],
                              on_active=lambda active: dispatcher.set_quotas(quotas if active else None))
        quotas.update(self.metadata.image.client_quotas)
        return quotas

    def _connection_rates(self) -> ConnectionRates:
        """KIP-612 connection creation rates: broker-wide (dynamic), per listener, per ip quota."""
        rates = ConnectionRates(self.config["quota.window.num"], self.config["quota.window.size.seconds"],
                                self._effective("max.connection.creation.rate"),
                                listener_rates(self.config.originals, [lst.name for lst in self.config.listeners]))
        rates.set_ip_quotas(self.metadata.image.client_quotas)
        return rates

    def _effective(self, key: str) -> Any:
        return effective_broker_config(
            self.config, config_layers(self.config, self.metadata.image.broker_configs, self.node_id))[key]

    def _on_metadata_delta(self, delta: Any) -> None:
        if delta.client_quotas_changed and self.client_quotas is not None:
            self.client_quotas.update(self.metadata.image.client_quotas)
            if self.socket_server is not None:
                self.socket_server.rates.set_ip_quotas(self.metadata.image.client_quotas)
        if delta.changed_broker_configs and self.socket_server is not None:
            self.socket_server.rates.set_broker_limit(self._effective("max.connection.creation.rate"))
        if delta.changed_broker_configs and self.socket_server is not None:
            limits = self._connection_limits()
            quotas = self.socket_server.quotas
            if limits != (quotas.max_connections, quotas.max_per_ip, self._applied_overrides):
                log.info("connection limits now max.connections=%d max.connections.per.ip=%d overrides=%s", *limits)
                self._applied_overrides = limits[2]
                self.socket_server.reconfigure_quotas(*limits)

    def fail(self, reason: str) -> None:
        """Stop because this broker can no longer do its job (Kafka's fatal + Exit.halt, but orderly):
        ``reason`` is logged as the one error line, then the normal shutdown runs and main exits 1."""
        if self.fatal_reason is not None or self.stopping:
            return
        self.fatal_reason = reason
        log.error("%s", reason)
        self.stop_requested.set()

    def _start_metrics(self) -> None:
        metrics = self.metrics
        assert metrics is not None, "built in start when odradek.metrics.port >= 0"
        server = self.socket_server
        assert server is not None, "metrics start after the listeners"
        rm = self.replica_manager
        metrics.gauge("odradek_connections", "Open client connections", lambda: len(server.connections()))
        metrics.gauge("odradek_partitions", "Partitions hosted by this broker", lambda: len(rm.partitions))
        metrics.gauge("odradek_fetch_purgatory_size", "Fetches waiting in the purgatory",
                      lambda: rm.fetch_purgatory.delayed)
        metrics.gauge("odradek_request_queue_size", "Requests waiting in the request queue",
                      lambda: len(server.channel.queue))
        metrics.gauge("odradek_request_queue_bytes", "Bytes reserved by requests being read or queued (counted when queued.max.request.bytes > 0)",
                      lambda: server.channel.pool.used)
        metrics.gauge("odradek_connections_rejected_total",
                      "Connections closed at accept for exceeding max.connections.per.ip(.overrides)",
                      lambda: server.quotas.rejected)
        # Kafka's kafka.log:type=LogManager,name=OfflineLogDirectoryCount and, per dir,
        # name=LogDirectoryOffline (1 = offline): alert on these, the process stays up while one
        # of several dirs is offline.
        lm = rm.log_manager
        metrics.gauge("odradek_offline_log_directory_count", "Log directories offline after an I/O error",
                      lambda: len(lm.offline_dirs))
        for d in lm.log_dirs:
            metrics.gauge("odradek_log_directory_offline", "1 if the log directory is offline, else 0",
                          functools.partial(_is_offline, lm, d), labels={"log_directory": str(d)})
        self._kafka_gauges(metrics)
        if self.client_quotas is not None:
            metrics.registry.register(QuotaMetrics(self.client_quotas, server.rates))
        assert self.client_telemetry is not None, "built with the metrics"
        metrics.registry.register(self.client_telemetry)
        self.metrics_port = metrics.serve(self.config["odradek.metrics.host"], self.config["odradek.metrics.port"])

    def _kafka_gauges(self, metrics: Any) -> None:
        """Kafka's gauges under the names the Prometheus JMX exporter gives them (odradek.broker.runtime.metrics).
        Each is computed at scrape time, so nothing on the request path pays for it."""
        server = self.socket_server
        assert server is not None, "metrics start after the listeners"
        rm = self.replica_manager
        lm = rm.log_manager
        node = self.node_id
        metrics.topic_stats.existing = lambda: self.metadata.image.topics

        def led() -> list[Any]:
            return [p for p in list(rm.partitions.values()) if p.leader == node]

        metrics.gauge("kafka_server_replicamanager_partitioncount", "Partitions on this broker",
                      lambda: len(rm.partitions))
        metrics.gauge("kafka_server_replicamanager_leadercount", "Partitions this broker leads",
                      lambda: len(led()))
        metrics.gauge("kafka_server_replicamanager_underreplicatedpartitions",
                      "Led partitions whose ISR is smaller than their replica set",
                      lambda: sum(1 for p in led() if len(p.isr) < len(p.replicas)))
        metrics.gauge("kafka_server_replicamanager_offlinereplicacount",
                      "Partitions whose log is in an offline log directory",
                      lambda: sum(1 for p in list(rm.partitions.values()) if p.offline))
        metrics.gauge("kafka_network_requestchannel_requestqueuesize", "Requests waiting in the request queue",
                      lambda: len(server.channel.queue))
        # SocketServer's request memory pool (queued.max.request.bytes): Kafka's size - available.
        pool = server.channel.pool
        metrics.gauge("kafka_network_socketserver_memorypoolavailable",
                      "Bytes of queued.max.request.bytes not reserved by requests being read or queued",
                      pool.available)
        metrics.gauge("kafka_network_socketserver_memorypoolused",
                      "Bytes reserved by requests being read or queued (queued.max.request.bytes)",
                      lambda: pool.used)
        metrics.gauge("kafka_server_delayedoperationpurgatory_purgatorysize", "Operations waiting in a purgatory",
                      lambda: rm.fetch_purgatory.delayed, labels={"delayedOperation": "Fetch"})
        metrics.gauge("kafka_server_delayedoperationpurgatory_purgatorysize", "Operations waiting in a purgatory",
                      lambda: rm.produce_purgatory.delayed, labels={"delayedOperation": "Produce"})
        metrics.gauge("kafka_server_delayedoperationpurgatory_purgatorysize", "Operations waiting in a purgatory",
                      lambda: rm.share_fetch_purgatory.delayed, labels={"delayedOperation": "ShareFetch"})
        # Share groups (KIP-932): BrokerTopicMetrics' share counts and ShareGroupMetrics
        # (broker/share/share_metrics.py), and the group coordinator's share-group gauges, Kafka's
        # kafka.server:type=group-coordinator-metrics group-count{protocol=share} and
        # share-group-count{state}, named as the JMX exporter's default rule names them.
        share_metrics = self.share_partitions.metrics
        share_metrics.existing = lambda: self.metadata.image.topics
        metrics.registry.register(share_metrics)
        assert self.group_coordinator is not None, "metrics start after the coordinators"
        share_groups = self.group_coordinator.ctx.share_groups
        metrics.gauge("kafka_server_group_coordinator_metrics_group_count", "Groups on this coordinator, by protocol",
                      lambda: len(share_groups), labels={"protocol": "share"})
        for state in ("Empty", "Stable", "Dead"):
            metrics.gauge("kafka_server_group_coordinator_metrics_share_group_count", "Share groups, by state",
                          lambda state=state: sum(1 for g in list(share_groups.values()) if g.state == state),
                          labels={"state": state})
        metrics.gauge("kafka_log_logmanager_offlinelogdirectorycount", "Log directories offline after an I/O error",
                      lambda: len(lm.offline_dirs))
        for d in lm.log_dirs:
            metrics.gauge("kafka_log_logmanager_logdirectoryoffline", "1 if the log directory is offline, else 0",
                          lambda d=d: 1 if d in lm.offline_dirs else 0, labels={"logDirectory": str(d)})
        # Kafka's BrokerState: 3 = RUNNING, 6 = PENDING_CONTROLLED_SHUTDOWN (metrics start once running).
        metrics.gauge("kafka_server_kafkaserver_brokerstate", "Broker state (3 = running, 6 = shutting down)",
                      lambda: 6 if self.stopping else 3)

    async def shutdown(self) -> bool:
        """Stop everything, in order; False if some state could not be saved (see the docstring).

        Each step runs even when an earlier one failed: a faulty disk must not leave sockets open
        or the process hanging. Expected failures (OSError, storage errors) are collected into
        one final line; anything else is logged with its traceback, as a bug.
        """
        self.stopping = True
        if self._unsubscribe_limits is not None:
            self._unsubscribe_limits()
        problems: list[str] = []

        async def step(what: str, fn: Any) -> None:
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except (OSError, KafkaApiError) as exc:
                problems.append(f"{what}: {exc}")
            except Exception:
                log.exception("%s failed during shutdown", what)
                problems.append(f"{what} failed")

        server = self.socket_server
        cluster = self.cluster
        if cluster is not None and self.fatal_reason is None and self.config["controlled.shutdown.enable"]:
            # Leaderships move while this broker still answers (Kafka's controlled shutdown): clients
            # learn the new leaders from NOT_LEADER_OR_FOLLOWER and their next Metadata.
            await step("controlled shutdown", lambda: cluster.controlled_shutdown(
                self.config["controlled.shutdown.timeout.ms"] / 1000))
        if server is not None:
            server.stop_accepting()
            await step("draining requests", lambda: server.drain(SHUTDOWN_DRAIN_SECONDS))
            await step("closing connections", server.close_all)
        for task in self._background:
            task.cancel()
        if self.group_coordinator is not None:
            await step("stopping the group coordinator", self.group_coordinator.shutdown)
        if self.txn_coordinator is not None:
            await step("stopping the transaction coordinator", self.txn_coordinator.shutdown)
        if self.share_state is not None:
            await step("stopping the share-state store", self.share_state.shutdown)
            await step("stopping the share persister", self.share_persister.close)
            await step("stopping the partition end offsets client", self.partition_end_offsets.close)
        if self.metrics is not None:
            await step("stopping metrics", self.metrics.shutdown)
        if self.fault_admin is not None:
            await step("stopping the fault injection endpoint", self.fault_admin.shutdown)
        rm: ReplicaManager | None = vars(self).get("replica_manager")
        if rm is not None:
            await step("closing logs", rm.shutdown)
            lm = rm.log_manager
            # After fail() the offline dirs were the reason, already logged.
            for d in sorted(lm.offline_dirs) if self.fatal_reason is None else ():
                problems.append(f"log dir {d} is offline ({lm.offline_reasons.get(d, 'I/O error')}), "
                                "its logs were not closed cleanly and are recovered at the next start")
        if self.reaper is not None:
            self.reaper.stop()
        if self.embedded_controller is not None:
            await step("releasing the controller lease", self.embedded_controller.shutdown)
        if cluster is not None:
            await step("leaving the cluster", cluster.stop)
        self.io_pool.shutdown(wait=True)
        if self.dir_locks is not None:  # last: nothing writes to the dirs any more
            self.dir_locks.release()
        if problems:
            log.error("Odradek broker %d shut down with errors: %s", self.node_id, "; ".join(problems))
            return False
        if self.fatal_reason is not None:
            log.info("Odradek broker %d shut down", self.node_id)
            return False
        if not self.started:
            # After a failed start "shut down cleanly" read as if the broker had run; the line above
            # this one says why it did not.
            log.info("Odradek broker %d did not start; what it had opened is closed", self.node_id)
            return True
        log.info("Odradek broker %d shut down cleanly", self.node_id)
        return True


def _is_offline(log_manager: Any, log_dir: Any) -> int:
    """The LogDirectoryOffline gauge of one log dir: 1 if offline, else 0."""
    return 1 if log_dir in log_manager.offline_dirs else 0
