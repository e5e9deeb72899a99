"""Where a cluster lives in etcd: one prefix per cluster id, one key or sub-prefix per concern.

    /odradek/cluster_id                       the id of the cluster this etcd (prefix) holds
    /odradek/<cluster-id>/controller          leader key of the controller lease (odradek.controller.etcd_lease)
    /odradek/<cluster-id>/controller_epoch    newest controller epoch ever handed out
    /odradek/<cluster-id>/metadata/head       {next_offset, newest_epoch} (odradek.controller.etcd_log_store)
    /odradek/<cluster-id>/metadata/log/<n>    one committed metadata batch, base offset n (20 digits)
    /odradek/<cluster-id>/metadata/snapshot   the newest metadata snapshot's manifest, and its chunks
    /odradek/<cluster-id>/metadata/snapshots/<n>-<token>/<i>     under these (odradek.controller.etcd_log_store)
    /odradek/<cluster-id>/brokers/<node id>   a live broker's registration, attached to its session lease

The cluster id key is written once (create-if-absent) by the first node of a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = "/odradek"
CLUSTER_ID_KEY = f"{ROOT}/cluster_id".encode()


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    cluster_id: str

    @property
    def prefix(self) -> str:
        """Of the lease store (controller and controller_epoch keys live right under it)."""
        return f"{ROOT}/{self.cluster_id}"

    @property
    def metadata_prefix(self) -> str:
        """Of the metadata log store."""
        return f"{self.prefix}/metadata"

    @property
    def brokers_prefix(self) -> bytes:
        return f"{self.prefix}/brokers/".encode()

    def broker_key(self, node_id: int) -> bytes:
        return self.brokers_prefix + str(node_id).encode()
