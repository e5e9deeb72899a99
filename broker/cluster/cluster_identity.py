"""The cluster id of a node in cluster mode: agreed through etcd, checked against ``meta.properties``.

Kafka stamps every data directory with its cluster id (``kafka-storage format``) and refuses to
start a node whose directory belongs to another cluster. Here the first node to start writes the id
to ``/odradek/cluster_id`` (a create-if-absent transaction, so two first nodes cannot both win);
every node then adopts it. The id the first node proposes is, in order: ``cluster.id`` from the
config, the id already in its ``meta.properties``, a new random one.

Refusals (``ClusterIdentityError``, one clear line, the process exits non-zero):
- ``meta.properties`` names another cluster than etcd holds: the directory has another cluster's data;
- ``cluster.id`` is set and differs from etcd's;
- ``meta.properties`` names another node id (``MetaPropertiesError`` from ``odradek.controller.meta_properties``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from odradek.broker.cluster.errors import ClusterIdentityError
from odradek.broker.cluster.keys import CLUSTER_ID_KEY
from odradek.controller.meta_properties import (
    META_PROPERTIES,
    load_or_create_cluster_id,
    new_cluster_id,
    read_cluster_id,
)


async def agree_cluster_id(client: Any, metadata_dir: Path, node_id: int, configured: str | None) -> str:
    """The cluster id of the etcd behind ``client``, written there first if this node is the first.

    ``meta.properties`` in ``metadata_dir`` is created with it when absent. Blocking file work is a
    few small reads and at most one small write, done once at start-up.
    """
    local = read_cluster_id(metadata_dir, node_id)
    proposal = configured or local or new_cluster_id()
    t = client.transactions
    succeeded, responses = await client.transaction(
        compare=[t.create(CLUSTER_ID_KEY) == 0],
        success=[t.put(CLUSTER_ID_KEY, proposal.encode())],
        failure=[t.get(CLUSTER_ID_KEY)],
    )
    cluster_id = proposal if succeeded else bytes(responses[0][0][0]).decode()
    where = Path(metadata_dir) / META_PROPERTIES
    if local is not None and local != cluster_id:
        raise ClusterIdentityError(
            f"{where} says this node belongs to cluster {local}, but the metadata.store holds cluster "
            f"{cluster_id}: this data directory has another cluster's data. Point log.dirs (or "
            "metadata.log.dir) at this cluster's directory or an empty one, or metadata.store at the "
            "other cluster's etcd.")
    if configured is not None and configured != cluster_id:
        raise ClusterIdentityError(
            f"cluster.id={configured} is configured, but the metadata.store holds cluster {cluster_id}.")
    if local is None:
        load_or_create_cluster_id(metadata_dir, node_id, cluster_id)
    return cluster_id
