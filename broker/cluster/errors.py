"""Why a node cannot join its cluster: the errors that refuse a start with one clear line.

Kept apart from the modules that talk to etcd, so that ``odradek.broker.main`` can name them without
importing the etcd client (and gRPC) on a single node.
"""

from __future__ import annotations

from odradek.controller.meta_properties import MetaPropertiesError


class ClusterIdentityError(Exception):
    """This node's data or configuration belongs to another cluster than its metadata.store holds."""


class DuplicateNodeIdError(Exception):
    """Another live process is registered with this node.id."""


class StartAborted(Exception):
    """The broker was asked to stop while it waited for the metadata store."""


# odradek.broker.main prints these as "Odradek failed to start: <message>" and exits 1.
STARTUP_REFUSALS: tuple[type[Exception], ...] = (ClusterIdentityError, DuplicateNodeIdError, MetaPropertiesError)
